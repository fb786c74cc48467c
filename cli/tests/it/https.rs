//! The coordinator API over HTTPS (`--tls-cert`, `--tls-key`) and a client that trusts its CA
//! (`--coordinator-ca`): a batch runs end to end; without the CA, or over plain HTTP, the client
//! fails with a message that says why.

use std::process::Command;

use cowork_testkit::TestCertificates;

use crate::fleet::Fleet;
use crate::support::{Output, workspace_root};

fn cowork(fleet: &Fleet, args: &[&str]) -> Output {
    cowork_without(fleet, args, &[])
}

/// `cowork <args>` with the fleet's environment minus the variables `unset`.
fn cowork_without(fleet: &Fleet, args: &[&str], unset: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut command);
    for key in unset {
        command.env_remove(key);
    }
    command.args(args).current_dir(workspace_root());
    let out = command.output().expect("running cowork");
    Output::new(format!("cowork {}", args.join(" ")), workspace_root(), out)
}

#[test]
fn a_batch_runs_against_an_https_coordinator_that_the_client_trusts() {
    let certificates_dir = tempfile::tempdir().expect("temp dir");
    let certificates = TestCertificates::generate(certificates_dir.path(), &[]);
    let cert = certificates.server_cert.display().to_string();
    let key = certificates.server_key.display().to_string();
    let ca = certificates.ca_cert.display().to_string();
    let mut fleet = Fleet::start_with_env(&[
        ("COWORK_TLS_CERT", cert.as_str()),
        ("COWORK_TLS_KEY", key.as_str()),
    ]);
    fleet.spawn_worker("w0", "container", "2");
    let https = format!("https://127.0.0.1:{}", fleet.api_port);
    let batch = [
        "submit",
        "examples/demo/scenarios/csv-report.yaml",
        "--repeat",
        "2",
        "--executor",
        "sim",
        "--coordinator",
        &https,
        "--watch",
        "--output-format",
        "json",
        "--quiet",
    ];

    let mut trusted = batch.to_vec();
    trusted.extend(["--coordinator-ca", &ca]);
    let out = cowork(&fleet, &trusted);
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    assert_eq!(out.envelope()["results"].as_array().map(Vec::len), Some(2));

    // Without the CA the server's certificate is not trusted: a usage-level failure, nothing
    // submitted.
    let out = cowork(&fleet, &batch);
    assert_ne!(out.code(), 0, "{}", out.context());
    let stderr = out.stderr.to_lowercase();
    assert!(
        stderr.contains("certificate") || stderr.contains("unknownissuer"),
        "the failure names the certificate: {}",
        out.context()
    );

    // Plain HTTP to the TLS port does not get an answer.
    let plain = format!("http://127.0.0.1:{}", fleet.api_port);
    let out = cowork(&fleet, &["workers", "--coordinator", &plain]);
    assert_ne!(out.code(), 0, "{}", out.context());

    // The bad pairing is refused at start-up, naming both flags.
    let out = cowork_without(
        &fleet,
        &[
            "coordinator",
            "--tls-cert",
            &cert,
            "--listen",
            "127.0.0.1:0",
        ],
        &["COWORK_TLS_KEY"],
    );
    assert_eq!(out.code(), 2, "{}", out.context());
    out.expect_stderr("--tls-key");
}
