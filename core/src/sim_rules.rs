//! Which jobs a `--sim-profile` rule selects: the sim executor resolves a job's profile from
//! the rules that match it, and intake warns about a rule that matches no job of a batch.
//!
//! A rule's selectors (`scenario`, `baseline`, `model`, `skill_dir`, `arm`) must all match; one
//! it does not set matches anything. `scenario` is a substring of the scenario's name, with `^`
//! and `$` anchoring it at the start or the end; the others compare whole values.

use cowork_schema::batch::SimRule;
use cowork_schema::job::JobSpec;

/// The positions in `rules` of the rules that match none of `jobs`. Such a rule has no effect,
/// which is almost always a typo in a selector (`cowork run` warns about it).
pub fn rules_matching_nothing(rules: &[SimRule], jobs: &[JobSpec]) -> Vec<usize> {
    rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| !jobs.iter().any(|job| rule_matches(rule, job)))
        .map(|(position, _)| position)
        .collect()
}

/// `true` when every selector the rule sets matches the job.
pub fn rule_matches(rule: &SimRule, job: &JobSpec) -> bool {
    let axes = job.axes.as_ref();
    let exact = |selector: &Option<String>, value: Option<&String>| match selector {
        None => true,
        Some(selector) => value == Some(selector),
    };
    rule.scenario
        .as_deref()
        .is_none_or(|pattern| scenario_matches(pattern, &job.scenario_name))
        && exact(&rule.baseline, axes.and_then(|axes| axes.baseline.as_ref()))
        && exact(&rule.model, axes.and_then(|axes| axes.model.as_ref()))
        && exact(
            &rule.skill_dir,
            axes.and_then(|axes| axes.skill_dir.as_ref()),
        )
        && exact(&rule.arm, job.arm.as_ref())
}

/// Plain substring match with optional `^` / `$` anchors (`^abc` starts with, `abc$` ends with, `^abc$` equals).
pub fn scenario_matches(pattern: &str, name: &str) -> bool {
    let (at_start, rest) = match pattern.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    };
    let (at_end, core) = match rest.strip_suffix('$') {
        Some(core) => (true, core),
        None => (false, rest),
    };
    match (at_start, at_end) {
        (true, true) => name == core,
        (true, false) => name.starts_with(core),
        (false, true) => name.ends_with(core),
        (false, false) => name.contains(core),
    }
}
