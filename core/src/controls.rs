//! The controls people change while a batch runs, as changes of its record: `pause` (no new
//! job starts anywhere in the fleet), `resume-dispatch` (admission goes on from where it
//! stopped, under the next dispatch epoch) and `adjust` (the batch budget and the cap on its
//! jobs outstanding). Every change is recorded with who asked, when, and the values before and
//! after. Pure: the caller passes the clock and stores the record.

use cowork_schema::registry::{BatchRecord, BatchState, ControlChange};

/// A change asked of a running batch.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlAsk {
    Pause,
    ResumeDispatch,
    /// New limits; `None` leaves one as it is (at least one is given).
    Adjust {
        batch_budget_usd: Option<f64>,
        max_running: Option<u32>,
    },
}

/// Why a change was refused; the record is left as it was.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ControlRefusal {
    #[error("the batch is already {}: only a planned or running batch can be steered", .0.as_str())]
    Final(BatchState),
    #[error("the batch is being cancelled: it can no longer be steered")]
    Stopping,
    #[error("dispatch is already paused (resume it with `cowork resume-dispatch`)")]
    AlreadyPaused,
    #[error("dispatch is not paused")]
    NotPaused,
    #[error("nothing to adjust: give --max-budget-usd, --max-running or both")]
    NothingToAdjust,
    #[error("--max-budget-usd {0}: must be a number of US dollars, 0 or more")]
    BadBudget(f64),
    #[error("--max-running 0: must be 1 or more")]
    ZeroRunning,
}

impl ControlRefusal {
    /// `true` when the ask itself is wrong (whatever the batch), not the batch's state.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ControlRefusal::NothingToAdjust
                | ControlRefusal::BadBudget(_)
                | ControlRefusal::ZeroRunning
        )
    }
}

/// Checks an ask on its own (before any batch is read).
pub fn check_ask(ask: &ControlAsk) -> Result<(), ControlRefusal> {
    let ControlAsk::Adjust {
        batch_budget_usd,
        max_running,
    } = ask
    else {
        return Ok(());
    };
    if batch_budget_usd.is_none() && max_running.is_none() {
        return Err(ControlRefusal::NothingToAdjust);
    }
    if let Some(budget) = batch_budget_usd
        && !(budget.is_finite() && *budget >= 0.0)
    {
        return Err(ControlRefusal::BadBudget(*budget));
    }
    if *max_running == Some(0) {
        return Err(ControlRefusal::ZeroRunning);
    }
    Ok(())
}

/// Applies `ask` to `record`, recording each change made by `by` at `at_ms`; the record's
/// submitted batch budget (`submitted_budget_usd`) names the old value of a first budget change.
pub fn apply(
    record: &mut BatchRecord,
    ask: &ControlAsk,
    by: &str,
    at_ms: u64,
    submitted_budget_usd: Option<f64>,
) -> Result<(), ControlRefusal> {
    check_ask(ask)?;
    match record.state {
        BatchState::Planned | BatchState::Running => {}
        BatchState::Stopping => return Err(ControlRefusal::Stopping),
        state @ (BatchState::Done | BatchState::Cancelled) => {
            return Err(ControlRefusal::Final(state));
        }
    }
    let controls = &mut record.controls;
    let change = |control: &str, old: String, new: String| ControlChange {
        at_ms,
        by: by.to_owned(),
        control: control.to_owned(),
        old,
        new,
    };
    let mut changes = Vec::new();
    match ask {
        ControlAsk::Pause => {
            if controls.paused {
                return Err(ControlRefusal::AlreadyPaused);
            }
            controls.paused = true;
            changes.push(change("dispatch", "running".into(), "paused".into()));
        }
        ControlAsk::ResumeDispatch => {
            if !controls.paused {
                return Err(ControlRefusal::NotPaused);
            }
            controls.paused = false;
            controls.dispatch_epoch += 1;
            changes.push(change("dispatch", "paused".into(), "running".into()));
        }
        ControlAsk::Adjust {
            batch_budget_usd,
            max_running,
        } => {
            if let Some(budget) = batch_budget_usd {
                let old = controls.batch_budget_usd.or(submitted_budget_usd);
                controls.batch_budget_usd = Some(*budget);
                changes.push(change("batch-budget-usd", usd(old), usd(Some(*budget))));
            }
            if let Some(max) = max_running {
                let old = controls
                    .max_running
                    .map_or_else(|| "window".to_owned(), |old| old.to_string());
                controls.max_running = Some(*max);
                changes.push(change("max-running", old, max.to_string()));
            }
        }
    }
    controls.changes.extend(changes);
    Ok(())
}

fn usd(value: Option<f64>) -> String {
    value.map_or_else(|| "none".to_owned(), |usd| format!("${usd}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: BatchState) -> BatchRecord {
        serde_json::from_value(serde_json::json!({
            "batchId": "20261201-000000-aaaaaa", "state": state, "specSha256": "0",
            "nJobs": 4, "createdAtMs": 0, "updatedAtMs": 0,
        }))
        .expect("a valid record")
    }

    fn check(
        state: BatchState,
        asks: &[ControlAsk],
        expect: Result<(), ControlRefusal>,
    ) -> BatchRecord {
        let mut record = record(state);
        let mut result = Ok(());
        for ask in asks {
            let before = record.clone();
            result = apply(&mut record, ask, "ann@host", 7, Some(2.0));
            if result.is_err() {
                assert_eq!(
                    record, before,
                    "a refused change leaves the record as it was"
                );
                break;
            }
        }
        assert_eq!(result, expect, "{asks:?}");
        record
    }

    #[test]
    fn changes_are_recorded_with_who_when_old_and_new() {
        let adjust = ControlAsk::Adjust {
            batch_budget_usd: Some(5.0),
            max_running: Some(4),
        };
        let record = check(
            BatchState::Running,
            &[ControlAsk::Pause, ControlAsk::ResumeDispatch, adjust],
            Ok(()),
        );
        let controls = &record.controls;
        assert_eq!((controls.paused, controls.dispatch_epoch), (false, 1));
        assert_eq!(
            (controls.batch_budget_usd, controls.max_running),
            (Some(5.0), Some(4))
        );
        let said: Vec<_> = controls
            .changes
            .iter()
            .map(|change| {
                format!(
                    "{} {}: {} -> {} by {} at {}",
                    change.control, "", change.old, change.new, change.by, change.at_ms
                )
            })
            .collect();
        assert_eq!(
            said,
            [
                "dispatch : running -> paused by ann@host at 7",
                "dispatch : paused -> running by ann@host at 7",
                "batch-budget-usd : $2 -> $5 by ann@host at 7",
                "max-running : window -> 4 by ann@host at 7",
            ]
        );
    }

    #[test]
    fn bad_asks_and_batches_that_cannot_be_steered_are_refused() {
        let adjust = |budget, max| ControlAsk::Adjust {
            batch_budget_usd: budget,
            max_running: max,
        };
        check(
            BatchState::Done,
            &[ControlAsk::Pause],
            Err(ControlRefusal::Final(BatchState::Done)),
        );
        check(
            BatchState::Stopping,
            &[ControlAsk::Pause],
            Err(ControlRefusal::Stopping),
        );
        check(
            BatchState::Running,
            &[ControlAsk::Pause, ControlAsk::Pause],
            Err(ControlRefusal::AlreadyPaused),
        );
        check(
            BatchState::Planned,
            &[ControlAsk::ResumeDispatch],
            Err(ControlRefusal::NotPaused),
        );
        check(
            BatchState::Running,
            &[adjust(Some(-1.0), None)],
            Err(ControlRefusal::BadBudget(-1.0)),
        );
        let mut running = record(BatchState::Running);
        let nan = apply(&mut running, &adjust(Some(f64::NAN), None), "x", 0, None);
        assert!(matches!(nan, Err(ControlRefusal::BadBudget(_))), "{nan:?}");
        check(
            BatchState::Running,
            &[adjust(None, Some(0))],
            Err(ControlRefusal::ZeroRunning),
        );
        check(
            BatchState::Running,
            &[adjust(None, None)],
            Err(ControlRefusal::NothingToAdjust),
        );
        assert!(ControlRefusal::ZeroRunning.is_bad_input());
        assert!(!ControlRefusal::Stopping.is_bad_input());
    }
}
