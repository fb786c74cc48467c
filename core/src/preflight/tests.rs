//! The dry run's rows, totals and caps for a small matrix plan with partial history.

use cowork_schema::BatchId;
use cowork_schema::batch::{BatchMode, ExecutorKind};
use cowork_schema::ids::UnitRef;

use super::*;
use crate::plan::{PlanInput, PlanKind, PlanLayout, PlanUnit};

fn plan(flags: BatchFlags, cell_error_in_last: bool) -> Plan {
    let unit = |index: u32, label: &str, cell_error: Option<&str>| PlanUnit {
        unit: UnitRef::Cell(index),
        scenario_name: "s".to_owned(),
        label: label.to_owned(),
        axes: None,
        scenario_file: "s.yaml".to_owned(),
        tier: Tier::Container,
        cell_error: cell_error.map(str::to_owned),
        timeout_ms: 60_000,
        arm: None,
    };
    let layout = PlanLayout {
        kind: PlanKind::Matrix,
        mode: BatchMode::Run,
        flags: flags.clone(),
        units: vec![
            unit(0, "s [a]", None),
            unit(1, "s [b]", None),
            unit(2, "s [c]", cell_error_in_last.then_some("bad skill dir")),
        ],
        requested_cells: 3,
        truncated: false,
        derived_files: Vec::new(),
        forwarded_flags: Vec::new(),
    };
    Plan::new(
        layout,
        PlanInput {
            batch_id: BatchId::new("b1").expect("valid id"),
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "00".to_owned(),
        },
    )
}

fn estimate(cost: Option<f64>, run_ms: Option<u64>) -> UnitEstimate {
    UnitEstimate {
        batches: 3,
        runs: 15,
        cost_per_run_usd: cost,
        run_ms,
    }
}

#[test]
fn the_estimate_covers_the_units_with_history() {
    let flags = BatchFlags {
        repeat: Some(5),
        min_pass_rate: 0.8,
        max_budget_usd: Some(0.3),
        batch_budget_usd: Some(0.5),
        ..BatchFlags::default()
    };
    let estimates = BTreeMap::from([
        ("s [a]".to_owned(), estimate(Some(0.1), Some(40_000))),
        ("s [c]".to_owned(), estimate(Some(1.0), Some(1))),
    ]);
    let dry = preflight(&plan(flags, true), &estimates, Some(4));
    assert_eq!(dry.n_jobs, 10);
    let jobs: Vec<u64> = dry.rows.iter().map(|row| row.jobs).collect();
    assert_eq!(jobs, [5, 5, 0]);
    // Only `s [a]` runs and has history; `s [c]` has history but no jobs (a cell error).
    assert_eq!(dry.cost_usd, Some(0.5));
    assert_eq!(dry.units_without_history, 1);
    assert_eq!(dry.run_ms, Some(200_000));
    assert_eq!(dry.wall_ms, Some(50_000));
    let caps: Vec<(&str, &str)> = dry
        .caps
        .iter()
        .map(|cap| (cap.flag, cap.effect.as_str()))
        .collect();
    assert_eq!(
        caps,
        [
            (
                "--batch-budget-usd",
                "$0.50 for the whole batch; the estimate ($0.50) fits"
            ),
            (
                "--max-budget-usd",
                "$0.30 per unit; 1 of 3 unit(s) would stop early by the estimate: s [a]"
            ),
            (
                "--min-pass-rate",
                "a unit passes at 80% of its runs or more"
            ),
        ]
    );
}

#[test]
fn without_history_or_slots_nothing_is_guessed() {
    let dry = preflight(&plan(BatchFlags::default(), false), &BTreeMap::new(), None);
    assert_eq!(dry.n_jobs, 3);
    assert_eq!((dry.cost_usd, dry.run_ms, dry.wall_ms), (None, None, None));
    assert_eq!(dry.units_without_history, 3);
    assert!(dry.caps.is_empty());
    // One slot: the runs add up, and the longest run is a floor.
    let estimates = BTreeMap::from([("s [b]".to_owned(), estimate(None, Some(7)))]);
    let dry = preflight(&plan(BatchFlags::default(), false), &estimates, Some(1));
    assert_eq!(
        (dry.run_ms, dry.wall_ms, dry.cost_usd),
        (Some(7), Some(7), None)
    );
}

#[test]
fn a_replay_corpus_is_estimated_from_the_replay_rate() {
    let check = |n_jobs: u64, slots: u32, history: Option<u64>, expect: ReplayEstimate| {
        assert_eq!(
            replay_estimate(n_jobs, slots, 256, history),
            expect,
            "{n_jobs} replays on {slots} slots, history {history:?}"
        );
    };
    // 300 cassettes on 2 slots, no history: one process per slot, 150 cassettes each.
    check(
        300,
        2,
        None,
        ReplayEstimate {
            wall_ms: 400 + 150 * 6,
            ms_per_replay: 9,
            n_packs: 2,
            from_history: false,
        },
    );
    // 2,000 on 2 slots: 1,000 each in 4 packs of 250.
    check(
        2000,
        2,
        None,
        ReplayEstimate {
            wall_ms: 4 * 400 + 1000 * 6,
            ms_per_replay: 8,
            n_packs: 8,
            from_history: false,
        },
    );
    // History: 300 replays took 3 s of runs, so 10 ms each.
    check(
        300,
        2,
        Some(3000),
        ReplayEstimate {
            wall_ms: 1500,
            ms_per_replay: 10,
            n_packs: 2,
            from_history: true,
        },
    );
    check(
        0,
        2,
        None,
        ReplayEstimate {
            wall_ms: 0,
            ms_per_replay: 0,
            n_packs: 0,
            from_history: false,
        },
    );
}
