//! `--dry-run` of `run`, `submit` and `eval`: the validated plan, what earlier batches say it
//! will cost and take, and the caps that would apply. Nothing is run, submitted or written.
//!
//! The estimate is the core's (`cowork_core::preflight`, from `cowork_core::history::estimates`
//! over the history `cowork_coordinator::catalog` reads); this module reads and prints.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use cowork_coordinator::catalog::{HistoryScope, decided_history};
use cowork_core::history::{RunKind, estimates, history_applies};
use cowork_core::plan::Plan;
use cowork_core::preflight::{Preflight, preflight};
use cowork_schema::history::BatchStats;

use crate::args::TableFormat;
use crate::batch_source::Source;
use crate::exit::CliError;
use crate::text::{count, count_of, table};

pub mod power;

/// Earlier batches an estimate is drawn from, at most, and batches looked at to find them.
const HISTORY: HistoryScope = HistoryScope {
    keep: 20,
    scan: 200,
};

/// What the dry run says about the harness (a version, or why it is missing); `None` when the
/// executor runs none here.
pub type HarnessNote = Option<Result<Option<String>, CliError>>;

/// The slots of the process that would run the batch (`cowork run`), when known.
#[derive(Clone, Copy, Debug)]
pub struct LocalSlots {
    pub slots: u16,
    /// `--replay-pack`: most replays one harness process gets.
    pub replay_pack: usize,
}

/// Prints the dry run of `plan`, with history from `source` and the wall time on `local`'s
/// slots when they are known (this machine), and returns exit code 0.
pub async fn print(
    plan: &Plan,
    source: &Source,
    local: Option<LocalSlots>,
    harness: HarnessNote,
) -> Result<i32, CliError> {
    print_with(plan, source, local, harness, None).await
}

/// [`print`], and for an eval with `eval_power` its power section ([`power`]).
pub async fn print_with(
    plan: &Plan,
    source: &Source,
    local: Option<LocalSlots>,
    harness: HarnessNote,
    eval_power: Option<power::EvalPower>,
) -> Result<i32, CliError> {
    let slots = local.map(|local| local.slots);
    let mut labels: BTreeSet<&str> = plan.units.iter().map(|unit| unit.label.as_str()).collect();
    if eval_power.is_some() {
        // Arm A's pass rate may come from plain runs of the scenario, too.
        labels.extend(plan.units.iter().map(|unit| unit.scenario_name.as_str()));
    }
    let replay = plan.mode.spends_nothing();
    let planned = RunKind {
        executor: plan.executor,
        spends_nothing: replay,
    };
    let (history, history_note) = match read_history(source, &labels, planned).await {
        Ok(history) => (history, None),
        // History is a hint: the plan is still worth printing without it.
        Err(error) => (Vec::new(), Some(error)),
    };
    let mut unit_estimates = estimates(&history);
    if replay {
        // Older replay batches' stats hold the recorded runs' cost; a replay spends nothing.
        for estimate in unit_estimates.values_mut() {
            estimate.cost_per_run_usd = Some(0.0);
        }
    }
    let dry = preflight(plan, &unit_estimates, slots.map(u32::from));
    print!("{}", render(plan, &dry, history.len(), slots));
    if replay {
        print!("{}", render_replay(&dry, local));
    }
    if let Some(eval_power) = eval_power {
        print!(
            "{}",
            power::render(plan, eval_power, &history, &unit_estimates, slots)
        );
    }
    if let Some(note) = history_note {
        println!("history: not read from {} ({note})", source.describe());
    }
    match harness {
        None => {}
        Some(Ok(version)) => println!(
            "harness: {}",
            version.as_deref().unwrap_or("not used by this executor")
        ),
        Some(Err(CliError::Usage(problems))) => println!("harness: {}", problems.join("; ")),
        Some(Err(error)) => return Err(error),
    }
    println!("dry run: nothing was run, submitted or written");
    Ok(0)
}

/// The stats of up to [`HISTORY`] recent decided batches that ran any of `labels`.
async fn read_history(
    source: &Source,
    labels: &BTreeSet<&str>,
    planned: RunKind,
) -> Result<Vec<BatchStats>, String> {
    let ids = source.batch_ids().await.map_err(|error| match error {
        CliError::Usage(problems) => problems.join("; "),
        CliError::Failed(error) => format!("{error:#}"),
        CliError::Cancelled => "cancelled".to_owned(),
    })?;
    let store_of = |batch_id: &cowork_schema::BatchId| source.store_of(batch_id);
    // Replays and live runs never estimate each other, nor simulated and real runs.
    let ran_one = |batch: &cowork_coordinator::catalog::BatchOverview| {
        let earlier = RunKind {
            executor: batch.stored.spec.executor,
            spends_nothing: batch.stored.spec.mode.spends_nothing(),
        };
        history_applies(planned, earlier)
            && batch.stats.as_ref().is_some_and(|stats| {
                stats
                    .units
                    .iter()
                    .any(|unit| labels.contains(unit.label.as_str()))
            })
    };
    let found = decided_history(&ids, &store_of, HISTORY, &ran_one)
        .await
        .map_err(|error| error.to_string())?;
    Ok(found.into_iter().filter_map(|batch| batch.stats).collect())
}

fn minutes(ms: u64) -> String {
    let seconds = ms as f64 / 1000.0;
    // A replay in a pack takes milliseconds of its process's time; "0 s" would hide it.
    if ms < 1000 {
        format!("{ms} ms")
    } else if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

fn render(plan: &Plan, dry: &Preflight, n_history: usize, slots: Option<u16>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "plan: {} in {} × {} with the {} executor",
        count(dry.n_jobs, "job"),
        count(plan.units.len() as u64, "unit"),
        count(u64::from(plan.runs_per_unit()), "run"),
        plan.executor.as_str()
    );
    write_units(&mut out, dry);
    write_cost(&mut out, plan, dry, n_history);
    write_time(&mut out, plan, dry, slots);
    write_caps(&mut out, dry);
    out
}

/// The table of units: tier, jobs, timeout, and the cost and time their history suggests.
fn write_units(out: &mut String, dry: &Preflight) {
    let header = [
        "unit",
        "tier",
        "jobs",
        "job timeout",
        "cost/run",
        "est. cost",
        "time/run",
        "history",
    ];
    let rows: Vec<Vec<String>> = dry
        .rows
        .iter()
        .map(|row| {
            let estimate = row.estimate.as_ref();
            vec![
                row.label.clone(),
                row.tier.as_str().to_owned(),
                row.jobs.to_string(),
                minutes(row.job_timeout_ms),
                estimate
                    .and_then(|e| e.cost_per_run_usd)
                    .map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}")),
                row.cost_usd()
                    .map_or_else(|| "-".to_owned(), |usd| format!("${usd:.4}")),
                estimate
                    .and_then(|e| e.run_ms)
                    .map_or_else(|| "-".to_owned(), minutes),
                match (&row.cell_error, estimate) {
                    (Some(error), _) => format!("cell error: {error}"),
                    (None, Some(e)) => count_of(u64::from(e.batches), "batch", "batches"),
                    (None, None) => "no history".to_owned(),
                },
            ]
        })
        .collect();
    out.push_str(&table(&header, &rows, &[2, 3, 4, 5, 6], TableFormat::Text));
}

/// The estimated cost line, or why there is none.
fn write_cost(out: &mut String, plan: &Plan, dry: &Preflight, n_history: usize) {
    let without = if dry.units_without_history > 0 {
        format!(
            "; {} without history not counted",
            count(dry.units_without_history as u64, "unit")
        )
    } else {
        String::new()
    };
    match dry.cost_usd {
        _ if plan.mode.spends_nothing() => {
            let _ = writeln!(
                out,
                "estimated cost: $0.00 (a replay re-drives recordings and spends nothing)"
            );
        }
        Some(cost) => {
            let _ = writeln!(
                out,
                "estimated cost: ${cost:.2} (median cost per run in {} earlier {}{without})",
                n_history,
                if n_history == 1 { "batch" } else { "batches" }
            );
        }
        None => {
            // Simulated and real batches never estimate each other
            // (`cowork_core::history::history_applies`): say which kind was looked for.
            let (kind, other) = if plan.executor == cowork_schema::batch::ExecutorKind::Sim {
                ("simulated", "real")
            } else {
                ("real", "simulated")
            };
            let _ = writeln!(
                out,
                "estimated cost: no history (no earlier {kind} batch ran these units; {other} \
                 ones never count)"
            );
        }
    }
}

/// The least and the greatest time scale of the simulator over the plan's jobs
/// (docs/sim-profile.md: per job, the first matching rule that sets `time_scale`, else 0; a
/// negative or non-finite one counts as 0); `None` unless the plan runs on the simulator.
fn sim_time_scales(plan: &Plan) -> Option<(f64, f64)> {
    if plan.executor != cowork_schema::batch::ExecutorKind::Sim {
        return None;
    }
    let rules = plan
        .sim
        .as_ref()
        .map_or(&[][..], |sim| sim.rules.as_slice());
    let mut range: Option<(f64, f64)> = None;
    for job in plan.jobs() {
        let scale = rules
            .iter()
            .filter(|rule| cowork_core::sim_rules::rule_matches(rule, &job))
            .find_map(|rule| rule.time_scale)
            .filter(|scale| scale.is_finite())
            .map_or(0.0, |scale| scale.max(0.0));
        range = Some(range.map_or((scale, scale), |(least, most)| {
            (least.min(scale), most.max(scale))
        }));
    }
    Some(range.unwrap_or((0.0, 0.0)))
}

/// The estimated time lines of a simulated batch: the simulator sleeps each run's simulated
/// duration times its profile's `time_scale`, so the wall time is the history's times that.
fn write_sim_time(out: &mut String, dry: &Preflight, slots: Option<u16>, scales: (f64, f64)) {
    let runs = dry.run_ms.map_or_else(String::new, |run_ms| {
        format!("{} of simulated runs; ", minutes(run_ms))
    });
    let (least, most) = scales;
    let scale = if least == most {
        format!("time_scale {most}")
    } else {
        format!("time_scale up to {most}")
    };
    let bound = if least == most { "about" } else { "at most" };
    let _ = match (dry.wall_ms, slots) {
        _ if most == 0.0 => writeln!(
            out,
            "estimated time: {runs}about 0 s of wall time (time_scale 0: runs do not sleep)"
        ),
        (Some(wall_ms), Some(slots)) => writeln!(
            out,
            "estimated time: {runs}{bound} {} of wall time on {} at {scale}",
            minutes((wall_ms as f64 * most).round() as u64),
            count(u64::from(slots), "slot")
        ),
        (Some(_), None) => writeln!(
            out,
            "estimated time: {runs}the wall time at {scale} depends on the fleet's free slots"
        ),
        (None, _) => writeln!(out, "estimated time: no history"),
    };
    let _ = writeln!(
        out,
        "simulator: a run sleeps its simulated time × its profile's time_scale (docs/sim-profile.md)"
    );
}

/// The estimated time line (runs, and wall time on `slots`), or why there is none.
fn write_time(out: &mut String, plan: &Plan, dry: &Preflight, slots: Option<u16>) {
    // A replay batch's time comes from the replay rate (`render_replay`).
    if plan.mode.spends_nothing() {
        return;
    }
    // The simulator's wall time is its time scale's (docs/sim-profile.md).
    if let Some(scales) = sim_time_scales(plan) {
        write_sim_time(out, dry, slots, scales);
        return;
    }
    match (dry.run_ms, dry.wall_ms, slots) {
        (Some(run_ms), Some(wall_ms), Some(slots)) => {
            let _ = writeln!(
                out,
                "estimated time: {} of runs; about {} of wall time on {}",
                minutes(run_ms),
                minutes(wall_ms),
                count(u64::from(slots), "slot")
            );
        }
        (Some(run_ms), _, _) => {
            let _ = writeln!(
                out,
                "estimated time: {} of runs; the wall time depends on the fleet's free slots",
                minutes(run_ms)
            );
        }
        (None, _, _) => {
            let _ = writeln!(out, "estimated time: no history");
        }
    }
}

/// One line per cap that keeps planned jobs from running.
fn write_caps(out: &mut String, dry: &Preflight) {
    if dry.caps.is_empty() {
        let _ = writeln!(out, "caps: none (every planned job runs)");
    }
    for cap in &dry.caps {
        let _ = writeln!(out, "cap {}: {}", cap.flag, cap.effect);
    }
}

/// The replay time of a replay batch from the replay rate: earlier replay batches' when every
/// unit has history, else the CLI's own (a process start per pack plus a few ms per cassette).
fn render_replay(dry: &Preflight, local: Option<LocalSlots>) -> String {
    let history_run_ms = (dry.units_without_history == 0)
        .then_some(dry.run_ms)
        .flatten();
    let rate = |estimate: &cowork_core::preflight::ReplayEstimate| {
        let source = if estimate.from_history {
            "the rate of earlier replay batches"
        } else {
            "the CLI's own rate: about 0.4 s to start a process, 6 ms a cassette"
        };
        let per_s = 1000.0 / estimate.ms_per_replay.max(1) as f64;
        format!(
            "about {} ms a replay, {per_s:.0} replays/s a slot, from {source}",
            estimate.ms_per_replay
        )
    };
    match local {
        Some(local) => {
            let estimate = cowork_core::preflight::replay_estimate(
                dry.n_jobs,
                u32::from(local.slots),
                u32::try_from(local.replay_pack).unwrap_or(u32::MAX),
                history_run_ms,
            );
            format!(
                "estimated time: about {} of wall time on {} in {} of up to {} ({})\n",
                minutes(estimate.wall_ms),
                count(u64::from(local.slots), "slot"),
                count_of(estimate.n_packs, "harness process", "harness processes"),
                count(local.replay_pack as u64, "replay"),
                rate(&estimate)
            )
        }
        None => {
            let one_slot = cowork_core::preflight::replay_estimate(
                dry.n_jobs,
                1,
                u32::try_from(cowork_worker::executor::replay_pack::DEFAULT_REPLAY_PACK)
                    .unwrap_or(u32::MAX),
                history_run_ms,
            );
            format!(
                "estimated time: about {} of replays on one slot, divided by the fleet's free replay slots ({})\n",
                minutes(one_slot.wall_ms),
                rate(&one_slot)
            )
        }
    }
}
