//! The fleet end to end: a real nats-server with JetStream, a real S3 server (s3s-fs), a
//! coordinator and workers as separate `cowork` processes, and `cowork submit --watch`.

use std::path::PathBuf;
use std::process::Command;

use cowork_fabric::EventLog;
use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::JobEventKind;

use crate::fleet::{Fleet, batch_of};
use crate::support::{Output, Sandbox, workspace_root};

fn demo_args() -> Vec<&'static str> {
    vec![
        "examples/demo/scenarios/csv-report.yaml",
        "--repeat",
        "5",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--executor",
        "sim",
        "--sim-profile",
        "examples/demo/sim-profile.yaml",
    ]
}

/// The demo batch on the fleet with `n_workers` workers: its rollup.json bytes, after checking
/// every job's artifacts against the sha256 its `finished` event recorded.
async fn fleet_rollup(n_workers: usize) -> Vec<u8> {
    let mut fleet = Fleet::start();
    for index in 0..n_workers {
        fleet.spawn_worker(&format!("w{index}"), "container", "2");
    }
    let out = fleet.submit(&workspace_root(), &demo_args());
    let envelope = out.envelope();
    let code = out.code();
    assert_eq!(
        code,
        if envelope["ok"] == true { 0 } else { 1 },
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(20));
    let batch = batch_of(&envelope);
    let finished = fleet.finished_events(&batch, 20).await;
    let mut jobs_with_result = std::collections::BTreeSet::new();
    for (job_id, _, artifacts) in &finished {
        for artifact in artifacts {
            let bytes = fleet.object(&artifact.key);
            assert_eq!(
                cowork_fabric::sha256_hex(&bytes),
                artifact.sha256,
                "{} of {job_id}",
                artifact.key
            );
            assert_eq!(bytes.len() as u64, artifact.size, "{}", artifact.key);
            if artifact.key.ends_with("/result.json") {
                jobs_with_result.insert(job_id.clone());
            }
        }
    }
    assert_eq!(
        jobs_with_result.len(),
        20,
        "every job's result.json is stored"
    );
    let workers_used: std::collections::BTreeSet<&str> = finished
        .iter()
        .map(|(_, worker, _)| worker.as_str())
        .collect();
    assert!(workers_used.len() <= n_workers);
    fleet.object(&format!("batches/{batch}/rollup.json"))
}

fn embedded_rollup() -> Vec<u8> {
    let sandbox = Sandbox::empty();
    let store = sandbox.store();
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(demo_args().iter().map(|a| (*a).to_owned()));
    args.extend([
        "--store".into(),
        store.display().to_string(),
        "--quiet".into(),
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_cowork"))
        .args(&args)
        .current_dir(workspace_root())
        .output()
        .expect("running cowork run");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batches: Vec<PathBuf> = std::fs::read_dir(store.join("batches"))
        .expect("batches dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(batches.len(), 1);
    std::fs::read(batches[0].join("rollup.json")).expect("rollup.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_batch_gives_the_same_rollup_embedded_and_on_1_and_3_workers() {
    let embedded = embedded_rollup();
    let one = fleet_rollup(1).await;
    let three = fleet_rollup(3).await;
    assert_eq!(
        String::from_utf8_lossy(&embedded),
        String::from_utf8_lossy(&one),
        "embedded vs 1 worker"
    );
    assert_eq!(
        String::from_utf8_lossy(&embedded),
        String::from_utf8_lossy(&three),
        "embedded vs 3 workers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_reach_only_workers_serving_their_tier() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("wc", "container", "2");
    fleet.spawn_worker("wm", "microvm", "2");
    fleet.spawn_worker("wr", "replay", "2");
    let sandbox = Sandbox::empty();
    crate::support::copy_dir(&crate::support::fixture("routing"), sandbox.path());
    let out = fleet.submit(
        sandbox.path(),
        &["scenarios", "--repeat", "3", "--executor", "sim"],
    );
    let envelope = out.envelope();
    let batch = batch_of(&envelope);
    for (job_id, worker, _) in fleet.finished_events(&batch, 6).await {
        // Unit f0 is in-container.yaml, f1 is in-microvm.yaml (sorted listing).
        let expected = if job_id.contains("/f0/") { "wc" } else { "wm" };
        assert_eq!(
            worker,
            expected,
            "{job_id} ran on {worker}\n{}",
            fleet.logs()
        );
    }
    let out = fleet.submit(
        &workspace_root(),
        &["--replay", "examples/demo/cassettes", "--executor", "sim"],
    );
    let envelope = out.envelope();
    assert_eq!(envelope["command"], "replay");
    assert_eq!(
        envelope["results"].as_array().map(Vec::len),
        Some(2),
        "one result per cassette"
    );
    let batch = batch_of(&envelope);
    for (job_id, worker, _) in fleet.finished_events(&batch, 2).await {
        assert_eq!(worker, "wr", "replay job {job_id} ran on {worker}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_worker_without_losing_its_running_job() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("wd", "container", "1");
    let sandbox = Sandbox::empty();
    crate::support::copy_dir(&crate::support::fixture("routing"), sandbox.path());
    // Each simulated run lasts 3 s of real time, so the drained worker is mid-job.
    sandbox.write(
        "slow.yaml",
        "rules:\n  - duration_ms: 3000\n    time_scale: 1.0\n    pass_rate: 1.0\n",
    );
    let coordinator = format!("http://127.0.0.1:{}", fleet.api_port);
    let mut submit = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut submit);
    submit
        .args([
            "submit",
            "scenarios/in-container.yaml",
            "--repeat",
            "3",
            "--executor",
            "sim",
            "--sim-profile",
            "slow.yaml",
        ])
        .args(["--coordinator", &coordinator])
        .current_dir(sandbox.path());
    let out = submit.output().expect("running cowork submit");
    let out = Output::new("cowork submit".into(), sandbox.path().to_path_buf(), out);
    assert_eq!(out.code(), 0, "{}", out.context());
    let batch = BatchId::new(out.stdout.trim()).expect("submit prints the batch id");

    // Wait for the worker's first `started` event: the subscription wakes on it, no polling.
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats.url()))
        .await
        .expect("connecting to nats");
    let mut subscription = fabric
        .events
        .subscribe(&batch, 1)
        .await
        .expect("subscribing");
    loop {
        let (_, event) = subscription
            .next()
            .await
            .expect("an event")
            .expect("a readable event");
        if matches!(event.event, JobEventKind::Started) && event.worker_id == "wd" {
            break;
        }
    }
    fleet.terminate("wd");
    let log = fleet.log("wd");
    let drained: usize = log
        .split("drained after ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the worker says how many jobs it finished\n{log}"));
    assert!(
        drained >= 1,
        "the running job finished before the worker exited\n{log}"
    );

    // The rest of the batch is finished by a new worker; every job is counted once.
    fleet.spawn_worker("w2", "container", "2");
    let mut watch = fleet.watch_command(sandbox.path(), &batch);
    let out = Output::new(
        "cowork watch".into(),
        sandbox.path().to_path_buf(),
        watch.output().expect("running cowork watch"),
    );
    let envelope = out.envelope();
    assert_eq!(out.code(), 0, "{}\n{}", out.context(), fleet.logs());
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(3));
    let finished = fleet.finished_events(&batch, 3).await;
    assert_eq!(finished.len(), 3, "each job finished exactly once");

    // `cowork results --download` saves every stored file of the batch, byte for byte.
    let download = sandbox.path().join("download");
    let mut results = Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut results);
    let download_arg = download.display().to_string();
    results
        .args([
            "results",
            batch.as_str(),
            "--coordinator",
            &coordinator,
            "--download",
            &download_arg,
        ])
        .current_dir(sandbox.path());
    let out = Output::new(
        "cowork results".into(),
        sandbox.path().to_path_buf(),
        results.output().expect("running cowork results"),
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    // Its stdout is the stored envelope, byte for byte (streamed through a spool file).
    assert!(
        out.stdout.as_bytes() == fleet.object(&format!("batches/{batch}/envelope.json")),
        "cowork results printed something else than the stored envelope\n{}",
        out.context()
    );
    for (_, _, artifacts) in &finished {
        for artifact in artifacts {
            let local = artifact
                .key
                .strip_prefix(&format!("batches/{batch}/"))
                .expect("a key of this batch");
            let bytes = std::fs::read(download.join(local))
                .unwrap_or_else(|e| panic!("{local} was not downloaded: {e}"));
            assert_eq!(
                cowork_fabric::sha256_hex(&bytes),
                artifact.sha256,
                "{local}"
            );
        }
    }
    for document in ["spec.json", "rollup.json", "envelope.json"] {
        assert_eq!(
            std::fs::read(download.join(document)).ok(),
            Some(fleet.object(&format!("batches/{batch}/{document}"))),
            "{document}"
        );
    }
    let by_drained = finished
        .iter()
        .filter(|(_, worker, _)| worker == "wd")
        .count();
    assert_eq!(
        by_drained, drained,
        "every job the drained worker ran was stored and reported"
    );
}
