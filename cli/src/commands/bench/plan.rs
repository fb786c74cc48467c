//! `cowork bench plan`: the planner on a synthetic matrix × repeat batch, prepared and planned
//! as `cowork run` does, with every job spec built.

use std::time::Instant;

use cowork_coordinator::intake::files::{PrepareInput, prepare};
use cowork_core::plan::{Plan, plan_units};
use cowork_schema::BatchId;
use cowork_schema::batch::{BatchFlags, BatchMode, ExecutorKind};

use super::{peak_rss_mib, shape_for};
use crate::exit::CliError;

/// Writes a real batch to `dir`: one scenario, its session with one local plugin, and a matrix of
/// `cells` cells (baselines × models), so the benchmark goes through the same preparation,
/// planning and materialization as `cowork run`.
fn write_bench_batch(dir: &std::path::Path, cells: u32) -> std::io::Result<()> {
    let models = 10u32.min(cells);
    let baselines = cells.div_ceil(models);
    std::fs::create_dir_all(dir.join("skills/bench-skill/skills/bench-skill"))?;
    std::fs::write(
        dir.join("skills/bench-skill/skills/bench-skill/SKILL.md"),
        "---\nname: bench-skill\n---\n",
    )?;
    std::fs::write(
        dir.join("session.yaml"),
        "model: claude-sonnet-4-5\nplugins:\n  local_plugins:\n    - skills/bench-skill\n",
    )?;
    std::fs::write(
        dir.join("bench.yaml"),
        "session: session.yaml\nprompt: benchmark\nassert:\n  - result: success\n  - tool_called: Skill\n",
    )?;
    let baselines: Vec<String> = (0..baselines).map(|b| format!("desktop-1.{b}.0")).collect();
    let models: Vec<String> = (0..models).map(|m| format!("model-{m}")).collect();
    std::fs::write(
        dir.join("matrix.yaml"),
        format!(
            "baselines: [{}]\nmodels: [{}]\n",
            baselines.join(", "),
            models.join(", ")
        ),
    )?;
    Ok(())
}

pub(super) fn bench_plan(n_jobs: u64) -> Result<i32, CliError> {
    let (cells, repeat) = shape_for(n_jobs);
    let dir = std::env::temp_dir().join(format!("cowork-bench-plan-{}", std::process::id()));
    write_bench_batch(&dir, cells).map_err(|e| {
        CliError::Failed(anyhow::anyhow!(
            "writing the bench batch in {}: {e}",
            dir.display()
        ))
    })?;
    let started = Instant::now();
    let input = PrepareInput {
        target: dir.join("bench.yaml"),
        matrix: Some(dir.join("matrix.yaml")),
        bundle_root: dir.clone(),
        mode: BatchMode::Run,
        executor: cowork_schema::batch::ExecutorKind::Sim,
    };
    let prepared = prepare(&input).map_err(|errors| {
        CliError::Failed(anyhow::anyhow!(
            "bench batch invalid: {:?}",
            errors.first().map(ToString::to_string)
        ))
    })?;
    let flags = BatchFlags {
        repeat: Some(repeat),
        max_cells: cells,
        ..BatchFlags::default()
    };
    let layout = plan_units(&prepared, &flags, BatchMode::Run).map_err(|errors| {
        CliError::Failed(anyhow::anyhow!(
            "bench plan failed: {:?}",
            errors.first().map(ToString::to_string)
        ))
    })?;
    let n_derived = layout.derived_files.len();
    let batch_id = BatchId::new("bench").expect("a valid literal id");
    let plan = Plan::new(
        layout,
        cowork_core::plan::PlanInput {
            batch_id,
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "0".repeat(64),
        },
    );
    let planned = started.elapsed();
    let mut n = 0u64;
    let mut id_bytes = 0usize;
    for job in plan.jobs() {
        n += 1;
        id_bytes += job.job_id.as_str().len();
    }
    let total = started.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "plan: {cells} cells × {repeat} repeats = {n} jobs ({n_derived} derived files); prepare + plan {:.3} s; + build every JobSpec {:.3} s ({:.0} jobs/s); job ids {} bytes; peak RSS {:.1} MiB",
        planned.as_secs_f64(),
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64(),
        id_bytes,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    Ok(0)
}
