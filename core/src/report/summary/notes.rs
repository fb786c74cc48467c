//! The lists under a report's tables: failure reasons (every folded run's failures grouped by
//! assertion key and signal code) and stop notes (early stops, errors, truncation, discards).

use std::collections::{BTreeSet, HashSet};

use indexmap::IndexMap;

use super::{FailureReason, ReasonKind, StopNote, UnitReport, UnitStatus, discarded_of};
use crate::report::input::ReportInput;
use crate::report::numbers::usd;

#[derive(Default)]
struct ReasonTally {
    fail: bool,
    occurrences: u64,
    runs: u64,
    units: BTreeSet<(u32, String)>,
    messages: IndexMap<String, u64>,
    /// The job path of the first run holding an entry.
    job: String,
}

/// Failures of every folded run, grouped by assertion key and by signal code.
pub(super) fn failure_reasons(units: &[UnitReport<'_>]) -> Vec<FailureReason> {
    let mut tallies: IndexMap<(ReasonKind, String), ReasonTally> = IndexMap::new();
    for unit in units {
        for run in unit.runs() {
            let Some(findings) = run.findings() else {
                continue;
            };
            let mut seen_in_run: HashSet<(ReasonKind, &str)> = HashSet::new();
            let assertions = findings
                .assertions
                .iter()
                .map(|(key, message)| (ReasonKind::Assertion, key, true, message));
            let signals = findings
                .signals
                .iter()
                .map(|(code, fail, message)| (ReasonKind::Signal, code, *fail, message));
            for (kind, key, fail, message) in assertions.chain(signals) {
                let tally = tallies
                    .entry((kind, key.clone()))
                    .or_insert_with(|| ReasonTally {
                        job: run.job_path(),
                        ..ReasonTally::default()
                    });
                tally.fail |= fail;
                tally.occurrences += 1;
                if seen_in_run.insert((kind, key.as_str())) {
                    tally.runs += 1;
                }
                tally.units.insert((unit.index, unit.id.clone()));
                *tally.messages.entry(message.clone()).or_default() += 1;
            }
        }
    }
    let mut reasons: Vec<FailureReason> = tallies
        .into_iter()
        .map(|((kind, key), tally)| {
            let mut messages: Vec<(String, u64)> = tally.messages.into_iter().collect();
            // Stable: equal counts keep their first-seen order.
            messages.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
            FailureReason {
                kind,
                key,
                fail: tally.fail,
                occurrences: tally.occurrences,
                runs: tally.runs,
                units: tally.units.into_iter().map(|(_, id)| id).collect(),
                messages,
                job: tally.job,
            }
        })
        .collect();
    // Failures before warnings, then the most frequent; ties by kind and key, so the order
    // never depends on hashing.
    reasons.sort_by(|a, b| {
        b.fail
            .cmp(&a.fail)
            .then(b.occurrences.cmp(&a.occurrences))
            .then(a.kind.cmp(&b.kind))
            .then(a.key.cmp(&b.key))
    });
    reasons
}

/// Early stops, cell errors, truncation, discarded overshoot and missing budget telemetry.
pub(super) fn stop_notes(
    input: &ReportInput,
    units: &[UnitReport<'_>],
    truncated_cells: Option<(u32, u32)>,
) -> Vec<StopNote> {
    let mut notes = Vec::new();
    for unit in units {
        if let Some(stop) = unit.stopped_early {
            notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!(
                    "{}: stopped early ({}) after {}/{} runs",
                    unit.label,
                    stop.as_str(),
                    unit.completed,
                    unit.requested
                ),
            });
        }
        match &unit.status {
            UnitStatus::Error(error) => notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!("{}: error, no run: {error}", unit.label),
            }),
            UnitStatus::NotRun => notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!("{}: not run", unit.label),
            }),
            UnitStatus::Incomplete => notes.push(StopNote {
                scope: unit.id.clone(),
                text: format!(
                    "{}: incomplete, the batch ended before it was decided ({} of {} runs \
                     folded)",
                    unit.label, unit.completed, unit.requested
                ),
            }),
            UnitStatus::Passed | UnitStatus::Failed => {}
        }
    }
    if let Some((first, count)) = truncated_cells {
        let judged = if input.rollup.fleet.allow_truncated_matrix {
            "judged on the executed cells (--allow-truncated-matrix)"
        } else {
            "the batch fails because of it"
        };
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!(
                "matrix truncated by --max-cells: ran {first} of {} cells, {count} not run; {judged}",
                first + count
            ),
        });
    }
    let discarded = discarded_of(input);
    if discarded.runs > 0 {
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!(
                "{} run(s) finished after their unit was decided and were discarded \
                 (not folded; spend {})",
                discarded.runs,
                usd(discarded.cost_usd)
            ),
        });
    }
    if let Some(incomplete) = &input.incomplete {
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!(
                "incomplete: {}; {} job(s) never ran",
                incomplete.reason,
                incomplete.never_ran.len()
            ),
        });
    }
    for label in &input.rollup.fleet.budget_telemetry_missing {
        notes.push(StopNote {
            scope: "batch".to_owned(),
            text: format!("{label}: budget stop disabled, a run reported no cost.usd"),
        });
    }
    notes
}
