//! Intake of eval batches: a spec and bundle packed the way `cowork eval` packs them
//! (prepare_eval → plan_eval_units → pack), accepted as the client planned it, and refused with
//! the offending spec field named when the spec and the bundle disagree.

use std::fs;
use std::path::Path;

use cowork_fabric::bundle::pack;

use super::*;

const SCENARIO: &str = "prompt: p\nsession: ../sessions/s.yaml\nassert:\n  - result: success\n";
const SESSION: &str = "model: m\nplugins:\n  local_plugins:\n    - ../skills/v1/k\n";
const ARMS: [&str; 2] = ["skills/v1/k", "skills/v2/k"];

/// A project with one scenario whose session runs the plugin `skills/v1/k`, and a second
/// version of it, `skills/v2/k`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (rel, contents) in [
        ("scenarios/s.yaml", SCENARIO),
        ("sessions/s.yaml", SESSION),
        ("skills/v1/k/SKILL.md", "# k v1\n"),
        ("skills/v2/k/SKILL.md", "# k v2\n"),
    ] {
        let path = dir.path().join(rel);
        fs::create_dir_all(path.parent().expect("fixture paths have a parent"))
            .expect("create fixture dir");
        fs::write(path, contents).expect("write fixture");
    }
    dir
}

/// The spec and bundle `cowork eval --a skills/v1/k --b skills/v2/k scenarios --runs 3
/// --model pinned` sends.
fn submitted(root: &Path) -> (BatchSpec, Vec<u8>) {
    let prepared = prepare_eval(&PrepareEvalInput {
        targets: vec![root.join("scenarios")],
        arms: ["A", "B"]
            .into_iter()
            .zip(ARMS)
            .map(|(name, dir)| ArmInput {
                name: name.to_owned(),
                flag: format!("--{}", name.to_lowercase()),
                dir: Some(root.join(dir)),
            })
            .collect(),
        control: 0,
        bundle_root: root.to_path_buf(),
    })
    .unwrap_or_else(|errors| panic!("fixture project is valid: {errors:?}"));
    let flags = BatchFlags {
        repeat: Some(3),
        ..BatchFlags::default()
    };
    let layout = plan_eval_units(
        &prepared.batch,
        &EvalLayoutInput {
            arms: &prepared.arms,
            model: Some("pinned"),
            flags: &flags,
        },
    )
    .unwrap_or_else(|errors| panic!("fixture eval plans: {errors:?}"));
    let bundle = pack(
        &prepared.batch.root,
        &prepared.batch.files,
        &layout.derived_for_bundle(),
    )
    .expect("pack the fixture");
    let spec = BatchSpec {
        schema_version: BATCH_SPEC_VERSION,
        mode: BatchMode::Eval,
        target_display: "scenarios".into(),
        target: prepared.batch.target.clone(),
        scenario_files: prepared
            .batch
            .scenarios
            .iter()
            .map(|scenario| scenario.rel_path.clone())
            .collect(),
        matrix_file: None,
        flags,
        executor: ExecutorKind::Sim,
        sim: None,
        bundle_sha256: bundle.sha256.clone(),
        eval: Some(EvalSpec {
            arms: ARMS.map(|arm| Some(arm.to_owned())).to_vec(),
            arm_names: Vec::new(),
            control: 0,
            model: Some("pinned".to_owned()),
            alpha: 0.05,
            seed: 1,
            resamples: 1000,
            sequential: None,
            mde: None,
        }),
        notify: Vec::new(),
    };
    (spec, bundle.bytes)
}

fn intake(spec: &BatchSpec, bundle: &[u8]) -> Result<Plan, Vec<String>> {
    let scratch = tempfile::tempdir().expect("tempdir");
    plan_from_bundle(
        spec,
        bundle,
        BatchId::new("b1").expect("valid literal"),
        scratch.path(),
        &UnpackLimits::default(),
    )
}

/// Expects a refusal whose problems contain each of `expect`, in order.
fn check_refused(spec: &BatchSpec, bundle: &[u8], expect: &[&str]) {
    let problems = intake(spec, bundle).expect_err("the batch must be refused");
    assert_eq!(problems.len(), expect.len(), "{problems:#?}");
    for (problem, expected) in problems.iter().zip(expect) {
        assert!(
            problem.contains(expected),
            "expected {expected:?} in {problem:?}; all: {problems:#?}"
        );
    }
}

fn eval_of(spec: &mut BatchSpec) -> &mut EvalSpec {
    spec.eval.as_mut().expect("the fixture is an eval")
}

#[test]
fn an_eval_batch_plans_its_arms_like_the_client() {
    let project = project();
    let (spec, bundle) = submitted(project.path());
    let plan = intake(&spec, &bundle).expect("a valid eval batch");
    assert_eq!(plan.mode, BatchMode::Eval);
    assert!(
        plan.interleave,
        "eval jobs are admitted with the arms interleaved"
    );
    let units: Vec<(&str, Option<u32>)> = plan
        .units
        .iter()
        .map(|unit| (unit.label.as_str(), unit.arm.map(|arm| arm.index)))
        .collect();
    assert_eq!(units, [("s [arm=A]", Some(0)), ("s [arm=B]", Some(1))]);
    assert_eq!(plan.n_jobs(), 6);
}

#[test]
fn eval_settings_and_the_mode_must_agree() {
    let project = project();
    let (spec, bundle) = submitted(project.path());
    let run_with_eval = BatchSpec {
        mode: BatchMode::Run,
        ..spec.clone()
    };
    check_refused(
        &run_with_eval,
        &bundle,
        &["spec.eval: only an eval batch takes eval settings, the mode is run"],
    );
    let eval_without_settings = BatchSpec { eval: None, ..spec };
    check_refused(
        &eval_without_settings,
        &bundle,
        &["spec.eval: an eval batch (mode eval) needs its eval settings"],
    );
}

#[test]
fn bad_eval_settings_and_flags_are_listed_together() {
    let project = project();
    let (mut spec, bundle) = submitted(project.path());
    eval_of(&mut spec).alpha = 1.5;
    eval_of(&mut spec).resamples = 0;
    eval_of(&mut spec).model = Some(" ".to_owned());
    eval_of(&mut spec).mde = Some(1.5);
    spec.flags.stop_on_diverge = true;
    check_refused(
        &spec,
        &bundle,
        &[
            "spec.eval.alpha: must be a number strictly between 0 and 1, got 1.5",
            "spec.eval.resamples: must be an integer from 1 to 1000000, got 0",
            "spec.eval.mde: must be a number above 0 and at most 1, got 1.5",
            "spec.eval.model: needs a model id",
            "spec.flags: an eval takes only repeat, jobTimeoutMs, quarantine, stallAfterMs, onStall and priority",
        ],
    );
}

#[test]
fn an_arm_outside_the_bundle_or_missing_from_it_names_its_field() {
    let project = project();
    let (mut spec, bundle) = submitted(project.path());
    eval_of(&mut spec).arms[1] = Some("../k".to_owned());
    check_refused(&spec, &bundle, &["spec.eval.arms[1]: \"../k\""]);

    let (mut spec, bundle) = submitted(project.path());
    eval_of(&mut spec).arms[0] = Some("skills/v3/k".to_owned());
    check_refused(
        &spec,
        &bundle,
        &["skills/v3/k: spec.eval.arms[0]: does not exist"],
    );
}

#[test]
fn arms_or_a_model_other_than_the_bundles_are_a_mismatch_naming_spec_eval() {
    let project = project();
    let (mut spec, bundle) = submitted(project.path());
    eval_of(&mut spec).arms.reverse();
    let problems = intake(&spec, &bundle).expect_err("swapped arms do not match the bundle");
    assert!(!problems.is_empty());
    for problem in &problems {
        assert!(
            problem.contains("differs from what the planner writes")
                && problem.contains("spec.eval.arms and spec.eval.model"),
            "{problems:#?}"
        );
    }

    let (mut spec, bundle) = submitted(project.path());
    eval_of(&mut spec).model = Some("another".to_owned());
    let problems = intake(&spec, &bundle).expect_err("another model does not match the bundle");
    assert!(
        problems
            .iter()
            .all(|problem| problem.contains("spec.eval.arms and spec.eval.model")),
        "{problems:#?}"
    );
}

#[test]
fn a_sequential_design_reaches_the_plan_and_bad_settings_name_their_field() {
    let project = project();
    let (mut spec, bundle) = submitted(project.path());
    eval_of(&mut spec).sequential = Some(cowork_schema::batch::SequentialSpec {
        looks: 3,
        mde: Some(0.2),
    });
    let plan = intake(&spec, &bundle).expect("a valid sequential eval");
    let settings = plan.sequential.expect("the plan carries the design");
    assert_eq!((settings.looks, settings.mde), (3, Some(0.2)));
    assert_eq!(settings.alpha, 0.05);
    eval_of(&mut spec).sequential = Some(cowork_schema::batch::SequentialSpec {
        looks: 0,
        mde: Some(1.5),
    });
    check_refused(
        &spec,
        &bundle,
        &[
            "spec.eval.sequential.looks: must be an integer from 1 to 1000, got 0",
            "spec.eval.sequential.mde: must be a fraction above 0 and at most 1, got 1.5",
        ],
    );
}
