//! Quarantine at the batch verdict: which units an entry covers, and the batch's `ok` and exit
//! code once the failures of covered units are set aside. Unit verdicts are never changed: a
//! quarantined unit that failed still shows as failed everywhere, marked quarantined.
//!
//! Pure: "today" is the date the spec carries (taken from a clock at the edge).

use cowork_schema::quarantine::{Date, QuarantineRecord, QuarantineSpec};
use cowork_schema::unit::CellAxes;

/// How an entry covers a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// No entry names the unit.
    None,
    /// An entry in force names it: its failure does not gate.
    InForce,
    /// Only expired entries name it: it gates again, and is named loudly.
    Expired,
}

/// A quarantine matched against the units of one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct QuarantinePlan {
    pub spec: QuarantineSpec,
    /// One per unit, in unit order.
    pub cover: Vec<Cover>,
    /// Labels of units, in unit order (for the record).
    pub labels: Vec<String>,
    /// Labels of entries that match no unit.
    pub unmatched: Vec<String>,
}

/// One unit as the matcher sees it.
pub struct UnitKey<'a> {
    pub scenario: &'a str,
    pub axes: Option<&'a CellAxes>,
    pub label: &'a str,
}

impl QuarantinePlan {
    /// Matches `spec` against `units`. An unreadable `today` (a spec not made by this fleet)
    /// counts every entry as expired, so nothing is set aside by mistake.
    pub fn new(spec: &QuarantineSpec, units: &[UnitKey<'_>]) -> QuarantinePlan {
        let today = Date::parse(&spec.today);
        let mut used = vec![false; spec.entries.len()];
        let cover = units
            .iter()
            .map(|unit| {
                let mut cover = Cover::None;
                for (entry_idx, entry) in spec.entries.iter().enumerate() {
                    if !entry.matches(unit.scenario, unit.axes) {
                        continue;
                    }
                    used[entry_idx] = true;
                    let expired = today.is_none_or(|today| entry.is_expired(today));
                    if !expired {
                        cover = Cover::InForce;
                    } else if cover == Cover::None {
                        cover = Cover::Expired;
                    }
                }
                cover
            })
            .collect();
        let unmatched = spec
            .entries
            .iter()
            .zip(&used)
            .filter(|(_, used)| !**used)
            .map(|(entry, _)| entry.label())
            .collect();
        QuarantinePlan {
            spec: spec.clone(),
            cover,
            labels: units.iter().map(|unit| unit.label.to_owned()).collect(),
            unmatched,
        }
    }

    /// `true` when the unit at `unit_idx` is covered by an entry in force.
    pub fn is_waived(&self, unit_idx: usize) -> bool {
        self.cover.get(unit_idx) == Some(&Cover::InForce)
    }

    /// What the verdict did with this quarantine, given which units failed (one flag per unit).
    pub fn record(&self, failing: &[bool]) -> QuarantineRecord {
        let labels_where = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
            self.labels
                .iter()
                .enumerate()
                .filter(|(unit_idx, _)| keep(*unit_idx))
                .map(|(_, label)| label.clone())
                .collect()
        };
        QuarantineRecord {
            source: self.spec.source.clone(),
            today: self.spec.today.clone(),
            sha256: self.spec.sha256.clone(),
            entries: self.spec.entries.clone(),
            quarantined: labels_where(&|unit_idx| self.is_waived(unit_idx)),
            applied: labels_where(&|unit_idx| {
                self.is_waived(unit_idx) && failing.get(unit_idx) == Some(&true)
            }),
            expired: labels_where(&|unit_idx| self.cover[unit_idx] == Cover::Expired),
            unmatched: self.unmatched.clone(),
        }
    }
}

/// `ok` and the exit code of a batch once the failures of waived units are set aside: a batch
/// that failed on its verdict (exit 1) passes when every failing unit is waived and nothing else
/// failed it (`other_failure`: a truncated matrix). Errors (exit 2, 3) and a batch without
/// results stay as they are.
pub fn waive(
    ok: bool,
    exit_code: i32,
    failing: &[bool],
    plan: &QuarantinePlan,
    other_failure: bool,
) -> (bool, i32) {
    if exit_code != 1 || other_failure {
        return (ok, exit_code);
    }
    let all_waived = failing
        .iter()
        .enumerate()
        .all(|(unit_idx, fails)| !fails || plan.is_waived(unit_idx));
    if all_waived {
        (true, 0)
    } else {
        (ok, exit_code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::quarantine::QuarantineEntry;

    fn entry(scenario: &str, expires: &str) -> QuarantineEntry {
        QuarantineEntry {
            scenario: scenario.into(),
            cell: None,
            owner: "o".into(),
            reason: "r".into(),
            expires: expires.into(),
            link: None,
            line: None,
        }
    }

    fn plan(entries: Vec<QuarantineEntry>) -> QuarantinePlan {
        let spec = QuarantineSpec {
            source: "quarantine.yaml".into(),
            today: "2026-12-06".into(),
            sha256: "h".into(),
            entries,
        };
        let units = [
            UnitKey {
                scenario: "a",
                axes: None,
                label: "a",
            },
            UnitKey {
                scenario: "b",
                axes: None,
                label: "b",
            },
        ];
        QuarantinePlan::new(&spec, &units)
    }

    #[test]
    fn an_entry_in_force_waives_and_an_expired_one_gates() {
        let in_force = plan(vec![entry("a", "2026-12-06"), entry("gone", "2027-01-01")]);
        assert_eq!(in_force.cover, [Cover::InForce, Cover::None]);
        assert_eq!(waive(false, 1, &[true, false], &in_force, false), (true, 0));
        assert_eq!(waive(false, 1, &[true, true], &in_force, false), (false, 1));
        assert_eq!(waive(false, 1, &[true, false], &in_force, true), (false, 1));
        assert_eq!(
            waive(false, 2, &[true, false], &in_force, false),
            (false, 2)
        );
        let record = in_force.record(&[true, false]);
        assert_eq!(record.applied, ["a"]);
        assert_eq!(record.unmatched, ["gone"]);

        let expired = plan(vec![entry("a", "2026-12-05")]);
        assert_eq!(expired.cover, [Cover::Expired, Cover::None]);
        assert_eq!(waive(false, 1, &[true, false], &expired, false), (false, 1));
        let record = expired.record(&[true, false]);
        assert_eq!(record.expired, ["a"]);
        assert!(record.applied.is_empty() && record.quarantined.is_empty());
    }

    /// A matrix with `--repeat 2`: the cell of model m2 fails every run. An entry for that
    /// cell alone makes the batch pass; one for the other cell does not; the rollups and the
    /// matrix's `anyFail` stay what the runs made them.
    #[test]
    fn the_reducer_sets_aside_only_the_covered_cell() {
        use crate::reduce::batch::UnitShape;
        use crate::reduce::{BatchReducer, BatchShape, FileErrors, Judging, ShapeKind, StopRules};
        use cowork_schema::event::JobOutcome;
        use cowork_schema::run_result::RunView;

        let run = |pass: bool| JobOutcome::Completed {
            run: RunView::from_result(&serde_json::json!({
                "scenario": "csv",
                "result": if pass { "success" } else { "error" },
                "assertions": [],
                "verdict": {"pass": pass, "exitCode": i32::from(!pass), "signals": []},
            }))
            .expect("a readable result"),
        };
        let axes = |model: &str| CellAxes {
            model: Some(model.into()),
            ..CellAxes::default()
        };
        let judge = |model: &str| {
            let entry = QuarantineEntry {
                cell: Some(axes(model)),
                ..entry("csv", "2027-01-01")
            };
            let spec = QuarantineSpec {
                source: "q".into(),
                today: "2026-12-06".into(),
                sha256: "h".into(),
                entries: vec![entry],
            };
            let (a1, a2) = (axes("m1"), axes("m2"));
            let keys = [
                UnitKey {
                    scenario: "csv",
                    axes: Some(&a1),
                    label: "csv [model=m1]",
                },
                UnitKey {
                    scenario: "csv",
                    axes: Some(&a2),
                    label: "csv [model=m2]",
                },
            ];
            let shape = BatchShape {
                kind: ShapeKind::Matrix,
                repeat: Some(2),
                units: ["m1", "m2"]
                    .iter()
                    .map(|model| UnitShape {
                        label: format!("csv [model={model}]"),
                        axes: Some(axes(model)),
                        cell_error: None,
                    })
                    .collect(),
                requested_cells: 2,
                truncated: false,
                rules: StopRules {
                    stop_on_diverge: false,
                    max_budget_usd: None,
                },
                judging: Judging {
                    min_pass_rate: 1.0,
                    allow_budget_stop: false,
                    allow_truncated_matrix: false,
                },
                file_errors: FileErrors::AbortBatch,
                quarantine: Some(QuarantinePlan::new(&spec, &keys)),
            };
            let mut reducer = BatchReducer::new(shape).expect("a valid shape");
            for index in 0..2 {
                reducer.offer(0, Some(index), run(true));
                reducer.offer(1, Some(index), run(false));
            }
            reducer.finish().expect("complete")
        };
        let covered = judge("m2");
        assert!(covered.ok);
        assert_eq!(covered.exit_code, 0);
        let matrix = covered.matrix_repeat.as_ref().expect("a matrix repeat");
        assert!(matrix.any_fail, "the cells' own verdicts stand");
        let record = covered.quarantine.expect("a record");
        assert_eq!(record.applied, ["csv [model=m2]"]);
        assert_eq!(record.quarantined, ["csv [model=m2]"]);

        let other = judge("m1");
        assert!(!other.ok);
        assert_eq!(other.exit_code, 1);
        let record = other.quarantine.expect("a record");
        assert_eq!(record.quarantined, ["csv [model=m1]"]);
        assert!(record.applied.is_empty());
    }
}
