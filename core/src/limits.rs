//! Per-model admission limits shared by every batch a coordinator supervises (fleet-wide rate
//! limits): at most `concurrency` jobs of a model in flight, and, optionally, at most
//! `concurrency` admissions in any window of `per`. The model API quota is shared by every
//! worker, and the coordinator is the one place that admits jobs, so limiting admission limits
//! the fleet.
//!
//! The state is plain data behind a mutex; the clock is passed in (`now`), so the rules are
//! tested without sleeping. A job's model is its cell's `model` axis, or `default` for jobs that
//! run on their session's model.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use std::time::Instant;

/// The model name of jobs without a model axis.
pub const DEFAULT_MODEL_KEY: &str = "default";

/// One `--model-limit` rule: `MODEL=CONCURRENCY[/PERIOD]`, e.g. `claude-sonnet=20/4s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelLimit {
    /// Matches a model whose name starts with it (`claude-sonnet` matches
    /// `claude-sonnet-4-5`); `default` matches jobs without a model axis.
    pub model_prefix: String,
    /// Jobs of the model in flight (admitted, not finished) at most.
    pub concurrency: u32,
    /// With a period: at most `concurrency` admissions in any window of this length.
    pub per: Option<Duration>,
}

impl ModelLimit {
    /// Parses `MODEL=CONCURRENCY[/PERIOD]`.
    pub fn parse(text: &str) -> Result<ModelLimit, String> {
        let (model, limit) = text.split_once('=').ok_or_else(|| {
            format!("{text:?}: expected MODEL=CONCURRENCY[/PERIOD], e.g. claude-sonnet=20/4s")
        })?;
        let model = model.trim();
        if model.is_empty() {
            return Err(format!("{text:?}: the model name is empty"));
        }
        let (count, per) = match limit.split_once('/') {
            Some((count, per)) => (count, Some(per)),
            None => (limit, None),
        };
        let concurrency: u32 = count
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{text:?}: the concurrency must be a whole number above 0"))?;
        let per = per
            .map(|per| {
                cowork_schema::duration::parse_duration(per.trim())
                    .map_err(|problem| format!("{text:?}: the period {problem}"))
                    .and_then(|per| {
                        if per.is_zero() {
                            Err(format!("{text:?}: the period must be above 0"))
                        } else {
                            Ok(per)
                        }
                    })
            })
            .transpose()?;
        Ok(ModelLimit {
            model_prefix: model.to_owned(),
            concurrency,
            per,
        })
    }

    fn matches(&self, model: &str) -> bool {
        model.starts_with(&self.model_prefix)
    }
}

impl std::fmt::Display for ModelLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.model_prefix, self.concurrency)?;
        if let Some(per) = self.per {
            write!(f, "/{}", cowork_schema::duration::format_duration(per))?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct RuleState {
    in_flight: u32,
    /// Admission times inside the current window (rate rules only).
    starts: VecDeque<Instant>,
    max_in_flight: u32,
}

/// Why a job may not be admitted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// The model's concurrency is used up; wait for a job of it to finish.
    Concurrency,
    /// The model's start rate is used up until this instant.
    RateUntil(Instant),
}

/// The limits of one coordinator (or one `cowork run`), shared by its batches.
#[derive(Debug, Default)]
pub struct ModelLimits {
    rules: Vec<ModelLimit>,
    state: Mutex<BTreeMap<usize, RuleState>>,
}

impl ModelLimits {
    pub fn new(rules: Vec<ModelLimit>) -> ModelLimits {
        ModelLimits {
            rules,
            state: Mutex::new(BTreeMap::new()),
        }
    }

    /// The configured rules.
    pub fn rules(&self) -> &[ModelLimit] {
        &self.rules
    }

    /// The rule that applies to `model` (the first that matches).
    pub fn rule_of(&self, model: &str) -> Option<usize> {
        self.rules.iter().position(|rule| rule.matches(model))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, RuleState>> {
        // Plain counters, updated in single statements: a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a slot for a job of `model` at `now`, or says why not.
    pub fn try_acquire(&self, model: &str, now: Instant) -> Result<(), Held> {
        let Some(index) = self.rule_of(model) else {
            return Ok(());
        };
        let rule = &self.rules[index];
        let mut state = self.lock();
        let entry = state.entry(index).or_default();
        if entry.in_flight >= rule.concurrency {
            return Err(Held::Concurrency);
        }
        if let Some(per) = rule.per {
            while entry
                .starts
                .front()
                .is_some_and(|start| now.duration_since(*start) >= per)
            {
                entry.starts.pop_front();
            }
            if entry.starts.len() as u32 >= rule.concurrency {
                let oldest = *entry
                    .starts
                    .front()
                    .expect("the window is full, so not empty");
                return Err(Held::RateUntil(oldest + per));
            }
            entry.starts.push_back(now);
        }
        entry.in_flight += 1;
        entry.max_in_flight = entry.max_in_flight.max(entry.in_flight);
        Ok(())
    }

    /// Counts a job of `model` that is already running (a worker started it before this
    /// process admitted anything): it holds a slot whatever the limit, so nothing new of its
    /// model is admitted until the running ones fit, and the most seen at once says what
    /// happened. It is not a new start, so a rate window does not count it.
    pub fn adopt(&self, model: &str) -> bool {
        let Some(index) = self.rule_of(model) else {
            return false;
        };
        let mut state = self.lock();
        let entry = state.entry(index).or_default();
        entry.in_flight += 1;
        entry.max_in_flight = entry.max_in_flight.max(entry.in_flight);
        true
    }

    /// Gives back the slot of a finished (or abandoned) job of `model`.
    pub fn release(&self, model: &str) {
        let Some(index) = self.rule_of(model) else {
            return;
        };
        if let Some(entry) = self.lock().get_mut(&index) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
        }
    }

    /// Jobs in flight and the most seen at once, per rule (as `MODEL=…` text).
    pub fn snapshot(&self) -> Vec<(String, u32, u32)> {
        let state = self.lock();
        self.rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                let entry = state.get(&index);
                (
                    rule.to_string(),
                    entry.map_or(0, |e| e.in_flight),
                    entry.map_or(0, |e| e.max_in_flight),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print() {
        let rule = ModelLimit::parse("claude-sonnet=20/4s").expect("valid");
        assert_eq!(rule.model_prefix, "claude-sonnet");
        assert_eq!(rule.concurrency, 20);
        assert_eq!(rule.per, Some(Duration::from_secs(4)));
        assert_eq!(rule.to_string(), "claude-sonnet=20/4s");
        let rule = ModelLimit::parse("default=3").expect("valid");
        assert_eq!((rule.concurrency, rule.per), (3, None));
        for bad in ["claude", "=3", "m=0", "m=x", "m=3/0s", "m=3/soon"] {
            assert!(ModelLimit::parse(bad).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn concurrency_is_held_until_a_release() {
        let limits = ModelLimits::new(vec![ModelLimit::parse("claude-sonnet=2").expect("valid")]);
        let now = Instant::now();
        assert_eq!(limits.try_acquire("claude-sonnet-4-5", now), Ok(()));
        assert_eq!(limits.try_acquire("claude-sonnet-4-5", now), Ok(()));
        assert_eq!(
            limits.try_acquire("claude-sonnet-4-5", now),
            Err(Held::Concurrency)
        );
        // Other models are not limited by this rule.
        assert_eq!(limits.try_acquire("claude-opus-4-8", now), Ok(()));
        limits.release("claude-sonnet-4-5");
        assert_eq!(limits.try_acquire("claude-sonnet-4-5", now), Ok(()));
        assert_eq!(
            limits.snapshot(),
            vec![("claude-sonnet=2".to_owned(), 2, 2)]
        );
    }

    #[test]
    fn adopted_running_jobs_hold_slots_over_the_limit() {
        let limits = ModelLimits::new(vec![ModelLimit::parse("m=2/10s").expect("valid")]);
        let now = Instant::now();
        assert!(limits.adopt("m") && limits.adopt("m") && limits.adopt("m"));
        assert!(!limits.adopt("other"), "no rule, no slot");
        assert_eq!(limits.try_acquire("m", now), Err(Held::Concurrency));
        limits.release("m");
        assert_eq!(limits.try_acquire("m", now), Err(Held::Concurrency));
        limits.release("m");
        assert_eq!(
            limits.try_acquire("m", now),
            Ok(()),
            "adoptions are not starts of the rate window"
        );
        assert_eq!(limits.snapshot(), vec![("m=2/10s".to_owned(), 2, 3)]);
    }

    #[test]
    fn start_rate_holds_until_the_window_moves() {
        let limits = ModelLimits::new(vec![ModelLimit::parse("m=2/10s").expect("valid")]);
        let t0 = Instant::now();
        assert_eq!(limits.try_acquire("m", t0), Ok(()));
        limits.release("m");
        assert_eq!(limits.try_acquire("m", t0 + Duration::from_secs(1)), Ok(()));
        limits.release("m");
        // Two admissions in the last 10 s: the third waits until the first leaves the window.
        assert_eq!(
            limits.try_acquire("m", t0 + Duration::from_secs(2)),
            Err(Held::RateUntil(t0 + Duration::from_secs(10)))
        );
        assert_eq!(
            limits.try_acquire("m", t0 + Duration::from_secs(10)),
            Ok(())
        );
    }
}
