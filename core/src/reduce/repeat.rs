//! [`RepeatFold`]: the reference loop of harness-behaviour.md#repeat-loop as an incremental,
//! index-order reducer (harness-behaviour.md#index-order-reducer) for one scenario file or one
//! matrix cell.
//!
//! Outcomes may be offered in any order. The fold keeps a cursor `next` (every index below it is
//! resolved), folds the outcome at `next` as soon as it arrives, then drains any buffered
//! successors. A folded run is reduced into running totals and dropped, so a fold of N in-order
//! outcomes holds O(distinct signal codes + assertion positions + provenance strings) memory,
//! whatever N is.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use cowork_schema::event::JobOutcome;
use cowork_schema::rollup::{PerAssertion, Provenance, RepeatRollup, StopReason};
use cowork_schema::run_result::{EMPTY_ASSERTION_KEY, RunView};
use indexmap::{IndexMap, IndexSet};

use super::{Offer, StopRules};

/// An outcome left out of the rollup because its index lies beyond the stop index.
#[derive(Clone, Debug, PartialEq)]
pub struct DiscardedRun {
    pub index: u32,
    /// `cost.usd` of a discarded completed run: money spent outside the rollup
    /// (harness-behaviour.md#safe-cancellation).
    pub cost_usd: Option<f64>,
    /// `true` when the discarded outcome was a completed run (not an error or unanswered gate).
    pub completed: bool,
}

/// Running counts of one assertion position (`perAssertion`, harness-behaviour.md#per-assertion).
#[derive(Clone, Debug, Default)]
struct AssertionTally {
    passes: u32,
    fails: u32,
    /// Key of the last folded run that has this position (`None` for `{}`).
    last_key: Option<String>,
    sample_failure: Option<String>,
}

/// The running state of harness-behaviour.md#repeat-loop over the folded prefix.
#[derive(Clone, Debug, Default)]
struct Tally {
    completed: u32,
    passes: u32,
    signal_histogram: IndexMap<String, u64>,
    per_assertion: Vec<AssertionTally>,
    /// Sum of `cost.usd` in fold order; it is both `totalCostUsd` and the budget's `spent`.
    cost_sum: f64,
    any_cost: bool,
    token_sum: f64,
    any_tokens: bool,
    non_deterministic_runs: u32,
    models: IndexSet<String>,
    skills: IndexSet<String>,
    ablated_runs: u32,
    simulated_runs: u32,
    saw_pass: bool,
    saw_fail: bool,
    /// A folded run lacked `cost.usd` while a budget was set: no budget stop from now on.
    telemetry_missing: bool,
}

/// The index-order fold of one repeat batch.
#[derive(Clone, Debug)]
pub struct RepeatFold {
    label: String,
    requested: u32,
    rules: StopRules,
    /// Every index below `next` is resolved.
    next: u32,
    /// Outcomes offered above `next`, waiting for the gap to close.
    buffered: BTreeMap<u32, JobOutcome>,
    stop: Option<StopReason>,
    /// Why the run the fold stopped at ended without a result, when it did (a stop for an
    /// error or an unanswered question): the rollup has no place for it, the summary does.
    stop_message: Option<(String, String)>,
    /// Set once the fold is final: the index at which the loop left.
    decided: Option<u32>,
    is_final: bool,
    tally: Tally,
    discarded: Vec<DiscardedRun>,
    /// Indices in `discarded`, so a redelivered overshoot is a duplicate in O(1).
    discarded_indices: HashSet<u32>,
}

impl RepeatFold {
    /// A fold for `requested` iterations of the unit named `label` (the rollup's `scenario`).
    pub fn new(label: String, requested: u32, rules: StopRules) -> RepeatFold {
        RepeatFold {
            label,
            requested,
            rules,
            next: 0,
            buffered: BTreeMap::new(),
            stop: None,
            stop_message: None,
            decided: None,
            // Zero iterations need no outcome (the planner never asks for it, but it must not
            // wait forever).
            is_final: requested == 0,
            tally: Tally::default(),
            discarded: Vec::new(),
            discarded_indices: HashSet::new(),
        }
    }

    /// Offers the outcome of repeat index `index`. The first outcome of an index wins.
    pub fn offer(&mut self, index: u32, outcome: JobOutcome) -> Offer {
        if index >= self.requested {
            return Offer::Unexpected;
        }
        if self.is_final {
            if self.decided.is_some_and(|stop_index| index <= stop_index)
                || self.discarded_indices.contains(&index)
            {
                return Offer::Duplicate;
            }
            self.discard(index, &outcome);
            return Offer::Discarded;
        }
        if index < self.next || self.buffered.contains_key(&index) {
            return Offer::Duplicate;
        }
        if index > self.next {
            self.buffered.insert(index, outcome);
            return Offer::Buffered;
        }
        self.resolve(index, outcome);
        while !self.is_final {
            let Some(outcome) = self.buffered.remove(&self.next) else {
                break;
            };
            self.resolve(self.next, outcome);
        }
        if self.is_final {
            // Everything still buffered lies beyond the stop index.
            for (index, outcome) in std::mem::take(&mut self.buffered) {
                self.discard(index, &outcome);
            }
        }
        Offer::Folded
    }

    fn discard(&mut self, index: u32, outcome: &JobOutcome) {
        let (cost_usd, completed) = match outcome {
            JobOutcome::Completed { run } => (run.cost_usd, true),
            JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => (None, false),
        };
        self.discarded_indices.insert(index);
        self.discarded.push(DiscardedRun {
            index,
            cost_usd,
            completed,
        });
    }

    /// One iteration of harness-behaviour.md#repeat-loop / harness-behaviour.md#index-order-reducer
    /// at `index == self.next`.
    fn resolve(&mut self, index: u32, outcome: JobOutcome) {
        self.next = index + 1;
        let stop = match outcome {
            // Step 1 of harness-behaviour.md#repeat-loop: a throwing iteration is not folded and
            // its spend is not counted.
            JobOutcome::Unanswered { message, .. } => {
                self.stop_message = Some((
                    "unanswered".to_owned(),
                    format!("unanswered question: {message}"),
                ));
                Some(StopReason::Unanswered)
            }
            JobOutcome::Error { category, message } => {
                self.stop_message = Some((category.to_string(), message));
                Some(StopReason::Error)
            }
            JobOutcome::Completed { run } => self.fold(index, run),
        };
        if stop.is_some() || self.next == self.requested {
            self.stop = stop;
            self.decided = Some(index);
            self.is_final = true;
        }
    }

    /// Steps 2 to 5 of harness-behaviour.md#repeat-loop for a completed run; returns the stop it
    /// triggers.
    fn fold(&mut self, index: u32, run: RunView) -> Option<StopReason> {
        let tally = &mut self.tally;
        let RunView {
            pass,
            signals,
            assertions,
            cost_usd,
            tokens_total,
            non_deterministic,
            provenance_model,
            provenance_skill,
            ablated,
            simulated,
            ..
        } = run;
        tally.completed += 1;
        if pass {
            tally.passes += 1;
            tally.saw_pass = true;
        } else {
            tally.saw_fail = true;
        }
        for signal in signals {
            // Look up by `&str` first so a known code costs no allocation.
            match tally.signal_histogram.get_mut(signal.code.as_str()) {
                Some(count) => *count += 1,
                None => {
                    tally.signal_histogram.insert(signal.code, 1);
                }
            }
        }
        if tally.per_assertion.len() < assertions.len() {
            tally
                .per_assertion
                .resize_with(assertions.len(), AssertionTally::default);
        }
        for (position, entry) in assertions.into_iter().enumerate() {
            let slot = &mut tally.per_assertion[position];
            if entry.pass {
                slot.passes += 1;
            } else {
                slot.fails += 1;
                if slot.sample_failure.is_none() {
                    slot.sample_failure = entry.message;
                }
            }
            slot.last_key = entry.key;
        }
        if let Some(cost) = cost_usd {
            tally.cost_sum += cost;
            tally.any_cost = true;
        }
        if let Some(tokens) = tokens_total {
            tally.token_sum += tokens;
            tally.any_tokens = true;
        }
        if non_deterministic {
            tally.non_deterministic_runs += 1;
        }
        if !tally.models.contains(provenance_model.as_str()) {
            tally.models.insert(provenance_model);
        }
        if !tally.skills.contains(provenance_skill.as_str()) {
            tally.skills.insert(provenance_skill);
        }
        if ablated {
            tally.ablated_runs += 1;
        }
        if simulated {
            tally.simulated_runs += 1;
        }

        // Step 4 of harness-behaviour.md#repeat-loop: divergence, with no "iterations remain"
        // guard, before the budget.
        if self.rules.stop_on_diverge && tally.saw_pass && tally.saw_fail {
            return Some(StopReason::Diverged);
        }
        // Step 5 of harness-behaviour.md#repeat-loop: the budget. The first unpriced run in index
        // order disables it for good.
        if let Some(cap) = self.rules.max_budget_usd {
            if cost_usd.is_none() {
                tally.telemetry_missing = true;
            }
            if !tally.telemetry_missing && index + 1 < self.requested && tally.cost_sum >= cap {
                return Some(StopReason::Budget);
            }
        }
        None
    }

    /// Ends the fold with what it folded so far, as a budget stop: the batch-wide budget (a
    /// fleet feature beside the CLI's per-unit budget, harness-behaviour.md#choice-c6) stopped
    /// admission. Buffered outcomes beyond the folded prefix are discarded. Returns `false` if the
    /// fold was final.
    pub fn stop_for_batch_budget(&mut self) -> bool {
        if self.is_final {
            return false;
        }
        for (index, outcome) in std::mem::take(&mut self.buffered) {
            self.discard(index, &outcome);
        }
        self.stop = Some(StopReason::Budget);
        // The loop left before index `next`: the last folded index, if any, is the stop index.
        self.decided = self.next.checked_sub(1);
        self.is_final = true;
        true
    }

    /// Ends the fold with what it folded so far and no stop reason: the batch was interrupted
    /// before the rest of the unit's runs happened, and a re-judging wants the runs there are.
    /// Its rollup then has `completed < requested` without `stoppedEarly`; the caller marks the
    /// batch incomplete. Buffered outcomes beyond a gap are discarded. Returns `false` if the
    /// fold was final.
    pub fn close_incomplete(&mut self) -> bool {
        if self.is_final {
            return false;
        }
        for (index, outcome) in std::mem::take(&mut self.buffered) {
            self.discard(index, &outcome);
        }
        self.decided = self.next.checked_sub(1);
        self.is_final = true;
        true
    }

    /// The unit's label (the rollup's `scenario`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// N of `--repeat N`.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// The stop index k once the fold is final: the index whose outcome ended the loop (a stop
    /// rule fired or an iteration threw), or N-1. Jobs with an index above k may be cancelled
    /// (harness-behaviour.md#safe-cancellation).
    pub fn decided(&self) -> Option<u32> {
        self.decided
    }

    /// The lowest index whose outcome the fold is waiting for; `None` once final.
    pub fn next_needed(&self) -> Option<u32> {
        if self.is_final { None } else { Some(self.next) }
    }

    /// `true` once the rollup can no longer change.
    pub fn is_final(&self) -> bool {
        self.is_final
    }

    /// `true` when a budget is set and a folded run lacked `cost.usd`, which disabled the
    /// budget stop for the rest of the unit (the CLI warns once).
    pub fn telemetry_missing_warned(&self) -> bool {
        self.tally.telemetry_missing
    }

    /// The repeat indices of the folded completed runs, in order. Folding is in index order
    /// and stops at the first throwing iteration, so they are always `0..completed`.
    pub fn folded_indices(&self) -> Range<u32> {
        0..self.tally.completed
    }

    /// Why the run the fold stopped at had no result (an error or an unanswered question):
    /// its category and message.
    pub fn stop_message(&self) -> Option<(&str, &str)> {
        self.stop_message
            .as_ref()
            .map(|(category, message)| (category.as_str(), message.as_str()))
    }

    /// Folded runs made by the `sim` executor.
    pub fn simulated_runs(&self) -> u32 {
        self.tally.simulated_runs
    }

    /// Outcomes left out because they lie beyond the stop index, in the order they were
    /// discarded.
    pub fn discarded(&self) -> &[DiscardedRun] {
        &self.discarded
    }

    /// Outcomes waiting for a lower index.
    pub fn n_buffered(&self) -> usize {
        self.buffered.len()
    }

    /// The rollup (harness-behaviour.md#repeat-rollup), once final.
    pub fn rollup(&self) -> Option<RepeatRollup> {
        if !self.is_final {
            return None;
        }
        let tally = &self.tally;
        let pass_rate = if tally.completed == 0 {
            0.0
        } else {
            f64::from(tally.passes) / f64::from(tally.completed)
        };
        let per_assertion = tally
            .per_assertion
            .iter()
            .enumerate()
            .map(|(position, slot)| PerAssertion {
                index: u32::try_from(position)
                    .expect("an assertion list longer than u32::MAX cannot be deserialized"),
                key: slot
                    .last_key
                    .clone()
                    .unwrap_or_else(|| EMPTY_ASSERTION_KEY.to_owned()),
                passes: slot.passes,
                fails: slot.fails,
                sample_failure: slot.sample_failure.clone(),
            })
            .collect();
        Some(RepeatRollup {
            scenario: self.label.clone(),
            requested: self.requested,
            completed: tally.completed,
            stopped_early: self.stop,
            passes: tally.passes,
            pass_rate,
            signal_histogram: tally.signal_histogram.clone(),
            per_assertion,
            total_cost_usd: tally.any_cost.then_some(tally.cost_sum),
            total_tokens: tally.any_tokens.then_some(tally.token_sum),
            non_deterministic_runs: tally.non_deterministic_runs,
            provenance: Provenance {
                models: tally.models.iter().cloned().collect(),
                skills: tally.skills.iter().cloned().collect(),
                ablated_runs: tally.ablated_runs,
            },
        })
    }
}
