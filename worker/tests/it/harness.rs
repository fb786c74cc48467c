//! The harness executor against the strict double of the CLI: one test per shape of
//! harness-behaviour.md#outcome-classes.

use std::collections::BTreeMap;
use std::path::Path;

use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::InfraClass;
use cowork_schema::job::JobCommand;
use cowork_worker::executor::{Classified, ExecOutput, Executor, HarnessConfig, HarnessExecutor};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::support::{
    JobDirs, PASSTHROUGH, artifact_bytes, artifact_json, artifact_names, fixture_json, job,
    run_scripted, run_scripted_job, strict_executor,
};

fn completed(output: &ExecOutput) -> &Value {
    match &output.classified {
        Classified::Completed { result } => result,
        other => panic!("expected a completed job, got {other:?}; output {output:#?}"),
    }
}

#[tokio::test]
async fn pass_completes_with_the_on_disk_result() {
    let (output, dirs) = run_scripted("pass").await;
    let result = completed(&output);
    // The on-disk copy is the secret-scrubbed one (harness-behaviour.md#envelope-success).
    assert_eq!(result["doubleCopy"], "disk");
    assert_eq!(result["verdict"]["pass"], true);
    assert_eq!(output.exit_code, Some(0));
    assert!(output.spawned);
    assert_eq!(output.harness_version.as_deref(), Some("2.0.0"));
    let out_dir = result["outDir"].as_str().expect("outDir string");
    assert!(
        Path::new(out_dir).starts_with(dirs.work().join("runs")),
        "{out_dir}"
    );
    assert_eq!(artifact_json(&output, "result.json")["doubleCopy"], "disk");
    let envelope = artifact_json(&output, "envelope.json");
    assert_eq!(envelope["tool"], "cowork-harness");
    assert_eq!(envelope["results"][0]["doubleCopy"], "envelope");
    assert_eq!(
        artifact_names(&output),
        [
            "envelope.json",
            "result.json",
            "events.jsonl",
            "control-out.jsonl",
            "agent.stderr.log",
            "status.json",
            "trace.json",
            "run/mounts.json",
            "run/pre-run-manifest.json",
            "run/timeline.jsonl",
            "run/turns/1/run.jsonl",
            "harness.stderr.log",
        ]
    );
    let stderr =
        String::from_utf8_lossy(&artifact_bytes(&output, "harness.stderr.log")).into_owned();
    assert!(
        stderr.starts_with(&format!("[status] {out_dir}")),
        "{stderr}"
    );
}

#[tokio::test]
async fn fail_completes_with_a_failing_verdict() {
    let (output, _dirs) = run_scripted("fail").await;
    let result = completed(&output);
    assert_eq!(result["verdict"]["pass"], false);
    assert_eq!(result["verdict"]["signals"][0]["code"], "assertion");
    assert_eq!(output.exit_code, Some(1));
}

#[tokio::test]
async fn multiturn_takes_the_highest_turn() {
    let (output, _dirs) = run_scripted("multiturn").await;
    assert_eq!(completed(&output)["turn"], 10);
    assert_eq!(artifact_json(&output, "trace.json")["turn"], 10);
}

#[tokio::test]
async fn out_dir_outside_the_runs_root_is_never_read() {
    let (output, _dirs) = run_scripted("outside").await;
    assert_eq!(completed(&output)["doubleCopy"], "disk");
}

#[tokio::test]
async fn replay_result_is_the_envelope_result() {
    let (output, _dirs) =
        run_scripted_job("replay", JobCommand::Replay, &strict_executor(&[], 1 << 20)).await;
    let expect = fixture_json("sample-replay-envelope.json")["results"][0].clone();
    assert_eq!(completed(&output), &expect);
    assert_eq!(artifact_json(&output, "result.json"), expect);
    assert_eq!(
        artifact_names(&output),
        ["envelope.json", "result.json"],
        "replay writes nothing to stderr, so no stderr log is stored"
    );
}

/// `record` refuses to start without a model credential, as the CLI does.
const RECORD_CREDENTIAL: (&str, &str) = ("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key");

#[tokio::test]
async fn record_uploads_the_cassette() {
    let executor = strict_executor(&[RECORD_CREDENTIAL], 1 << 20);
    let (output, dirs) = run_scripted_job("pass", JobCommand::Record, &executor).await;
    assert_eq!(completed(&output)["command"], "record");
    assert_eq!(
        artifact_json(&output, "cassette.json")["generator"],
        "cowork-harness"
    );
    // The job records into its own copy of the bundle, at the CLI's default place relative
    // to the bundle root, so the cassette names its session relative to that root; the copy
    // is gone after the job, the cassette kept in the work dir for the upload.
    let envelope = artifact_json(&output, "envelope.json");
    let written = envelope["cassette"].as_str().unwrap_or_default();
    assert!(
        written.ends_with("/bundle/cassettes/smoke.cassette.json"),
        "{written}"
    );
    assert!(!Path::new(written).exists(), "the bundle copy is removed");
    assert!(dirs.work().join("cassette.json").is_file());
}

#[tokio::test]
async fn record_without_a_credential_is_refused_before_the_run() {
    let (output, _dirs) =
        run_scripted_job("pass", JobCommand::Record, &strict_executor(&[], 1 << 20)).await;
    match &output.classified {
        Classified::Error { category, message } => {
            assert_eq!(category.as_str(), "runtime", "{message}");
            assert!(message.contains("no model credentials"), "{message}");
        }
        other => panic!("expected a refused record, got {other:?}"),
    }
    assert_eq!(output.exit_code, Some(2));
}

/// Runs a scripted `pass` job of `command` with `flags` forwarded after the CLI's own arguments.
async fn run_with_forwarded_flags(command: JobCommand, flags: &[&str]) -> ExecOutput {
    let dirs = JobDirs::new("pass");
    let mut job = job(command, "scenarios/smoke.yaml", ExecutorKind::Harness);
    job.forwarded_flags = flags.iter().map(|flag| (*flag).to_owned()).collect();
    strict_executor(&[RECORD_CREDENTIAL], 1 << 20)
        .execute(&dirs.context(job), CancellationToken::new())
        .await
}

#[tokio::test]
async fn flags_the_cli_refuses_fail_the_job() {
    // The lenient stand-in this double replaced accepted each of these and passed. The flags
    // are split on spaces.
    use JobCommand::{Record, Run};
    for (command, flags, expect) in [
        (Record, "--label x", "unknown flag: --label"),
        (Record, "--ablate-skill", "unknown flag: --ablate-skill"),
        (
            Record,
            "--decider-model m",
            "--decider-model requires --decider-llm",
        ),
        (
            Run,
            "--run-dir /tmp/x",
            "--run-dir is a GLOBAL flag and must come BEFORE",
        ),
        (
            Run,
            "--repeat 1",
            "--repeat requires an integer between 2 and 100",
        ),
        (
            Run,
            "--no-such-flag",
            "unexpected argument(s): --no-such-flag",
        ),
    ] {
        let flags: Vec<&str> = flags.split(' ').collect();
        let output = run_with_forwarded_flags(command, &flags).await;
        match &output.classified {
            Classified::Error { category, message } => {
                assert_eq!(category.as_str(), "usage", "{flags:?}: {message}");
                assert!(
                    message.contains(expect),
                    "{flags:?}: {message:?} lacks {expect:?}"
                );
            }
            other => panic!("{flags:?}: expected a usage error, got {other:?}"),
        }
        assert_eq!(output.exit_code, Some(2), "{flags:?}");
        assert!(output.artifact("result.json").is_none(), "{flags:?}");
    }
}

#[tokio::test]
async fn unanswered_uploads_the_partial_result_only() {
    let (output, _dirs) = run_scripted("unanswered").await;
    assert_eq!(
        output.classified,
        Classified::Unanswered {
            message: "no scripted answer for \"Which features should be enabled?\"".to_owned(),
            hint: Some("add an answers: rule or pass --on-unanswered first".to_owned()),
        }
    );
    assert_eq!(output.exit_code, Some(2));
    let partial = artifact_json(&output, "partial-result.json");
    assert_eq!(partial["partial"], true);
    assert!(
        output.artifact("result.json").is_none(),
        "{:?}",
        artifact_names(&output)
    );
}

async fn check_error(behaviour: &str, category: &str, message_part: &str, exit_code: Option<i32>) {
    let (output, _dirs) = run_scripted(behaviour).await;
    match &output.classified {
        Classified::Error {
            category: got_category,
            message,
        } => {
            assert_eq!(got_category.as_str(), category, "{behaviour}: {message}");
            assert!(
                message.contains(message_part),
                "{behaviour}: {message:?} lacks {message_part:?}"
            );
        }
        other => panic!("{behaviour}: expected an error, got {other:?}"),
    }
    assert_eq!(output.exit_code, exit_code, "{behaviour}");
    assert!(output.spawned, "{behaviour}");
    assert!(output.artifact("result.json").is_none(), "{behaviour}");
    // The stderr log is kept whenever the CLI wrote to stderr; these behaviours may not.
}

#[tokio::test]
async fn usage_error_keeps_its_category() {
    check_error("usage", "usage", "unknown key 'asert'", Some(2)).await;
}

#[tokio::test]
async fn exit_two_without_an_error_trusts_the_exit_code() {
    check_error("corrupt", "usage", "reported no error", Some(2)).await;
}

#[tokio::test]
async fn two_results_are_an_internal_error() {
    check_error("tworesults", "internal", "found 2", Some(0)).await;
}

#[tokio::test]
async fn boundary_error_is_an_error() {
    check_error("boundary", "boundary", "no tracked files", Some(3)).await;
}

#[tokio::test]
async fn garbage_stdout_is_an_internal_error() {
    check_error("garbage", "internal", "no JSON envelope on stdout", Some(0)).await;
    let (output, _dirs) = run_scripted("garbage").await;
    let stdout = artifact_bytes(&output, "harness.stdout.log");
    assert!(stdout.starts_with(b"this is not json"));
}

#[tokio::test]
async fn crash_is_classified_by_its_signal() {
    check_error("crash", "crashed", "killed by signal 11", None).await;
}

#[tokio::test]
async fn killing_its_own_group_spares_the_worker() {
    // Without its own session the stand-in's `kill(0, SIGKILL)` would kill this test process.
    check_error("killgroup", "crashed", "killed by signal 9", None).await;
}

/// Waits until `pid` has exited; `false` if it is still alive after 10 s.
///
/// SIGKILL takes effect asynchronously, so the test waits for the exit event itself: a pidfd
/// becomes readable when its process has exited (zombie or reaped). The bound only limits how
/// long a failing test hangs; a killed process is gone within milliseconds.
#[allow(unsafe_code)]
fn wait_until_gone(pid: i32) -> bool {
    // SAFETY: pidfd_open(2) takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        // ESRCH: the process has exited and was reaped already.
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let fd = i32::try_from(fd).expect("file descriptors fit in an int");
    let mut poll_fd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `poll_fd` is a valid pollfd on this stack frame for the whole call, and `fd` is
    // a descriptor this function owns and closes exactly once.
    let ready = unsafe {
        let ready = libc::poll(&mut poll_fd, 1, 10_000);
        libc::close(fd);
        ready
    };
    ready == 1
}

fn assert_gone(pid: i32) {
    if !wait_until_gone(pid) {
        // Clean up before failing, so a failing run leaves no `sleep 1000` behind.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("grandchild {pid} outlived its job");
    }
}

fn read_pid(path: &Path) -> i32 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("pid file {}: {err}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|err| panic!("pid file {} holds {text:?}: {err}", path.display()))
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let dirs = JobDirs::new("hang");
    let pid_file = dirs.root.path().join("grandchild.pid");
    let pid_file_text = pid_file.to_string_lossy().into_owned();
    let executor = strict_executor(&[("STRICT_HARNESS_OUT", pid_file_text.as_str())], 1 << 20);
    let mut job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    // Long enough for Python to start and record its grandchild, short for a test.
    job.timeout_ms = 3_000;
    let output = executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await;
    assert_eq!(
        output.classified,
        Classified::Error {
            category: "timeout".into(),
            message: "job exceeded its timeout of 3000 ms; the harness was stopped (SIGTERM, its grace, then SIGKILL of its process group)"
                .to_owned(),
        }
    );
    assert_eq!(output.exit_code, None);
    assert!(output.spawned);
    assert_gone(read_pid(&pid_file));
}

#[tokio::test]
async fn cancel_kills_the_whole_group() {
    let dirs = JobDirs::new("hang");
    let fifo = dirs.root.path().join("grandchild.pid");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("running mkfifo");
    assert!(status.success(), "mkfifo failed");
    let fifo_text = fifo.to_string_lossy().into_owned();
    let executor = strict_executor(&[("STRICT_HARNESS_OUT", fifo_text.as_str())], 1 << 20);
    let job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    let cancel = CancellationToken::new();
    let context = dirs.context(job);
    // Reading the FIFO returns once the stand-in has started its grandchild: only then is the
    // job cancelled, so the kill provably happens mid-run.
    let (output, pid) = tokio::join!(executor.execute(&context, cancel.clone()), async {
        let fifo = fifo.clone();
        let pid = tokio::task::spawn_blocking(move || read_pid(&fifo))
            .await
            .expect("the fifo reader does not panic");
        cancel.cancel();
        pid
    });
    assert_eq!(
        output.classified,
        Classified::Error {
            category: "cancelled".into(),
            message: "job was cancelled; the harness was stopped (SIGTERM, its grace, then SIGKILL of its process group)".to_owned(),
        }
    );
    assert_gone(pid);
}

#[tokio::test]
async fn environment_is_cleared_and_rebuilt() {
    let dirs = JobDirs::new("env");
    let report = dirs.root.path().join("env.json");
    let report_text = report.to_string_lossy().into_owned();
    let executor = strict_executor(
        &[
            ("STRICT_HARNESS_OUT", report_text.as_str()),
            ("COWORK_TEST_EXTRA", "x"),
        ],
        1 << 20,
    );
    let mut job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    job.forwarded_flags = vec!["--label".to_owned(), "hello world".to_owned()];
    let output = executor
        .execute(&dirs.context(job), CancellationToken::new())
        .await;
    completed(&output);

    let seen: Value = serde_json::from_slice(&std::fs::read(&report).expect("env report written"))
        .expect("env report is json");
    let mut env: BTreeMap<String, String> =
        serde_json::from_value(seen["env"].clone()).expect("env is a string map");
    // Each job has a TMPDIR of its own, removed after the job.
    let tmpdir = env.remove("TMPDIR").expect("the harness gets a TMPDIR");
    assert!(
        tmpdir.contains("/cowork-job-") && tmpdir.ends_with("/tmp"),
        "{tmpdir}"
    );
    assert!(!Path::new(&tmpdir).exists(), "the job's TMPDIR is removed");
    let mut expect: BTreeMap<String, String> = BTreeMap::new();
    for name in PASSTHROUGH {
        if let Ok(value) = std::env::var(name) {
            expect.insert(name.to_owned(), value);
        }
    }
    expect.remove("TMPDIR");
    // The test bundle has no git index of its own, so git mode is off for it.
    expect
        .entry("COWORK_HARNESS_GITSET".to_owned())
        .or_insert_with(|| "0".to_owned());
    for (name, value) in executor.config().extra_env.iter() {
        expect.insert(name.clone(), value.clone());
    }
    assert_eq!(
        env, expect,
        "only passthrough and extra variables reach the harness"
    );

    let work = dirs.work().canonicalize().expect("work dir exists");
    assert_eq!(seen["cwd"], work.to_string_lossy().as_ref());
    let scenario = dirs.bundle().join("scenarios/smoke.yaml");
    let expect_argv = [
        "--run-dir",
        &dirs.work().join("runs").to_string_lossy(),
        "run",
        &scenario.to_string_lossy(),
        "--output-format",
        "json",
        "--label",
        "hello world",
    ]
    .map(|arg| Value::from(arg.to_owned()));
    assert_eq!(seen["argv"], Value::from(expect_argv.to_vec()));
}

#[tokio::test]
async fn large_output_is_bounded_and_does_not_block() {
    // 2 MiB of stderr and 1 MiB of stdout noise against a 64 KiB limit: reading both pipes at
    // once keeps the child from blocking, and the envelope survives in the kept tail.
    let executor = strict_executor(&[], 64 * 1024);
    let (output, _dirs) = run_scripted_job("flood", JobCommand::Run, &executor).await;
    assert_eq!(completed(&output)["doubleCopy"], "disk");
    let stderr = artifact_bytes(&output, "harness.stderr.log");
    assert!(stderr.len() < 64 * 1024 + 200, "{}", stderr.len());
    assert!(String::from_utf8_lossy(&stderr).contains("bytes of stderr were dropped"));
}

fn check_not_started(output: &ExecOutput, expect: &Classified) {
    assert_eq!(&output.classified, expect);
    assert!(!output.spawned, "nothing was spent");
    assert!(output.artifacts.is_empty());
    assert_eq!(output.exit_code, None);
}

#[tokio::test]
async fn missing_or_unexecutable_program_is_a_spawn_failure() {
    let dirs = JobDirs::new("pass");
    let job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    let not_executable = dirs.root.path().join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n").expect("writing a plain file");
    for program in [dirs.root.path().join("missing"), not_executable] {
        let executor = HarnessExecutor::new(HarnessConfig::new(&program));
        let output = executor
            .execute(&dirs.context(job.clone()), CancellationToken::new())
            .await;
        match &output.classified {
            Classified::Infra {
                class: InfraClass::Spawn,
                message,
            } => assert!(
                message.starts_with(&format!(
                    "cannot start harness program {}",
                    program.display()
                )),
                "{message}"
            ),
            other => panic!(
                "{}: expected a spawn failure, got {other:?}",
                program.display()
            ),
        }
        assert!(!output.spawned);
    }
}

#[tokio::test]
async fn scenario_outside_the_bundle_is_refused() {
    let dirs = JobDirs::new("pass");
    let job = job(JobCommand::Run, "../outside.yaml", ExecutorKind::Harness);
    let output = strict_executor(&[], 1 << 20)
        .execute(&dirs.context(job), CancellationToken::new())
        .await;
    check_not_started(
        &output,
        &Classified::Error {
            category: "usage".into(),
            message: "scenario file \"../outside.yaml\" of job b1/f0 must be a relative path \
                      inside the bundle"
                .to_owned(),
        },
    );
}

#[tokio::test]
async fn cancelled_before_start_spends_nothing() {
    let dirs = JobDirs::new("pass");
    let job = job(
        JobCommand::Run,
        "scenarios/smoke.yaml",
        ExecutorKind::Harness,
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    let output = strict_executor(&[], 1 << 20)
        .execute(&dirs.context(job), cancel)
        .await;
    check_not_started(
        &output,
        &Classified::Error {
            category: "cancelled".into(),
            message: "job was cancelled before the harness started".to_owned(),
        },
    );
    assert_eq!(
        std::fs::read_dir(dirs.work()).expect("work dir").count(),
        0,
        "nothing was written"
    );
}

/// `path` written relative to the current directory. The detour through the cwd's own name
/// makes the path resolve only from the cwd, not from a directory of the same depth.
fn relative_to_cwd(path: &Path) -> std::path::PathBuf {
    let cwd = std::env::current_dir().expect("the test has a cwd");
    let name = cwd.file_name().expect("the cwd is not the root");
    let n_up = cwd.components().count() - 1;
    let mut relative = Path::new("..").join(name);
    relative.push("../".repeat(n_up));
    relative.push(path.strip_prefix("/").expect("temp dirs are absolute"));
    relative
}

#[tokio::test]
async fn relative_paths_resolve_against_the_worker_cwd() {
    // The child's cwd is the work dir, so relative bundle, work and program paths must be
    // resolved against the worker's cwd before the spawn. Cargo runs tests in the crate root.
    let dirs = JobDirs::new("pass");
    let mut executor_config = strict_executor(&[], 1 << 20).config().clone();
    executor_config.program = "tests/fixtures/strict-harness".into();
    let executor = HarnessExecutor::new(executor_config);
    let context = cowork_worker::executor::JobContext {
        job: job(
            JobCommand::Run,
            "scenarios/smoke.yaml",
            ExecutorKind::Harness,
        ),
        bundle_dir: relative_to_cwd(&dirs.bundle()),
        work_dir: relative_to_cwd(&dirs.work()),
        attempt: 1,
    };
    let output = executor.execute(&context, CancellationToken::new()).await;
    assert_eq!(completed(&output)["doubleCopy"], "disk");
}

/// The variables cowork-harness 2.0.0 reads to start its tiers off a default
/// desktop (a Homebrew `limactl`, a host agent, another container runtime or proxy image, a
/// Lima instance, its own `claude`, a remote or TLS Docker engine) reach it without a flag; a
/// worker that dropped them could not start `hostloop` or `microvm` outside a macOS desktop.
#[test]
fn the_default_allow_list_holds_every_variable_the_cli_reads_to_start_its_tiers() {
    use cowork_worker::executor::harness::DEFAULT_PASSTHROUGH_ENV;
    let read_by_the_cli = [
        "COWORK_HOST_AGENT_BINARY",
        "COWORK_LIMACTL",
        "COWORK_CONTAINER_RUNTIME",
        "COWORK_PROXY_IMAGE",
        "COWORK_LIMA_INSTANCE",
        "COWORK_HARNESS_CLAUDE_BIN",
        "COWORK_HARNESS_DECIDER_MODEL",
        "COWORK_HARNESS_JUDGE_MODEL",
        "COWORK_HARNESS_REDACT_PATTERNS",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "DOCKER_CONTEXT",
        "DOCKER_TLS_VERIFY",
        "DOCKER_CERT_PATH",
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
    ];
    let missing: Vec<&str> = read_by_the_cli
        .into_iter()
        .filter(|name| !DEFAULT_PASSTHROUGH_ENV.contains(name))
        .collect();
    assert!(missing.is_empty(), "not passed to the harness: {missing:?}");
    // The executor's own flags win over the CLI's variables for the same settings.
    for own in ["COWORK_HARNESS_OUTPUT_FORMAT", "COWORK_HARNESS_RUNS_DIR"] {
        assert!(
            !DEFAULT_PASSTHROUGH_ENV.contains(&own),
            "{own} would fight --output-format/--run-dir"
        );
    }
}
