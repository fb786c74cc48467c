//! What a user is told about a batch after it ended without a verdict (cancelled), and after
//! downloading a failed batch: a cancelled batch waits for nothing, lists what it spent and
//! its target, and `cowork results` judges its stored runs (incomplete) instead of saying "not
//! found"; `results --download` of a failed batch exits 0 once every file is saved.

use std::time::Duration;

use serde_json::Value;

use cowork_testkit::wait_until;

use crate::fleet::{Fleet, TOKEN, list_page_row};
use crate::support::{Sandbox, copy_dir, fixture};

/// Generous: the machine is shared; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_waits_for_nothing_lists_its_spend_and_has_results() {
    let mut fleet = Fleet::start();
    // Serves the container tier only: the microvm scenario's jobs wait until the cancel.
    fleet.spawn_worker("w1", "container,replay", "2");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    sandbox.write(
        "priced.yaml",
        "rules:\n  - pass_rate: 1\n    cost_usd: 0.05\n",
    );
    let batch = fleet.submit_detached(
        sandbox.path(),
        &[
            "scenarios",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--sim-profile",
            "priced.yaml",
        ],
    );
    let status = || fleet.cowork(sandbox.path(), &["status", batch.as_str()]);
    wait_until("the container runs finished and the microvm jobs wait")
        .within(PATIENCE)
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let out = status();
            let said = &out.stdout;
            if said.contains(" 2/4 jobs") && said.contains("waiting  no live worker serves") {
                Ok(())
            } else {
                Err(out.context())
            }
        });
    fleet
        .cowork(sandbox.path(), &["cancel", batch.as_str()])
        .expect_code(0);
    let ended = wait_until("the batch is cancelled")
        .within(PATIENCE)
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let out = status();
            if out.stdout.contains("state    cancelled") {
                Ok(out)
            } else {
                Err(out.context())
            }
        });
    assert!(
        !ended.stdout.contains("waiting") && !ended.stdout.contains("no live worker serves"),
        "a cancelled batch waits for nothing:\n{}",
        ended.context()
    );

    // The list API and the list page: the target and the spend of an ended batch, which is
    // what its progress last said.
    let records: Value = serde_json::from_str(&fleet.api_get("/v1/batches")).expect("a JSON list");
    let record = records
        .as_array()
        .and_then(|records| {
            records
                .iter()
                .find(|record| record["batchId"] == batch.as_str())
        })
        .unwrap_or_else(|| panic!("batch {batch} is not listed: {records:#}"));
    assert_eq!(record["target"], "scenarios", "{record:#}");
    let spent = record["spentUsd"]
        .as_f64()
        .unwrap_or_else(|| panic!("no spend in the record: {record:#}"));
    assert!(spent > 0.0, "two priced runs finished: {record:#}");
    assert!(
        ended.stdout.contains(&format!("${spent:.4}")),
        "the record's spend is the progress's: {spent}\n{}",
        ended.context()
    );
    let page = fleet.api_get(&format!("/v1/ui?token={TOKEN}"));
    let row = list_page_row(&page, batch.as_str());
    for fragment in ["<td>scenarios</td>".to_owned(), format!("${spent:.2}")] {
        assert!(row.contains(&fragment), "the row lacks {fragment:?}: {row}");
    }

    // `cowork batches` shows the same spend, not `-`.
    let listed = fleet.cowork(sandbox.path(), &["batches"]);
    listed.expect_code(0);
    let row = listed
        .stdout
        .lines()
        .find(|line| line.starts_with(batch.as_str()))
        .unwrap_or_else(|| panic!("batch {batch} is not listed:\n{}", listed.context()));
    assert!(
        row.contains(&format!("${spent:.4}")) && row.contains("cancelled"),
        "the row: {row}"
    );

    // Its results: the stored runs judged, marked incomplete; exit 1 as a watch of it gives.
    let results = fleet.cowork(sandbox.path(), &["results", batch.as_str()]);
    results.expect_code(1).expect_stderr("INCOMPLETE");
    let envelope: Value = serde_json::from_str(&results.stdout)
        .unwrap_or_else(|error| panic!("no envelope on stdout ({error}):\n{}", results.context()));
    assert_eq!(envelope["ok"], false, "{envelope:#}");
    assert_eq!(envelope["fleet"]["incomplete"], true, "{envelope:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_download_of_a_failed_batch_exits_0_once_every_file_is_saved() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container,replay", "2");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    sandbox.write("never.yaml", "rules:\n  - pass_rate: 0\n");
    let failed = fleet.submit_until_code(
        sandbox.path(),
        &[
            "scenarios/in-container.yaml",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--sim-profile",
            "never.yaml",
        ],
        1,
    );
    let envelope: Value = serde_json::from_str(&failed.stdout).expect("the envelope");
    let batch = crate::fleet::batch_of(&envelope);

    // Without --download, the verdict's exit code.
    fleet
        .cowork(sandbox.path(), &["results", batch.as_str()])
        .expect_code(1)
        .expect_stderr("FAIL");
    // With it, the download's: every file saved, the verdict still said.
    let dir = sandbox.path().join("downloaded");
    let dir_arg = dir.to_string_lossy().into_owned();
    fleet
        .cowork(
            sandbox.path(),
            &["results", batch.as_str(), "--download", &dir_arg],
        )
        .expect_code(0)
        .expect_stderr("FAIL")
        .expect_stderr("downloaded ");
    let spec = dir.join("spec.json");
    assert!(spec.is_file(), "{} was not saved", spec.display());
}
