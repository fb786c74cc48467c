//! What a first user meets when `--coordinator` is not quite right: a bare `HOST:PORT` is read
//! as http, anything else is refused showing the expected form, a NATS port is named as one,
//! and a refused connection says what to check. And which batch `cowork resume` resumes: an
//! explicit `--coordinator` wins over the local store, and a reference both the local store and
//! the configured coordinator hold is refused, naming both.

use std::path::Path;
use std::process::Command;

use cowork_testkit::free_port;

use crate::fleet::{Fleet, batch_of};
use crate::support::{Output, Sandbox, copy_dir, only_batch_dir, workspace_root};

/// `cowork <args…>` with the fleet's environment (and `env` on top) but no `--coordinator`
/// appended, from `cwd`.
fn cowork_as_given(fleet: &Fleet, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut command);
    command
        .envs(env.iter().copied())
        .args(args)
        .current_dir(cwd);
    let out = command.output().expect("running cowork");
    Output::new(
        format!("cowork {} (env {env:?})", args.join(" ")),
        cwd.to_path_buf(),
        out,
    )
}

#[test]
fn a_coordinator_address_is_read_or_refused_in_words_that_say_what_to_give() {
    let fleet = Fleet::start();
    let cwd = workspace_root();

    // `HOST:PORT` without a scheme is the coordinator's http address.
    let bare = format!("127.0.0.1:{}", fleet.api_port);
    cowork_as_given(&fleet, &cwd, &["workers", "--coordinator", &bare], &[]).expect_code(0);

    // Anything else is refused with the form expected.
    for garbage in ["http//127.0.0.1:8700", "foo bar", "nats://127.0.0.1:4222"] {
        cowork_as_given(&fleet, &cwd, &["workers", "--coordinator", garbage], &[])
            .expect_code(2)
            .expect_stderr("--coordinator")
            .expect_stderr("http://HOST:8700");
    }

    // The NATS port answers, but not with HTTP.
    let nats = format!("127.0.0.1:{}", fleet.nats.port);
    cowork_as_given(&fleet, &cwd, &["workers", "--coordinator", &nats], &[])
        .expect_code(2)
        .expect_stderr(&format!(
            "http://{nats} answered, but not as a cowork coordinator's HTTP API does"
        ))
        .expect_stderr("NATS port?")
        .expect_stderr("port 8700 by default");

    // Nothing listens: the message names the address and what to check.
    let nobody = format!("http://127.0.0.1:{}", free_port());
    cowork_as_given(&fleet, &cwd, &["workers", "--coordinator", &nobody], &[])
        .expect_code(2)
        .expect_stderr(&format!(
            "check that `cowork coordinator` is running at {nobody}"
        ))
        .expect_stderr("firewall");
}

#[test]
fn resume_with_a_coordinator_resumes_its_batch_and_an_ambiguous_reference_is_refused() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container,replay", "2");
    let root = workspace_root();
    let submitted = fleet.submit(
        &root,
        &[
            "examples/demo/scenarios/csv-report.yaml",
            "--matrix",
            "examples/demo/matrix.yaml",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--sim-profile",
            "examples/demo/sim-profile.yaml",
        ],
    );
    let on_fleet = batch_of(&submitted.envelope());

    // A local batch in the cwd's `.cowork`, newer than the fleet's.
    let sandbox = Sandbox::empty();
    crate::run::run_demo(&sandbox.store());
    let local_dir = only_batch_dir(&sandbox.store());
    let local_batch = local_dir
        .file_name()
        .and_then(|name| name.to_str())
        .expect("a batch dir named by its id")
        .to_owned();

    // `--coordinator` given: `latest` is the coordinator's newest batch, not the local one.
    let resumed = fleet.cowork(sandbox.path(), &["resume", "latest"]);
    resumed
        .expect_code(0)
        .expect_stderr(&format!("batch {on_fleet}: resumed"));
    assert_eq!(
        resumed.stdout.trim(),
        on_fleet.as_str(),
        "{}",
        resumed.context()
    );
    assert!(
        !resumed.stderr.contains(&local_batch),
        "{}",
        resumed.context()
    );

    // The same id in the local store and on the coordinator configured by the environment:
    // neither is picked, both are named.
    let batches = sandbox.store().join("batches");
    copy_dir(&local_dir, &batches.join(on_fleet.as_str()));
    let url = fleet.coordinator_url();
    for reference in [on_fleet.as_str(), "latest"] {
        cowork_as_given(
            &fleet,
            sandbox.path(),
            &["resume", reference],
            &[("COWORK_COORDINATOR", &url)],
        )
        .expect_code(2)
        .expect_stderr("store .cowork")
        .expect_stderr(&format!("the coordinator at {url}"))
        .expect_stderr("--store .cowork")
        .expect_stderr("--coordinator");
    }
}
