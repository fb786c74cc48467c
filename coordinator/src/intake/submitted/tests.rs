//! Intake tests: bundles packed from temporary project trees the way `cowork submit` packs them
//! (prepare → plan_units → pack), then altered one way per case.

use std::fs;
use std::path::Path;

use cowork_fabric::bundle::pack;
use cowork_schema::batch::BatchMode;

use super::*;

const SCENARIO: &str = "prompt: p\nsession: ../sessions/s.yaml\nassert:\n  - result: success\n";
const SESSION: &str = "model: m\n";
const MATRIX: &str = "models: [a, b]\n";

/// A project tree with one scenario, its session and a matrix file.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (rel, contents) in [
        ("scenarios/s.yaml", SCENARIO),
        ("sessions/s.yaml", SESSION),
        ("matrices/m.yaml", MATRIX),
    ] {
        let path = dir.path().join(rel);
        fs::create_dir_all(path.parent().expect("fixture paths have a parent"))
            .expect("create fixture dir");
        fs::write(path, contents).expect("write fixture");
    }
    dir
}

/// A spec and the bundle bytes the client would send (mirrors `cli`'s `prepare_batch`).
struct Submitted {
    spec: BatchSpec,
    bundle: Vec<u8>,
    /// The planner's derived files, for cases that leave them out.
    derived: Vec<(String, Vec<u8>)>,
    root: std::path::PathBuf,
    files: std::collections::BTreeSet<String>,
}

fn submitted(root: &Path, matrix: Option<&str>, flags: BatchFlags) -> Submitted {
    let prepared = prepare(&PrepareInput {
        target: root.join("scenarios/s.yaml"),
        matrix: matrix.map(|m| root.join(m)),
        bundle_root: root.to_path_buf(),
        mode: BatchMode::Run,
        executor: cowork_schema::batch::ExecutorKind::Harness,
    })
    .unwrap_or_else(|errors| panic!("fixture project is valid: {errors:?}"));
    let layout = plan_units(&prepared, &flags, BatchMode::Run)
        .unwrap_or_else(|errors| panic!("fixture project plans: {errors:?}"));
    let derived = layout.derived_for_bundle();
    let bundle = pack(&prepared.root, &prepared.files, &derived).expect("pack the fixture");
    let spec = BatchSpec {
        schema_version: BATCH_SPEC_VERSION,
        mode: BatchMode::Run,
        target_display: "scenarios/s.yaml".into(),
        target: prepared.target.clone(),
        scenario_files: prepared
            .scenarios
            .iter()
            .map(|scenario| scenario.rel_path.clone())
            .collect(),
        matrix_file: prepared.matrix.as_ref().map(|m| m.rel_path.clone()),
        flags,
        executor: ExecutorKind::Sim,
        sim: None,
        bundle_sha256: bundle.sha256.clone(),
        eval: None,
        notify: Vec::new(),
    };
    Submitted {
        spec,
        bundle: bundle.bytes,
        derived,
        root: prepared.root,
        files: prepared.files,
    }
}

fn repeat(n: u32) -> BatchFlags {
    BatchFlags {
        repeat: Some(n),
        ..BatchFlags::default()
    }
}

fn batch_id() -> BatchId {
    BatchId::new("b1").expect("valid literal")
}

/// Runs intake in a fresh scratch dir and checks that the dir holds nothing afterwards.
fn intake(spec: &BatchSpec, bundle: &[u8]) -> Result<Plan, Vec<String>> {
    let scratch = tempfile::tempdir().expect("tempdir");
    let result = plan_from_bundle(
        spec,
        bundle,
        batch_id(),
        scratch.path(),
        &UnpackLimits::default(),
    );
    let left: Vec<_> = fs::read_dir(scratch.path())
        .expect("scratch dir exists")
        .collect();
    assert!(left.is_empty(), "scratch dir not cleaned: {left:?}");
    result
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

#[test]
fn a_valid_repeat_batch_plans_like_the_client() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    let plan = intake(&sent.spec, &sent.bundle).expect("a valid batch");
    assert_eq!(plan.batch_id, batch_id());
    assert_eq!(plan.n_jobs(), 3);
    assert_eq!(plan.bundle_sha256, sent.spec.bundle_sha256);
    let jobs: Vec<String> = plan.jobs().map(|job| job.job_id.to_string()).collect();
    assert_eq!(jobs, ["b1/f0/r0", "b1/f0/r1", "b1/f0/r2"]);
}

#[test]
fn a_hook_that_is_not_an_http_url_is_refused() {
    let dir = project();
    let mut sent = submitted(dir.path(), None, repeat(2));
    sent.spec.notify = vec![
        "https://hooks.example.com/x".to_owned(),
        "file:///etc/passwd".to_owned(),
        "not a url".to_owned(),
    ];
    check_refused(
        &sent.spec,
        &sent.bundle,
        &[
            "spec.notify: --notify: a hook is an http:// or https:// URL with a host, not a file: URL",
            "spec.notify: --notify: not a URL",
        ],
    );
}

#[test]
fn a_valid_matrix_batch_has_its_derived_files() {
    let dir = project();
    let sent = submitted(dir.path(), Some("matrices/m.yaml"), BatchFlags::default());
    assert!(!sent.derived.is_empty(), "a model axis materializes files");
    let plan = intake(&sent.spec, &sent.bundle).expect("a valid matrix batch");
    assert_eq!(plan.units.len(), 2);
}

#[test]
fn flag_ranges_are_checked_and_every_problem_is_listed() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    let check = |change: &dyn Fn(&mut BatchFlags), expect: &[&str]| {
        let mut spec = sent.spec.clone();
        change(&mut spec.flags);
        check_refused(&spec, &sent.bundle, expect);
    };
    check(
        &|f| f.repeat = Some(1),
        &["spec.flags.repeat: must be an integer from 2 to 10000, got 1"],
    );
    check(&|f| f.repeat = Some(10_001), &["spec.flags.repeat"]);
    check(
        &|f| f.min_pass_rate = f64::NAN,
        &["spec.flags.minPassRate: must be a number from 0 to 1"],
    );
    check(&|f| f.min_pass_rate = 1.5, &["spec.flags.minPassRate"]);
    check(
        &|f| f.max_budget_usd = Some(0.0),
        &["spec.flags.maxBudgetUsd: must be a number greater than 0"],
    );
    check(
        &|f| f.max_budget_usd = Some(f64::INFINITY),
        &["spec.flags.maxBudgetUsd"],
    );
    check(
        &|f| f.max_cells = 0,
        &["spec.flags.maxCells: must be an integer from 1 to 100000"],
    );
    check(
        &|f| f.max_cells = 8,
        &["spec.flags.maxCells: needs a matrix file"],
    );
    check(
        &|f| f.label = Some("a\nb".into()),
        &["spec.flags.label: must be a single line"],
    );
    check(
        &|f| f.label = Some("x".repeat(201)),
        &["spec.flags.label: must be at most 200 characters, got 201"],
    );
    check(
        &|f| f.job_timeout_ms = Some(0),
        &["spec.flags.jobTimeoutMs: must be greater than 0"],
    );
    check(
        &|f| {
            f.repeat = None;
            f.stop_on_diverge = true;
            f.min_pass_rate = 0.5;
        },
        &[
            "spec.flags.minPassRate: needs repeat",
            "spec.flags.stopOnDiverge: needs repeat",
        ],
    );
}

#[test]
fn a_digest_mismatch_and_bad_flags_are_reported_together() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    let mut spec = sent.spec.clone();
    spec.flags.repeat = Some(1);
    spec.bundle_sha256 = "0".repeat(64);
    check_refused(
        &spec,
        &sent.bundle,
        &["spec.flags.repeat", "but spec.bundleSha256 says 0000"],
    );
}

#[test]
fn spec_paths_must_stay_inside_the_bundle() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    let mut spec = sent.spec.clone();
    spec.target = "../etc".into();
    spec.matrix_file = Some("/abs.yaml".into());
    check_refused(
        &spec,
        &sent.bundle,
        &[
            "spec.target: \"../etc\": `..` component",
            "spec.matrixFile: \"/abs.yaml\": absolute path",
        ],
    );
}

#[test]
fn a_hostile_bundle_is_refused_by_unpack() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..7].copy_from_slice(b"../evil");
    header.set_mode(0o644);
    header.set_size(1);
    header.set_cksum();
    builder
        .append(&header, &b"x"[..])
        .expect("append raw entry");
    let tar_bytes = builder.into_inner().expect("finish tar");
    let bundle = zstd::stream::encode_all(tar_bytes.as_slice(), 3).expect("compress");
    let mut spec = sent.spec.clone();
    spec.bundle_sha256 = sha256_hex(&bundle);
    check_refused(
        &spec,
        &bundle,
        &["bundle: bundle entry \"../evil\": `..` component"],
    );
}

#[test]
fn a_bundle_that_does_not_match_its_spec_is_refused() {
    let dir = project();
    // A matrix bundle packed without the planner's derived files.
    let sent = submitted(dir.path(), Some("matrices/m.yaml"), BatchFlags::default());
    let bare = pack(&sent.root, &sent.files, &[]).expect("pack without derived files");
    let mut spec = sent.spec.clone();
    spec.bundle_sha256 = bare.sha256.clone();
    let expect: Vec<String> = sent
        .derived
        .iter()
        .map(|(path, _)| format!("bundle does not match its spec: derived file {path} is missing"))
        .collect();
    let expect: Vec<&str> = expect.iter().map(String::as_str).collect();
    check_refused(&spec, &bare.bytes, &expect);

    // A derived file with other bytes.
    let mut changed = sent.derived.clone();
    changed[0].1.extend_from_slice(b"# edited\n");
    let edited = pack(&sent.root, &sent.files, &changed).expect("pack edited derived files");
    spec.bundle_sha256 = edited.sha256.clone();
    let expected = format!(
        "bundle does not match its spec: derived file {} differs",
        changed[0].0
    );
    check_refused(&spec, &edited.bytes, &[expected.as_str()]);

    // A spec listing other scenario files than the bundle's target holds.
    let mut spec = sent.spec.clone();
    spec.scenario_files = vec!["scenarios/other.yaml".into()];
    check_refused(
        &spec,
        &sent.bundle,
        &["bundle does not match its spec: spec.scenarioFiles is [\"scenarios/other.yaml\"]"],
    );
}

#[test]
fn input_errors_name_bundle_relative_files() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    // The same bundle, with a session that references a missing upload.
    fs::write(
        dir.path().join("sessions/s.yaml"),
        "model: m\nuploads: [../data/missing.csv]\n",
    )
    .expect("edit fixture");
    let files = sent.files.clone();
    let broken = pack(&sent.root, &files, &[]).expect("pack the broken project");
    let mut spec = sent.spec.clone();
    spec.bundle_sha256 = broken.sha256.clone();
    let problems = intake(&spec, &broken.bytes).expect_err("a missing upload is refused");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].starts_with("sessions/s.yaml"), "{problems:#?}");
    assert!(!problems[0].contains("/tmp"), "{problems:#?}");
}

#[test]
fn a_wrong_version_and_sim_settings_for_another_executor_are_refused() {
    let dir = project();
    let sent = submitted(dir.path(), None, repeat(3));
    let mut spec = sent.spec.clone();
    spec.schema_version = 9;
    spec.executor = ExecutorKind::Harness;
    spec.sim = Some(cowork_schema::batch::SimSpec {
        seed: 1,
        rules: Vec::new(),
    });
    check_refused(
        &spec,
        &sent.bundle,
        &[
            "spec.schemaVersion: must be 1, got 9",
            "spec.sim: only the sim executor",
        ],
    );
}

#[test]
fn a_simulated_cassette_in_a_harness_batch_is_refused_by_the_coordinator_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cassette = r#"{"simulated": true, "scenario": {"name": "s", "prompt": "p"}, "events": []}"#;
    fs::create_dir_all(dir.path().join("cassettes")).expect("cassettes dir");
    fs::write(dir.path().join("cassettes/s.json"), cassette).expect("write cassette");
    // Packed as a client that skipped its own check would pack it (here: as for the simulator).
    let prepared = prepare(&PrepareInput {
        target: dir.path().join("cassettes"),
        matrix: None,
        bundle_root: dir.path().to_path_buf(),
        mode: BatchMode::Replay,
        executor: ExecutorKind::Sim,
    })
    .unwrap_or_else(|errors| panic!("the simulator takes it: {errors:?}"));
    let bundle = pack(&prepared.root, &prepared.files, &[]).expect("pack");
    let mut spec = BatchSpec {
        schema_version: BATCH_SPEC_VERSION,
        mode: BatchMode::Replay,
        target_display: "cassettes".into(),
        target: prepared.target.clone(),
        scenario_files: vec!["cassettes/s.json".into()],
        matrix_file: None,
        flags: BatchFlags::default(),
        executor: ExecutorKind::Harness,
        sim: None,
        bundle_sha256: bundle.sha256.clone(),
        eval: None,
        notify: Vec::new(),
    };
    check_refused(
        &spec,
        &bundle.bytes,
        &["cassettes/s.json: a simulated cassette (`\"simulated\": true`"],
    );
    spec.executor = ExecutorKind::Sim;
    intake(&spec, &bundle.bytes).expect("a sim batch replays it");
}
