//! The profile of one job: per field, the first matching rule that sets it, else the default;
//! rates clamped to [0, 1].

use cowork_schema::batch::SimRule;
use cowork_schema::job::JobSpec;

use super::rule_matches;

/// Defaults of the profile fields (decisions.md#executors).
const DEFAULT_PASS_RATE: f64 = 0.9;
const DEFAULT_COST_USD: f64 = 0.05;
pub(super) const DEFAULT_DURATION_MS: u64 = 45_000;
/// How far a run's duration strays from the mean by default: ±50%, like its cost.
pub(super) const DEFAULT_DURATION_SPREAD: f64 = 0.5;

/// The profile in force for one job, after rule resolution and clamping.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedProfile {
    /// Probability that a completed run passes, in [0, 1].
    pub pass_rate: f64,
    /// Mean cost in USD; each run draws uniformly within ±50% of it.
    pub cost_usd: f64,
    /// Mean duration in milliseconds; each run draws uniformly within ±`duration_spread` of it.
    pub duration_ms: u64,
    /// How far durations stray from the mean, as a fraction in [0, 1] (default 0.5).
    pub duration_spread: f64,
    /// Probability that a run has neither `cost` nor `usage`, in [0, 1].
    pub missing_telemetry_rate: f64,
    /// Probability that a run is `nonDeterministic`, in [0, 1].
    pub non_deterministic_rate: f64,
    /// Probability that a run stops at an unanswered gate, in [0, 1].
    pub unanswered_rate: f64,
    /// Factor from simulated to real sleeping time; 0 = no sleep.
    pub time_scale: f64,
    /// Deliveries of the job that fail before the harness would spawn (fault injection).
    pub infra_failures: u32,
    /// Probability of an infrastructure failure after spend (fault injection), in [0, 1].
    pub infra_after_spend_rate: f64,
    /// Probability that a completed run hits the usage limit, in [0, 1].
    pub usage_limit_rate: f64,
}

/// Resolves the profile of `job`: per field, the first matching rule that sets it, else the
/// default. Rates are clamped to [0, 1]; a negative or non-finite value falls back to the
/// default (rates) or to 0 (cost, time scale).
pub fn resolve_profile(job: &JobSpec, rules: &[SimRule]) -> ResolvedProfile {
    let matching: Vec<&SimRule> = rules
        .iter()
        .filter(|rule| rule_matches(rule, job))
        .collect();
    let first_f64 =
        |field: fn(&SimRule) -> Option<f64>| matching.iter().find_map(|rule| field(rule));
    let rate = |field: fn(&SimRule) -> Option<f64>, default: f64| match first_f64(field) {
        Some(value) if value.is_finite() => value.clamp(0.0, 1.0),
        _ => default,
    };
    let non_negative = |field: fn(&SimRule) -> Option<f64>, default: f64| match first_f64(field) {
        Some(value) if value.is_finite() => value.max(0.0),
        Some(_) => 0.0,
        None => default,
    };
    ResolvedProfile {
        pass_rate: rate(|rule| rule.pass_rate, DEFAULT_PASS_RATE),
        cost_usd: non_negative(|rule| rule.cost_usd, DEFAULT_COST_USD),
        duration_ms: matching
            .iter()
            .find_map(|rule| rule.duration_ms)
            .unwrap_or(DEFAULT_DURATION_MS),
        duration_spread: rate(|rule| rule.duration_spread, DEFAULT_DURATION_SPREAD),
        missing_telemetry_rate: rate(|rule| rule.missing_telemetry_rate, 0.0),
        non_deterministic_rate: rate(|rule| rule.non_deterministic_rate, 0.0),
        unanswered_rate: rate(|rule| rule.unanswered_rate, 0.0),
        time_scale: non_negative(|rule| rule.time_scale, 0.0),
        infra_failures: matching
            .iter()
            .find_map(|rule| rule.infra_failures)
            .unwrap_or(0),
        infra_after_spend_rate: rate(|rule| rule.infra_after_spend_rate, 0.0),
        usage_limit_rate: rate(|rule| rule.usage_limit_rate, 0.0),
    }
}
