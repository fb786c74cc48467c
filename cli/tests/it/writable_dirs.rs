//! Directories a process cannot write are refused at start-up: a worker whose bundle cache or
//! work dir, a coordinator whose scratch dir, and a `cowork run` whose store is not writable
//! exits 2 naming the directory, the user, what it is for and the fix, before it registers,
//! listens or stores anything. The paths are made unwritable by a regular file standing where a
//! directory should be, which holds for root too (tests run as root, which ignores modes).

use std::path::Path;
use std::process::Command;

use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, workspace_root};

/// `cowork <args>` with the fleet's environment, in `cwd`, to its exit. The `timeout` only
/// bounds a process that was not refused; a refused one exits as soon as it has checked.
fn exit_of(fleet: &Fleet, cwd: &Path, args: &[String]) -> Output {
    let mut command = Command::new("timeout");
    fleet.env(&mut command);
    command
        .args(["60", env!("CARGO_BIN_EXE_cowork")])
        .args(args)
        .current_dir(cwd);
    let out = command.output().expect("running cowork");
    Output::new(format!("cowork {}", args.join(" ")), cwd.to_path_buf(), out)
}

/// The refusal of `dir`: exit 2, the directory, the user, what it holds and the fix.
fn expect_refusal(out: &Output, dir: &Path, holds: &str, setting: &str) {
    out.expect_code(2)
        .expect_stderr(&format!("{}: not writable by uid ", dir.display()))
        .expect_stderr(&format!("It holds {holds}"))
        .expect_stderr(&format!("point {setting} at a directory"))
        .expect_stderr("is a file, not a directory: move it away, or point");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_cache_dir_is_not_writable_exits_2_and_never_registers() {
    let fleet = Fleet::start();
    let sandbox = Sandbox::empty();
    sandbox.write("wfile/cache", "a file where the cache dir should be\n");
    let out = exit_of(
        &fleet,
        sandbox.path(),
        &Fleet::worker_args("wfile", "container", "1"),
    );
    expect_refusal(
        &out,
        Path::new("wfile/cache"),
        "the bundle cache",
        "--cache-dir (COWORK_CACHE_DIR)",
    );
    if out.stderr.contains("serving") {
        out.fail("a refused worker said it serves");
    }
    let workers = fleet.cowork(&workspace_root(), &["workers", "--output-format", "json"]);
    assert_eq!(workers.code(), 0, "{}", workers.context());
    assert!(
        !workers.stdout.contains("\"wfile\""),
        "a refused worker registered: {}",
        workers.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_whose_scratch_dir_is_not_writable_exits_2_before_listening() {
    let fleet = Fleet::start();
    let sandbox = Sandbox::empty();
    sandbox.write("state", "a file where a directory should be\n");
    let args: Vec<String> = [
        "coordinator",
        "--listen",
        "127.0.0.1:0",
        "--scratch-dir",
        "state/scratch",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = exit_of(&fleet, sandbox.path(), &args);
    expect_refusal(
        &out,
        Path::new("state/scratch"),
        "submitted bundles",
        "--scratch-dir (COWORK_SCRATCH_DIR)",
    );
    if out.stderr.contains("listening") {
        out.fail("a refused coordinator listened");
    }
}

#[test]
fn a_run_whose_store_is_not_writable_exits_2_and_stores_nothing() {
    let sandbox = Sandbox::with_project();
    // The store's own dir is not writable: its parent is a file.
    sandbox.write("blocked", "a file where the store's parent should be\n");
    let store = sandbox.path().join("blocked/.cowork");
    let args = ["scenarios/report.yaml", "--executor", "sim"];
    let out = crate::support::run_batch_from(sandbox.path(), &store, &args);
    expect_refusal(&out, &store, "the local store", "--store (COWORK_STORE)");
    // The store is writable but its bundle cache is not: a file stands where `cache/` goes.
    sandbox.write(".cowork/cache", "a file where the cache dir should be\n");
    let out = sandbox.run_batch(&args);
    expect_refusal(
        &out,
        &sandbox.store().join("cache/bundles"),
        "the bundle cache",
        "--store (COWORK_STORE)",
    );
    if sandbox.store().join("batches").exists() {
        out.fail("a refused run stored a batch");
    }
}
