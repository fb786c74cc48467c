//! `cowork bench fold`: the reducer on synthetic outcomes (cells × repeats, one in ten a
//! failure), with time and peak memory.

use std::time::Instant;

use cowork_core::reduce::{
    BatchReducer, BatchShape, FileErrors, Judging, ShapeKind, StopRules, UnitShape,
};
use cowork_schema::event::JobOutcome;
use cowork_schema::job::CellAxes;
use cowork_schema::run_result::{AssertionView, RunView, SignalView};

use super::{peak_rss_mib, shape_for};
use crate::exit::CliError;

pub(super) fn bench_fold(n_outcomes: u64) -> Result<i32, CliError> {
    let (cells, repeat) = shape_for(n_outcomes);
    let shape = BatchShape {
        kind: ShapeKind::Matrix,
        repeat: Some(repeat),
        units: (0..cells)
            .map(|index| UnitShape {
                label: format!("bench [cell {index}]"),
                axes: Some(CellAxes::default()),
                cell_error: None,
            })
            .collect(),
        requested_cells: cells,
        truncated: false,
        rules: StopRules {
            stop_on_diverge: false,
            max_budget_usd: Some(1e12),
        },
        judging: Judging {
            min_pass_rate: 0.9,
            allow_budget_stop: false,
            allow_truncated_matrix: false,
        },
        file_errors: FileErrors::AbortBatch,
        quarantine: None,
    };
    let mut reducer = BatchReducer::new(shape)
        .map_err(|e| CliError::Failed(anyhow::anyhow!("bench shape: {e}")))?;
    let started = Instant::now();
    let mut n = 0u64;
    // A cheap deterministic generator: the bench measures the fold, not the randomness.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for cell in 0..cells {
        for index in 0..repeat {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let pass = !state.is_multiple_of(10);
            let run = RunView {
                pass,
                signals: if pass {
                    vec![]
                } else {
                    vec![SignalView {
                        code: "assertion".into(),
                        fail: true,
                    }]
                },
                verdict_rederived: false,
                assertions: vec![
                    AssertionView {
                        key: Some("result".into()),
                        pass: true,
                        message: None,
                    },
                    AssertionView {
                        key: Some("tool_called".into()),
                        pass,
                        message: if pass {
                            None
                        } else {
                            Some("tool Skill was never called".into())
                        },
                    },
                ],
                cost_usd: Some(0.01 + (state % 100) as f64 / 10_000.0),
                tokens_total: Some(1500.0),
                non_deterministic: false,
                provenance_model: "claude-sonnet-4-5".into(),
                provenance_skill: "offered,invoked".into(),
                ablated: false,
                duration_ms: Some(40_000.0),
                effective_fidelity: Some("container".into()),
                out_dir: None,
                simulated: true,
            };
            reducer.offer(cell, Some(index), JobOutcome::Completed { run });
            n += 1;
        }
    }
    let reduction = reducer
        .finish()
        .map_err(|_| CliError::Failed(anyhow::anyhow!("bench batch did not complete")))?;
    let elapsed = started.elapsed();
    println!(
        "fold: {cells} cells × {repeat} repeats = {n} outcomes in {:.3} s ({:.0} outcomes/s); ok={} ; peak RSS {:.1} MiB",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        reduction.ok,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    Ok(0)
}
