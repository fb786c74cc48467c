//! Invalid submits are refused with 400, every problem listed, and nothing stored.

use cowork_client::ClientError;
use cowork_fabric::sha256_hex;
use cowork_schema::batch::BatchSpec;

use crate::support::{Fleet, Server, kind, packed, project, repeat};

/// A zstd-compressed tar holding one `../evil` entry, written by hand (the packer refuses it).
fn hostile_bundle() -> Vec<u8> {
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
    zstd::stream::encode_all(tar_bytes.as_slice(), 3).expect("compress")
}

#[tokio::test]
async fn invalid_batches_are_refused_with_every_problem() {
    let fleet = Fleet::new();
    let server = Server::start(fleet.config("c1", 8), fleet.ports()).await;
    let client = server.client();
    let dir = project();
    let batch = packed(dir.path(), repeat(3));
    let hostile = hostile_bundle();

    let with = |change: &dyn Fn(&mut BatchSpec)| {
        let mut spec = batch.spec.clone();
        change(&mut spec);
        spec
    };
    let cases: Vec<(&str, BatchSpec, Vec<u8>, Vec<&str>)> = vec![
        (
            "digest mismatch",
            with(&|spec| spec.bundle_sha256 = "ab".repeat(32)),
            batch.bundle.clone(),
            vec!["bundle: sha256 is "],
        ),
        (
            "repeat 1",
            with(&|spec| spec.flags.repeat = Some(1)),
            batch.bundle.clone(),
            vec!["spec.flags.repeat: must be an integer from 2 to 10000, got 1"],
        ),
        (
            "hostile entry",
            with(&|spec| spec.bundle_sha256 = sha256_hex(&hostile)),
            hostile.clone(),
            vec!["bundle: bundle entry \"../evil\": `..` component"],
        ),
        (
            "all three at once",
            with(&|spec| spec.flags.repeat = Some(1)),
            hostile.clone(),
            vec![
                "spec.flags.repeat: must be an integer from 2 to 10000, got 1",
                "bundle: sha256 is ",
                "bundle: bundle entry \"../evil\": `..` component",
            ],
        ),
    ];
    for (name, spec, bundle, expect) in cases {
        let error = client
            .submit(&spec, bundle)
            .await
            .expect_err("the batch is refused");
        let ClientError::BadRequest { message, problems } = &error else {
            panic!(
                "{name}: expected a bad request, got {} ({error})",
                kind(&error)
            );
        };
        assert_eq!(message, "batch refused", "{name}");
        assert_eq!(problems.len(), expect.len(), "{name}: {problems:#?}");
        for (problem, expected) in problems.iter().zip(&expect) {
            assert!(
                problem.contains(expected),
                "{name}: {expected:?} not in {problems:#?}"
            );
        }
    }

    // A body that is not a submit at all.
    let http = reqwest::Client::new();
    let form = reqwest::multipart::Form::new()
        .text("spec", "{not json")
        .text("extra", "x");
    let response = http
        .post(format!("{}/v1/batches", server.url))
        .bearer_auth(crate::support::TOKEN)
        .multipart(form)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 400);
    let body: cowork_schema::api::ApiError = response.json().await.expect("an api error body");
    assert_eq!(body.problems.len(), 3, "{body:#?}");
    assert!(
        body.problems[0].starts_with("part \"extra\": unknown"),
        "{body:#?}"
    );
    assert!(
        body.problems[1].starts_with("part bundle: missing"),
        "{body:#?}"
    );
    assert!(
        body.problems[2].starts_with("part spec: not a valid batch spec"),
        "{body:#?}"
    );

    assert!(
        fleet.stored_files().is_empty(),
        "{:#?}",
        fleet.stored_files()
    );
    assert!(client.list().await.expect("list").is_empty());
    assert!(fleet.queue.published().is_empty());
    let scratch: Vec<_> = std::fs::read_dir(fleet.dir.path().join("scratch"))
        .map(|entries| entries.collect())
        .unwrap_or_default();
    assert!(scratch.is_empty(), "scratch dirs left behind: {scratch:?}");
    server.stop().await;
}

#[tokio::test]
async fn unknown_batches_are_not_found() {
    let fleet = Fleet::new();
    let server = Server::start(fleet.config("c1", 8), fleet.ports()).await;
    let client = server.client();
    let missing = cowork_schema::BatchId::new("20260101-000000-000000").expect("valid id");
    for error in [
        client
            .status(&missing)
            .await
            .map(|_| ())
            .expect_err("no such batch"),
        client
            .cancel(&missing, false)
            .await
            .map(|_| ())
            .expect_err("no such batch"),
        client
            .report(&missing)
            .await
            .map(|_| ())
            .expect_err("no such batch"),
        client
            .watch(&missing)
            .await
            .map(|_| ())
            .expect_err("no such batch"),
    ] {
        assert_eq!(kind(&error), "not-found", "{error}");
    }
    server.stop().await;
}

#[tokio::test]
async fn oversized_bundles_are_refused_with_413() {
    let fleet = Fleet::new();
    let mut config = fleet.config("c1", 8);
    config.max_bundle_bytes = 1000;
    let server = Server::start(config, fleet.ports()).await;
    let dir = project();
    let batch = packed(dir.path(), repeat(3));
    let http = reqwest::Client::new();
    // Over `max_bundle_bytes`, a little or far: the bundle part is counted as it streams to
    // the scratch dir and refused as soon as it passes the limit.
    for (size, expect) in [
        (
            2000,
            "reading part bundle: over the upload limit after 2000 bytes; a bundle may hold at most 1000 bytes",
        ),
        (3 << 20, "reading part bundle: over the upload limit after "),
    ] {
        let form = reqwest::multipart::Form::new()
            .text("spec", serde_json::to_string(&batch.spec).expect("json"))
            .part("bundle", reqwest::multipart::Part::bytes(vec![0u8; size]));
        let response = http
            .post(format!("{}/v1/batches", server.url))
            .bearer_auth(crate::support::TOKEN)
            .multipart(form)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 413, "{size}");
        let body: cowork_schema::api::ApiError = response.json().await.expect("an api error body");
        assert!(body.error.starts_with(expect), "{size}: {body:?}");
    }
    assert!(
        fleet.stored_files().is_empty(),
        "{:#?}",
        fleet.stored_files()
    );
    server.stop().await;
}
