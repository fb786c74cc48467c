//! The arms of an eval as given: how many, their names, which one is the control, and a
//! warning when two arms run the same directory.

use std::collections::BTreeSet;

use cowork_core::plan::eval::{MAX_ARMS, valid_arm_name};

use super::files::ArmInput;

/// Checks the arms and finds the control's index (`--control NAME`, else the first arm).
/// Returns every problem found.
pub(super) fn check_arms(arms: &[ArmInput], control: Option<&str>) -> Result<usize, Vec<String>> {
    let mut problems = Vec::new();
    if !(2..=MAX_ARMS).contains(&arms.len()) {
        problems.push(format!(
            "an eval compares 2 to {MAX_ARMS} arms, got {}: give --a and --b, or --arm NAME=DIR \
             two or more times",
            arms.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for arm in arms {
        if !valid_arm_name(&arm.name) {
            problems.push(format!(
                "{}: the arm name {:?} must be 1 to 32 letters, digits, '.', '_' or '-' \
                 (e.g. --arm v2=skills/v2/my-skill)",
                arm.flag, arm.name
            ));
        } else if !seen.insert(arm.name.as_str()) {
            problems.push(format!(
                "{}: two arms are named {:?}; each arm needs its own name",
                arm.flag, arm.name
            ));
        }
    }
    if arms.iter().filter(|arm| arm.dir.is_none()).count() > 1 {
        problems.push(
            "more than one arm runs without the skill; one no-skill arm is enough".to_owned(),
        );
    }
    let control = match control {
        None => 0,
        Some(name) => match arms.iter().position(|arm| arm.name == name) {
            Some(index) => index,
            None => {
                let names: Vec<&str> = arms.iter().map(|arm| arm.name.as_str()).collect();
                problems.push(format!(
                    "--control: no arm is named {name:?}; the arms are {}",
                    names.join(", ")
                ));
                0
            }
        },
    };
    if problems.is_empty() {
        Ok(control)
    } else {
        Err(problems)
    }
}

/// A warning for each two arms that are one directory: the eval then compares a skill with
/// itself, and any difference it reports between them is noise. Not an error, because an A/A
/// run is a fair way to see that noise.
pub(super) fn same_arm_warnings(arms: &[ArmInput]) -> Vec<String> {
    let canonical: Vec<Option<std::path::PathBuf>> = arms
        .iter()
        .map(|arm| {
            arm.dir
                .as_ref()
                .and_then(|dir| std::fs::canonicalize(dir).ok())
        })
        .collect();
    let mut warnings = Vec::new();
    for (first, first_dir) in canonical.iter().enumerate() {
        for (second, second_dir) in canonical.iter().enumerate().skip(first + 1) {
            if let (Some(first_dir), Some(second_dir)) = (first_dir, second_dir)
                && first_dir == second_dir
            {
                warnings.push(format!(
                    "warning: {} and {} are the same directory ({}): both arms run the same \
                     skill, so any difference between them is noise",
                    arm_flag(&arms[first]),
                    arm_flag(&arms[second]),
                    first_dir.display()
                ));
            }
        }
    }
    warnings
}

/// How a message names an arm: `--a`, `--b`, or `--arm NAME`.
fn arm_flag(arm: &ArmInput) -> String {
    if arm.flag == "--arm" {
        format!("--arm {}", arm.name)
    } else {
        arm.flag.clone()
    }
}
