//! Stopping `cowork run` without spending more than asked: the first Ctrl-C
//! lets running jobs finish, the second kills their process groups, `kill -9` of `cowork` takes
//! every harness process with it, and `cowork resume` of the local store finishes an
//! interrupted batch with the rollup of an undisturbed run.
//!
//! The stopping tests at the end run the strict double `strict-harness` at container tier
//! instead: its egress sidecar (a marker file only its SIGINT/SIGTERM handler removes, as the
//! real CLI's handler removes its proxy container and networks) and the job's temp dir must be
//! gone after the second Ctrl-C, `kill -9` of `cowork` and a job timeout.
//!
//! Otherwise the harness is the strict double `strict-harness` scripted per scenario: scenario `a-pass` passes at once, scenario
//! `b-hang` (behaviour `hangwhile`) starts a grandchild `sleep 1000` and hangs while the
//! sandbox's marker file exists, and passes once the test removes it. Every wait below is on a
//! condition (a stderr line, a file, the process table), bounded by a deadline that only turns
//! a hang into a failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use cowork_testkit::wait_until;

use crate::support::{
    Output, Sandbox, cowork, only_batch_dir, read_bytes, read_json, strict_harness, workspace_root,
};

/// How long a condition may take before the test fails. Generous: the machine is shared.
const PATIENCE: Duration = Duration::from_secs(60);

/// How long `cowork` may take to end after the second Ctrl-C, and its harness processes to
/// vanish after `kill -9` (a bound on how long stopping may take).
const PROMPTLY: Duration = Duration::from_secs(5);

/// Pause between two looks at the process table or the store while waiting for a condition.
const POLL: Duration = Duration::from_millis(20);

/// A sandbox with a passing and a hanging scenario; the hang lasts while `HANG` exists.
fn hanging_sandbox() -> Sandbox {
    let sandbox = Sandbox::empty();
    let marker = sandbox.path().join("HANG");
    sandbox.write("HANG", "");
    sandbox.write(
        "scenarios/a-pass.yaml",
        "# strict-harness: pass\nsession: (inline)\nprompt: Say hello.\nassert:\n  - result: success\n",
    );
    sandbox.write(
        "scenarios/b-hang.yaml",
        &format!(
            "# strict-harness: hangwhile\n# strict-harness-hang-while: {}\nsession: (inline)\nprompt: Say hello.\n\
             assert:\n  - result: success\n",
            marker.display()
        ),
    );
    sandbox
}

/// `run scenarios --repeat 2` with the stand-in harness into `store`.
fn run_args(store: &Path) -> Vec<String> {
    [
        "run",
        "scenarios",
        "--repeat",
        "2",
        "--executor",
        "harness",
        "--harness-bin",
        &strict_harness().display().to_string(),
        "--store",
        &store.display().to_string(),
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect()
}

/// A `cowork` process the test signals, with its stderr read line by line.
struct Running {
    command: String,
    cwd: PathBuf,
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
}

impl Running {
    /// Starts `cowork <args>` in `cwd` with a clean `COWORK_*` environment.
    fn start(cwd: &Path, args: &[String]) -> Running {
        Running::start_with(cwd, args, &[])
    }

    /// [`Running::start`] with `env` set in cowork's environment.
    fn start_with(cwd: &Path, args: &[String], env: &[(&str, &Path)]) -> Running {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
        command
            .current_dir(cwd)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("COWORK_") {
                command.env_remove(name);
            }
        }
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("starting cowork");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (sender, lines) = mpsc::channel();
        // Ends when cowork closes its stderr; nothing to join.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Running {
            command: format!("cowork {}", args.join(" ")),
            cwd: cwd.to_path_buf(),
            child,
            lines,
            stderr: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn context(&mut self) -> String {
        self.stderr.extend(self.lines.try_iter());
        format!(
            "command: {}\ncwd: {}\n--- stderr ---\n{}",
            self.command,
            self.cwd.display(),
            self.stderr.join("\n")
        )
    }

    /// Waits for a stderr line holding `needle` and returns it.
    fn line_with(&mut self, needle: &str) -> String {
        let said = wait_until(format!("stderr says {needle:?}"))
            .within(PATIENCE)
            .try_receive(&self.lines, |line| {
                self.stderr.push(line.clone());
                line.contains(needle).then_some(line)
            });
        said.unwrap_or_else(|timed_out| {
            let context = self.context();
            panic!("{timed_out}\n{context}");
        })
    }

    /// Sends `signal` (a `kill` name: `INT`, `KILL`) to the process.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Waits at most `bound` for the process to end; its exit code (`None`: killed by a signal).
    fn exit_within(&mut self, bound: Duration) -> Option<i32> {
        let ended = wait_until("cowork ended")
            .within(bound)
            .every(POLL)
            .try_poll(|| self.child.try_wait().expect("waiting for cowork"));
        match ended {
            Ok(status) => status.code(),
            Err(timed_out) => {
                let _ = self.child.kill();
                let context = self.context();
                panic!("{timed_out}\n{context}");
            }
        }
    }
}

/// One process of the table.
#[derive(Clone, Debug)]
struct Process {
    pid: u32,
    ppid: u32,
    cmdline: String,
}

/// Every live (not zombie) process of the table.
fn processes() -> Vec<Process> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // `stat` is `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after_comm) = stat.rfind(')').map(|end| &stat[end + 1..]) else {
            continue;
        };
        let mut fields = after_comm.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        if state == "Z" {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        found.push(Process {
            pid,
            ppid: ppid.parse().unwrap_or(0),
            cmdline,
        });
    }
    found
}

/// `pid` and every live process below it.
fn tree_of(pid: u32) -> Vec<Process> {
    let table = processes();
    let mut tree: Vec<Process> = table.iter().filter(|p| p.pid == pid).cloned().collect();
    let mut index = 0;
    while index < tree.len() {
        let parent = tree[index].pid;
        tree.extend(table.iter().filter(|p| p.ppid == parent).cloned());
        index += 1;
    }
    tree
}

/// The live processes among `pids`.
fn alive(pids: &[Process]) -> Vec<Process> {
    let table = processes();
    pids.iter()
        .filter(|gone| {
            table
                .iter()
                .any(|p| p.pid == gone.pid && p.cmdline == gone.cmdline)
        })
        .cloned()
        .collect()
}

/// Waits until `cowork` runs both hanging jobs (each: guard, harness, `sleep 1000`) and both
/// passing jobs are stored; returns cowork's process tree below it.
fn wait_for_two_hanging_jobs(
    running: &mut Running,
    batch_dir: &dyn Fn() -> Option<PathBuf>,
) -> Vec<Process> {
    let pid = running.pid();
    let found = wait_until("the two hanging jobs run beside the stored passing ones")
        .within(PATIENCE)
        .every(POLL)
        .try_poll(|| {
            let tree = tree_of(pid);
            let sleeping = tree
                .iter()
                .filter(|p| p.cmdline.starts_with("sleep 1000"))
                .count();
            let passed = batch_dir().is_some_and(|dir| {
                (0..2).all(|repeat| {
                    dir.join(format!("jobs/f0/r{repeat}/outcome.json"))
                        .is_file()
                })
            });
            if sleeping == 2 && passed {
                Ok(tree.into_iter().filter(|p| p.pid != pid).collect())
            } else {
                Err(format!("{tree:?}"))
            }
        });
    found.unwrap_or_else(|timed_out| {
        let context = running.context();
        panic!("{timed_out}\n{context}");
    })
}

/// Waits at most `bound` until none of `processes` is alive.
fn all_gone_within(processes: &[Process], bound: Duration, context: &str) {
    let gone = wait_until("no process outlives cowork")
        .within(bound)
        .every(POLL)
        .try_poll(|| alive(processes).is_empty());
    if let Err(timed_out) = gone {
        let left = alive(processes);
        // Not left running after the failure: each is killed by its own pid.
        for process in &left {
            let _ = Command::new("kill")
                .args(["-KILL", &process.pid.to_string()])
                .status();
        }
        panic!("{timed_out}\nleft: {left:?}\n{context}");
    }
}

/// The one batch dir of `store`, once it exists.
fn batch_dir_of(store: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(store.join("batches"))
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .collect();
    (dirs.len() == 1).then(|| dirs.remove(0))
}

/// `cowork resume <batch> --store <store>` with the stand-in harness.
fn resume(sandbox: &Sandbox, batch: &str) -> Output {
    let harness = strict_harness();
    let store = sandbox.store();
    cowork(
        sandbox.path(),
        &[
            "resume".as_ref(),
            batch.as_ref(),
            "--store".as_ref(),
            store.as_os_str(),
            "--harness-bin".as_ref(),
            harness.as_os_str(),
            "--output-format".as_ref(),
            "json".as_ref(),
        ],
    )
}

#[test]
fn first_ctrl_c_lets_running_jobs_finish_and_the_second_kills_every_harness_process() {
    stop_in_two_stages("INT", true);
}

#[test]
fn sigterm_stops_in_the_same_two_stages() {
    stop_in_two_stages("TERM", false);
}

#[test]
fn ctrl_c_stops_a_run_with_its_live_page_in_the_same_two_stages() {
    // The page keeps a batch record that the second Ctrl-C changes (to kill) instead of
    // creating it.
    stop_in_two_stages_with("INT", false, &["--ui"]);
}

/// Interrupts a batch with two hanging jobs twice with `signal` and checks what each stage did;
/// with `check_lock`, also that a resume is refused while the batch runs.
fn stop_in_two_stages(signal: &str, check_lock: bool) {
    stop_in_two_stages_with(signal, check_lock, &[]);
}

/// [`stop_in_two_stages`] of `cowork run` given `extra` arguments too.
fn stop_in_two_stages_with(signal: &str, check_lock: bool, extra: &[&str]) {
    let sandbox = hanging_sandbox();
    let store = sandbox.store();
    let mut args = run_args(&store);
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let mut running = Running::start(sandbox.path(), &args);
    let tree = wait_for_two_hanging_jobs(&mut running, &|| batch_dir_of(&store));
    let batch_dir = batch_dir_of(&store).expect("the batch dir exists");
    let batch = batch_dir
        .file_name()
        .expect("a batch dir has a name")
        .to_string_lossy()
        .into_owned();

    if check_lock {
        // While it runs, the batch is locked: a resume would pay for its jobs a second time.
        let out = resume(&sandbox, &batch);
        out.expect_code(2)
            .expect_stderr("is being run by another cowork process");
    }

    running.signal(signal);
    // The two hanging jobs run; a passing one may still be between its upload and its ack.
    let line = running.line_with("stopping: waiting for ");
    let n_running = line
        .strip_prefix("stopping: waiting for ")
        .and_then(|rest| rest.strip_suffix(" running jobs (Ctrl-C again to kill them)"))
        .and_then(|n| n.parse::<u32>().ok());
    assert!(
        n_running.is_some_and(|n| (2..=4).contains(&n)),
        "{line:?}\n{}",
        running.context()
    );
    let hanging: Vec<Process> = tree
        .iter()
        .filter(|p| p.cmdline.starts_with("sleep 1000"))
        .cloned()
        .collect();
    assert_eq!(
        alive(&hanging).len(),
        2,
        "the first Ctrl-C killed running jobs\n{}",
        running.context()
    );

    running.signal(signal);
    running.line_with("(Ctrl-C again to exit at once)");
    let code = running.exit_within(PROMPTLY);
    let context = running.context();
    assert_eq!(code, Some(130), "{context}");
    assert!(
        context.contains(&format!("`cowork resume {batch}")),
        "{context}"
    );
    // The kill was asked for: it is said in words, not as a raw timestamped log line.
    assert!(!context.contains(" WARN "), "{context}");
    // Every process cowork started (the guards) and everything below them is gone.
    assert!(
        tree.iter().any(|p| p.ppid == running.pid()),
        "cowork had children: {tree:?}"
    );
    all_gone_within(&tree, PROMPTLY, &context);

    // The passing runs are stored as results; the killed ones as cancelled, not as samples.
    for repeat in 0..2 {
        let passed = read_json(&batch_dir.join(format!("jobs/f0/r{repeat}/outcome.json")));
        assert_eq!(passed["outcome"]["kind"], "completed", "{passed}");
        let killed = read_json(&batch_dir.join(format!("jobs/f1/r{repeat}/outcome.json")));
        assert_eq!(killed["outcome"]["category"], "cancelled", "{killed}");
    }
    assert!(
        !batch_dir.join("rollup.json").exists(),
        "an interrupted batch has no rollup"
    );
}

#[test]
fn kill_9_takes_every_harness_along_and_resume_finishes_with_the_undisturbed_rollup() {
    let sandbox = hanging_sandbox();
    let store = sandbox.store();
    let mut running = Running::start(sandbox.path(), &run_args(&store));
    let tree = wait_for_two_hanging_jobs(&mut running, &|| batch_dir_of(&store));
    let batch_dir = batch_dir_of(&store).expect("the batch dir exists");
    let batch = batch_dir
        .file_name()
        .expect("a batch dir has a name")
        .to_string_lossy()
        .into_owned();
    let passed_record = batch_dir.join("jobs/f0/r0/outcome.json");
    let passed_inode = inode(&passed_record);

    running.signal("KILL");
    assert_eq!(running.exit_within(PATIENCE), None, "killed by the signal");
    let context = running.context();
    all_gone_within(&tree, PROMPTLY, &context);

    // A resume that is itself killed while the hanging jobs run leaves the batch resumable.
    let mut again = Running::start(
        sandbox.path(),
        &[
            "resume".to_owned(),
            batch.clone(),
            "--store".to_owned(),
            store.display().to_string(),
            "--harness-bin".to_owned(),
            strict_harness().display().to_string(),
        ],
    );
    again.line_with("resumed in this process (generation 1) from 2 stored job outcomes");
    let tree = wait_for_two_hanging_jobs(&mut again, &|| Some(batch_dir.clone()));
    again.signal("KILL");
    assert_eq!(again.exit_within(PATIENCE), None, "killed by the signal");
    let context = again.context();
    all_gone_within(&tree, PROMPTLY, &context);

    // The hang is over: the second resume finishes the batch.
    sandbox.remove("HANG");
    let out = resume(&sandbox, &batch);
    out.expect_code(0)
        .expect_stderr("resumed in this process (generation 2)");
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], true, "{}", out.context());
    assert_eq!(envelope["fleet"]["generation"], 2, "{}", out.context());
    assert_eq!(
        inode(&passed_record),
        passed_inode,
        "a finished job was run or stored again"
    );
    let scratch = store.join("work").join(&batch);
    assert!(!scratch.exists(), "{} is left behind", scratch.display());

    // The same batch run undisturbed into another store: byte-identical rollup.
    let undisturbed = sandbox.path().join("undisturbed");
    let mut args = run_args(&undisturbed);
    args.push("--quiet".to_owned());
    let out = cowork(sandbox.path(), &args);
    out.expect_code(0);
    assert_eq!(
        read_bytes(&batch_dir.join("rollup.json")),
        read_bytes(&only_batch_dir(&undisturbed).join("rollup.json")),
        "the resumed rollup differs from the undisturbed one"
    );
}

#[test]
fn a_harness_that_cannot_start_is_an_infrastructure_failure_not_a_crash() {
    let sandbox = Sandbox::empty();
    sandbox.write(
        "pass.yaml",
        "# strict-harness: pass\nsession: (inline)\nprompt: Say hello.\nassert:\n  - result: success\n",
    );
    // A harness that answers the start-up probe and then becomes unrunnable, as when it is
    // uninstalled under a running worker: the probe passes, every job's start fails.
    let missing = sandbox.path().join("vanishing-harness");
    sandbox.write(
        "vanishing-harness",
        "#!/usr/bin/env python3\nimport os, sys\nif sys.argv[1:] == ['--version']:\n    print('2.0.0')\n    os.chmod(__file__, 0o644)\n    sys.exit(0)\nsys.exit(3)\n",
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&missing, std::fs::Permissions::from_mode(0o755))
            .expect("making the stand-in executable");
    }
    let out = sandbox.run_batch(&[
        "pass.yaml".as_ref(),
        "--repeat".as_ref(),
        "2".as_ref(),
        "--executor".as_ref(),
        "harness".as_ref(),
        "--harness-bin".as_ref(),
        missing.as_os_str(),
        "--quiet".as_ref(),
    ]);
    out.expect_code(1);
    let record = read_json(&only_batch_dir(&sandbox.store()).join("jobs/f0/r0/outcome.json"));
    assert_eq!(record["outcome"]["category"], "infra", "{record}");
    let message = record["outcome"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "cannot start harness program {}",
            missing.display()
        )),
        "{record}"
    );
}

/// The inode of `path`: a file written again gets a new one (the store writes by rename).
fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .ino()
}

/// How `cowork run` of a held container job is ended in a stopping test.
#[derive(Clone, Copy, Debug)]
enum StopBy {
    CtrlCTwice,
    Kill9,
    JobTimeout,
}

/// A sandbox with one container-tier scenario that the strict double holds with its sidecar
/// started; its sidecar dir and the `TMPDIR` cowork runs with.
fn sidecar_sandbox() -> (Sandbox, PathBuf, PathBuf) {
    let sandbox = Sandbox::empty();
    sandbox.write(
        "scenarios/hold.yaml",
        "name: hold\nfidelity: container\nsession: (inline)\nprompt: Say hello.\n\
         assert:\n  - result: success\n",
    );
    let sidecars = sandbox.path().join("sidecars");
    let tmp = sandbox.path().join("tmp");
    for dir in [&sidecars, &tmp] {
        std::fs::create_dir(dir).expect("creating a test dir");
    }
    (sandbox, sidecars, tmp)
}

/// The names in `dir` (the sidecar markers, or what cowork's temp dir still holds).
fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn stop_a_held_container_job(stop_by: StopBy) {
    let (sandbox, sidecars, tmp) = sidecar_sandbox();
    let store = sandbox.store();
    let strict = workspace_root().join("worker/tests/fixtures/strict-harness");
    let mut args: Vec<String> = [
        "run",
        "scenarios/hold.yaml",
        "--executor",
        "harness",
        "--harness-bin",
        &strict.display().to_string(),
        "--store",
        &store.display().to_string(),
        "--harness-env",
        "STRICT_HARNESS_SIDECAR_DIR",
        "--harness-env",
        "STRICT_HARNESS_CLEANUP_MS",
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect();
    if matches!(stop_by, StopBy::JobTimeout) {
        // Long enough for the double to start its sidecar; its stored log proves it did.
        args.extend(["--job-timeout".to_owned(), "5s".to_owned()]);
    }
    let cleanup = Path::new("300");
    let mut running = Running::start_with(
        sandbox.path(),
        &args,
        &[
            ("STRICT_HARNESS_SIDECAR_DIR", sidecars.as_path()),
            ("STRICT_HARNESS_CLEANUP_MS", cleanup),
            ("TMPDIR", tmp.as_path()),
        ],
    );
    let started = wait_until("the double started its sidecar")
        .within(PATIENCE)
        .every(POLL)
        .try_poll(|| !names_in(&sidecars).is_empty());
    if let Err(timed_out) = started {
        let context = running.context();
        panic!("{timed_out}\n{context}");
    }
    assert!(
        names_in(&tmp)
            .iter()
            .any(|name| name.starts_with("cowork-job-")),
        "the job's temp dir is not in cowork's TMPDIR: {:?}",
        names_in(&tmp)
    );
    match stop_by {
        StopBy::CtrlCTwice => {
            running.signal("INT");
            running.line_with("stopping: waiting for ");
            running.signal("INT");
            assert_eq!(
                running.exit_within(PATIENCE),
                Some(130),
                "{}",
                running.context()
            );
        }
        StopBy::Kill9 => {
            running.signal("KILL");
            assert_eq!(running.exit_within(PATIENCE), None, "killed by the signal");
            // The guard, left alone, stops the harness and removes the temp dir on its own.
            // A timeout is no failure here: the checks below name what is left.
            let _ = wait_until("the guard removed the sidecar and the temp dir")
                .within(PATIENCE)
                .every(POLL)
                .try_poll(|| {
                    names_in(&sidecars).is_empty()
                        && !names_in(&tmp)
                            .iter()
                            .any(|name| name.starts_with("cowork-job-"))
                });
        }
        StopBy::JobTimeout => {
            running.exit_within(PATIENCE);
        }
    }
    let context = running.context();
    assert_eq!(
        names_in(&sidecars),
        Vec::<String>::new(),
        "sidecar left\n{context}"
    );
    let left: Vec<String> = names_in(&tmp)
        .into_iter()
        .filter(|name| name.starts_with("cowork-job-"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "temp dir left\n{context}");
    let expected = match stop_by {
        StopBy::CtrlCTwice => {
            "the job was cancelled: sent SIGTERM to the harness, which exited after"
        }
        StopBy::JobTimeout => {
            "the job's timeout of 5000 ms passed: sent SIGTERM to the harness, which exited after"
        }
        // cowork died: nothing was stored for the job.
        StopBy::Kill9 => return,
    };
    let log = std::fs::read_to_string(only_batch_dir(&store).join("jobs/f0/harness.stderr.log"))
        .unwrap_or_else(|err| panic!("the job's stored log: {err}\n{context}"));
    assert!(
        log.contains(expected) && log.contains("ms grace (--harness-grace)"),
        "{log}\n{context}"
    );
}

#[test]
fn the_second_ctrl_c_stops_the_harness_with_sigterm_and_leaves_no_sidecar_or_temp_dir() {
    stop_a_held_container_job(StopBy::CtrlCTwice);
}

#[test]
fn kill_9_of_cowork_stops_the_harness_with_sigterm_and_leaves_no_sidecar_or_temp_dir() {
    stop_a_held_container_job(StopBy::Kill9);
}

#[test]
fn a_job_timeout_stops_the_harness_with_sigterm_and_leaves_no_sidecar_or_temp_dir() {
    stop_a_held_container_job(StopBy::JobTimeout);
}
