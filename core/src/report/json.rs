//! The JSON summary ([`render_json`]): one line of machine-readable verdict, units, failure
//! reasons, stop notes, the quarantine (the envelope's record, and a mark per unit it covers)
//! and, for an eval, the A/B table.

use cowork_schema::json_number;
use serde_json::{Map, Value, json};

use super::input::{EvalArm, EvalSection, ReportInput};
use super::summary::{FailureReason, Summary, UnitReport, UnitStatus, summarize};

fn opt_number(object: &mut Map<String, Value>, key: &str, value: Option<f64>) {
    if let Some(value) = value {
        object.insert(key.to_owned(), json_number::to_value(value));
    }
}

fn eval_json(eval: &EvalSection) -> Value {
    let arm = |arm: &EvalArm| {
        let mut object = Map::new();
        object.insert("passes".into(), Value::from(arm.passes));
        object.insert("completed".into(), Value::from(arm.completed));
        object.insert("passRate".into(), json_number::to_value(arm.pass_rate));
        opt_number(&mut object, "costUsd", arm.cost_usd);
        opt_number(&mut object, "wholeCostUsd", arm.whole_cost_usd);
        Value::Object(object)
    };
    let by_difference = eval.scenarios_by_difference();
    let share_of = |scope: &str| {
        by_difference
            .iter()
            .find(|(row, _)| row.scope == scope)
            .and_then(|(_, share)| *share)
            .map(json_number::to_value)
    };
    let scenario_rows = eval.rows.len().saturating_sub(1);
    let rows: Vec<Value> = eval
        .rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let share = if index < scenario_rows {
                share_of(&row.scope)
            } else {
                None
            };
            json!({
                "scope": row.scope,
                "a": arm(&row.arm_a),
                "b": arm(&row.arm_b),
                "diff": json_number::to_value(row.diff),
                "ciLow": json_number::to_value(row.ci_low),
                "ciHigh": json_number::to_value(row.ci_high),
                "aOnlyPasses": row.a_only_passes,
                "bOnlyPasses": row.b_only_passes,
                "pValue": json_number::to_value(row.p_value),
                "verdict": row.verdict,
                "pairs": row.pairs,
                "excludedPairs": row.excluded_pairs,
                "minDetectableDiff": row.min_detectable_diff.map(json_number::to_value),
                "shareOfOverall": share,
            })
        })
        .collect();
    let mut section = json!({
        "armA": eval.arm_a,
        "armB": eval.arm_b,
        "alpha": json_number::to_value(eval.alpha),
        "confidence": json_number::to_value(eval.confidence),
        "decisionRule": eval.decision_rule,
        "intervalMethod": eval.interval_method,
        "pValueMeaning": eval.p_sentence,
        "sensitivity": eval.sensitivity_sentence,
        "rows": rows,
        "scenariosByDifference": by_difference
            .iter()
            .map(|(row, _)| row.scope.as_str())
            .collect::<Vec<_>>(),
    });
    if !eval.ranking.is_empty() {
        let ranking: Vec<Value> = eval
            .ranking
            .iter()
            .map(|ranked| {
                json!({
                    "rank": ranked.rank,
                    "candidate": ranked.candidate,
                    "control": ranked.control,
                    "passRate": json_number::to_value(ranked.arm.pass_rate),
                    "diff": finite(ranked.diff),
                    "ciLow": finite(ranked.ci_low),
                    "ciHigh": finite(ranked.ci_high),
                    "pValue": json_number::to_value(ranked.p_value),
                    "holmP": json_number::to_value(ranked.holm_p),
                    "verdict": ranked.verdict,
                })
            })
            .collect();
        section["ranking"] = Value::Array(ranking);
    }
    section
}

/// A number, or `null` for the NaN of a comparison without a complete pair.
fn finite(value: f64) -> Value {
    if value.is_finite() {
        json_number::to_value(value)
    } else {
        Value::Null
    }
}

/// A compact machine summary of the batch: one line of JSON (plus a newline) with the verdict,
/// one entry per unit (status, counts, pass rate, flakiness, cost, duration), the grouped
/// failure reasons, stop notes and, for eval batches, the A/B table.
pub fn render_json(input: &ReportInput) -> String {
    let summary = summarize(input);
    let spec = &input.stored.spec;
    let mut head = Map::new();
    head.insert("batchId".into(), Value::from(summary.batch_id));
    head.insert("command".into(), Value::from(input.rollup.command.clone()));
    head.insert(
        "executor".into(),
        Value::from(spec.executor.as_str().to_owned()),
    );
    head.insert("simulated".into(), Value::from(summary.simulated));
    head.insert("simulatedRuns".into(), Value::from(summary.simulated_runs));
    head.insert("ok".into(), Value::from(input.rollup.ok));
    head.insert("exitCode".into(), Value::from(input.rollup.exit_code));
    head.insert("unitKind".into(), Value::from(summary.unit_noun()));
    if let Some(repeat) = input.stored.plan.repeat {
        head.insert("repeat".into(), Value::from(repeat));
    }
    head.insert(
        "minPassRate".into(),
        json_number::to_value(summary.judging.min_pass_rate),
    );
    head.insert("totals".into(), totals_json(&summary));
    if let Some(incomplete) = &input.incomplete {
        head.insert(
            "incomplete".into(),
            json!({ "reason": incomplete.reason, "neverRan": incomplete.never_ran }),
        );
    }
    let units: Vec<Value> = summary
        .units
        .iter()
        .map(|unit| unit_json(unit, &summary))
        .collect();
    if let Some(record) = summary.quarantine() {
        head.insert(
            "quarantine".into(),
            serde_json::to_value(record).unwrap_or(Value::Null),
        );
    }
    head.insert("units".into(), Value::from(units));
    if let Some((first, count)) = summary.truncated_cells {
        head.insert(
            "truncated".into(),
            json!({ "ranCells": first, "notRun": count }),
        );
    }
    let reasons: Vec<Value> = summary.reasons.iter().map(reason_json).collect();
    head.insert("failureReasons".into(), Value::from(reasons));
    let stops: Vec<Value> = summary
        .stops
        .iter()
        .map(|note| json!({ "scope": note.scope, "text": note.text }))
        .collect();
    head.insert("stops".into(), Value::from(stops));
    if let Some(eval) = &input.eval {
        head.insert("eval".into(), eval_json(eval));
    }
    // Floats are written as the CLI writes them (`0.000003`, not `3e-6`).
    let mut text = json_number::to_string(&Value::Object(head))
        .expect("a JSON value with string keys serializes");
    text.push('\n');
    text
}

/// The batch's totals: units, runs, passes, cost, duration, stored and discarded runs, wall time.
fn totals_json(summary: &Summary<'_>) -> Value {
    let mut totals = Map::new();
    totals.insert("units".into(), Value::from(summary.units.len()));
    totals.insert("runs".into(), Value::from(summary.total_runs));
    totals.insert("passes".into(), Value::from(summary.total_passes));
    opt_number(&mut totals, "costUsd", summary.total_cost_usd);
    opt_number(&mut totals, "recordedCostUsd", summary.recorded_cost_usd);
    opt_number(&mut totals, "durationMs", summary.total_duration_ms);
    totals.insert("storedRuns".into(), Value::from(summary.stored_runs));
    totals.insert("discardedRuns".into(), Value::from(summary.discarded.runs));
    opt_number(&mut totals, "discardedCostUsd", summary.discarded.cost_usd);
    opt_number(&mut totals, "summedRunMs", summary.summed_run_ms.0);
    if let Some(wall_ms) = summary.input.wall_ms {
        totals.insert("wallMs".into(), Value::from(wall_ms));
    }
    Value::Object(totals)
}

/// One unit's entry: status, counts, pass rate, flakiness, stop, cost, duration, error.
fn unit_json(unit: &UnitReport<'_>, summary: &Summary<'_>) -> Value {
    let mut object = Map::new();
    object.insert("unit".into(), Value::from(unit.id.clone()));
    object.insert("label".into(), Value::from(unit.label));
    if let Some(axes) = unit.axes {
        object.insert(
            "axes".into(),
            serde_json::to_value(axes).unwrap_or(Value::Null),
        );
    }
    object.insert("status".into(), Value::from(unit.status.as_str()));
    object.insert("requested".into(), Value::from(unit.requested));
    object.insert("completed".into(), Value::from(unit.completed));
    object.insert("passes".into(), Value::from(unit.passes));
    opt_number(&mut object, "passRate", unit.pass_rate);
    object.insert("flaky".into(), Value::from(unit.flaky()));
    if let Some(stop) = unit.stopped_early {
        object.insert("stoppedEarly".into(), Value::from(stop.as_str()));
    }
    opt_number(&mut object, "costUsd", unit.cost_usd);
    opt_number(&mut object, "recordedCostUsd", unit.recorded_cost_usd);
    opt_number(&mut object, "durationMs", unit.duration_ms);
    if let UnitStatus::Error(error) = &unit.status {
        object.insert("error".into(), Value::from(error.clone()));
    }
    if let Some(mark) = summary.quarantine_mark(unit) {
        object.insert(
            "quarantine".into(),
            json!({
                "state": if mark.in_force() { "quarantined" } else { "expired" },
                "text": mark.text(),
            }),
        );
    }
    Value::Object(object)
}

/// One failure reason's entry: kind, key, severity, counts, units and a sample message.
fn reason_json(reason: &FailureReason) -> Value {
    let mut object = Map::new();
    object.insert("kind".into(), Value::from(reason.kind.as_str()));
    object.insert("key".into(), Value::from(reason.key.clone()));
    object.insert(
        "severity".into(),
        Value::from(if reason.fail { "fail" } else { "warn" }),
    );
    object.insert("occurrences".into(), Value::from(reason.occurrences));
    object.insert("runs".into(), Value::from(reason.runs));
    object.insert("units".into(), Value::from(reason.units.clone()));
    object.insert("job".into(), Value::from(reason.job.clone()));
    if let Some((message, _)) = reason.messages.first() {
        object.insert("sample".into(), Value::from(message.clone()));
    }
    Value::Object(object)
}
