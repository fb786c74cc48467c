//! The arms of `cowork eval` as typed (`--a`/`--b`, `--without-skill`, `--arm NAME=DIR`) and
//! the ranked table of an eval with several arms.

use std::fmt::Write as _;
use std::path::PathBuf;

use cowork_coordinator::intake::ArmInput;
use cowork_core::eval::words::format_p;
use cowork_core::eval::{EvalDocument, NamedArm};
use cowork_core::plan::Plan;

use super::signed_points;
use crate::args::EvalArgs;
use crate::exit::CliError;
use crate::text::count;

/// What `--a`, `--b` or an `--arm` value says for "no skill at all".
const NO_SKILL_WORD: &str = "none";

/// The arms in arm order: `--a` then `--b` (arm A is the no-skill arm with `--without-skill`
/// or `--a none`), or each `--arm NAME=DIR`. A malformed `--arm` is a usage error.
pub(super) fn arm_inputs(args: &EvalArgs) -> Result<Vec<ArmInput>, CliError> {
    if !args.arms.is_empty() {
        let mut arms = Vec::with_capacity(args.arms.len());
        let mut problems = Vec::new();
        for value in &args.arms {
            match value.split_once('=') {
                Some((name, dir)) if !dir.is_empty() => arms.push(ArmInput {
                    name: name.to_owned(),
                    flag: "--arm".to_owned(),
                    dir: dir_or_none(dir),
                }),
                _ => problems.push(format!(
                    "--arm: expected NAME=DIR (e.g. --arm v2=skills/v2/my-skill, or --arm \
                     base=none for no skill), got {value:?}"
                )),
            }
        }
        return if problems.is_empty() {
            Ok(arms)
        } else {
            Err(CliError::Usage(problems))
        };
    }
    let arm_a = match (&args.arm_a, args.without_skill) {
        (Some(dir), false) => dir_or_none(&dir.to_string_lossy()),
        // clap makes --a and --without-skill exclusive and requires one of them.
        _ => None,
    };
    let arm_b = args
        .arm_b
        .as_ref()
        .map(|dir| dir_or_none(&dir.to_string_lossy()))
        .ok_or_else(|| CliError::Usage(vec!["--b: the candidate arm is required".to_owned()]))?;
    if arm_b.is_none() {
        return Err(CliError::Usage(vec![
            "--b none: the candidate must be a skill dir or plugin; the no-skill arm is arm A \
             (--without-skill or --a none)"
                .to_owned(),
        ]));
    }
    Ok(vec![
        ArmInput {
            name: "A".to_owned(),
            flag: "--a".to_owned(),
            dir: arm_a,
        },
        ArmInput {
            name: "B".to_owned(),
            flag: "--b".to_owned(),
            dir: arm_b,
        },
    ])
}

fn dir_or_none(dir: &str) -> Option<PathBuf> {
    (dir != NO_SKILL_WORD).then(|| PathBuf::from(dir))
}

/// The arms in one line for the start of an eval: `arm A = no skill, arm B = skills/v2/k`.
pub(super) fn describe_arms(arms: &[NamedArm]) -> String {
    arms.iter()
        .map(|arm| format!("arm {} = {}", arm.name, arm.source))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The shape of an eval in one line: `arm A = …, arm B = …; 2 scenarios × 2 arms × 10 runs =
/// 40 jobs`.
pub(super) fn shape(plan: &Plan, arms: &[NamedArm], n_jobs: u64) -> String {
    format!(
        "{}; {} × {} arms × {} = {}",
        describe_arms(arms),
        count(
            plan.units.len() as u64 / arms.len().max(1) as u64,
            "scenario"
        ),
        arms.len(),
        count(u64::from(plan.runs_per_unit()), "run"),
        count(n_jobs, "job"),
    )
}

/// With several arms: each candidate against the control, best first, with the Holm-adjusted
/// p-value and verdict the exit gate reads (by name: the first line of the eval gave each arm's
/// source). Empty for the two-arm form.
pub(super) fn render_ranking(document: &EvalDocument) -> String {
    let Some(first) = document.comparisons.first() else {
        return String::new();
    };
    let mut out = String::new();
    let control = &first.control;
    let control_rate = first.report.overall.arms[0].pass_rate;
    let _ = writeln!(
        out,
        "candidates against the control {} ({}, passes {:.0}%), best first; p adjusted by Holm's \
         method over {} comparisons:",
        control.name,
        control.source,
        control_rate * 100.0,
        document.comparisons.len()
    );
    let header = [
        "rank",
        "arm",
        "pass",
        "B-control points [CI]",
        "p",
        "Holm p",
        "verdict",
    ];
    let rows: Vec<Vec<String>> = document
        .comparisons
        .iter()
        .map(|comparison| {
            let overall = &comparison.report.overall;
            let candidate = &overall.arms[1];
            let diff = overall.diff.map_or_else(
                || "n/a (no complete pair)".to_owned(),
                |interval| {
                    format!(
                        "{} [{}, {}]",
                        signed_points(interval.estimate),
                        signed_points(interval.low),
                        signed_points(interval.high)
                    )
                },
            );
            let verdict = comparison.verdict.candidate_word();
            vec![
                comparison.rank.to_string(),
                format!(
                    "{} ({})",
                    comparison.candidate.name, comparison.candidate.source
                ),
                format!(
                    "{}/{} ({:.0}%)",
                    candidate.passes,
                    candidate.completed,
                    candidate.pass_rate * 100.0
                ),
                diff,
                format_p(overall.mcnemar_p),
                format_p(comparison.holm_p),
                verdict.to_owned(),
            ]
        })
        .collect();
    out.push_str(&crate::text::table(
        &header,
        &rows,
        &[],
        crate::args::TableFormat::Text,
    ));
    let _ = writeln!(
        out,
        "verdict (alpha {}): {}",
        document.report.alpha,
        cowork_core::eval::document_verdict_words(document)
    );
    let _ = writeln!(
        out,
        "the table below is the best candidate, {}, against {} scenario by scenario",
        first.candidate.name, control.name
    );
    out
}
