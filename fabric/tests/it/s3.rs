//! `S3ArtifactStore` against a real `s3s-fs` (one server per test): round trips with the recorded
//! sha256, create-if-absent, paged listing, multipart uploads, corruption, an outage and its
//! recovery, key validation, missing objects and bucket creation.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use cowork_fabric::artifacts::{ArtifactError, ArtifactStore, PutOutcome};
use cowork_fabric::s3::store::SHA256_METADATA;
use cowork_fabric::s3::{S3ArtifactStore, S3Config};
use cowork_fabric::secret::Secret;
use cowork_fabric::sha256_hex;
use cowork_testkit::S3Server;

const BUCKET: &str = "cowork-test";
const MIB: usize = 1024 * 1024;

/// A config for `server`'s bucket [`BUCKET`], created on connect.
pub(crate) fn config(server: &S3Server) -> S3Config {
    let mut config = S3Config::new(
        BUCKET,
        server.access_key.clone(),
        Secret::new(server.secret_key.clone()),
    );
    config.endpoint = Some(server.endpoint());
    config.create_bucket = true;
    config
}

pub(crate) async fn connect(config: &S3Config) -> S3ArtifactStore {
    S3ArtifactStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connecting to {:?}: {e}", config.endpoint))
}

/// Deterministic, incompressible-looking bytes (an LCG), so parts and corruption are visible.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// The metadata and etag of `object_key` as the server reports them, read with a plain SDK
/// client so the test does not trust the store's own view.
async fn head_raw(server: &S3Server, object_key: &str) -> (HashMap<String, String>, String) {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .tls_context(
            tls::TlsContext::builder()
                .with_trust_store(tls::TrustStore::empty())
                .build()
                .expect("an empty trust store is a valid tls context"),
        )
        .build_https();
    let client = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(server.endpoint())
            .force_path_style(true)
            .credentials_provider(Credentials::new(
                &server.access_key,
                &server.secret_key,
                None,
                None,
                "test",
            ))
            .http_client(http)
            .build(),
    );
    let head = client
        .head_object()
        .bucket(BUCKET)
        .key(object_key)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "head {object_key}: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            )
        });
    (
        head.metadata().cloned().unwrap_or_default(),
        head.e_tag().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn round_trip_records_the_sha256() {
    let server = S3Server::start();
    let store = connect(&config(&server)).await;
    let key = "batches/b1/jobs/c0/r0/result.json";
    let body = br#"{"verdict":"pass"}"#.to_vec();

    let stored = store.put(key, body.clone()).await.expect("put");
    assert_eq!(stored.key, key);
    assert_eq!(stored.size, body.len() as u64);
    assert_eq!(stored.sha256, sha256_hex(&body));
    assert_eq!(store.get(key).await.expect("get"), body);
    assert!(store.exists(key).await.expect("exists"));
    let (metadata, _) = head_raw(&server, key).await;
    assert_eq!(
        metadata.get(SHA256_METADATA),
        Some(&stored.sha256),
        "{metadata:?}"
    );

    // A plain put replaces the object and its recorded digest.
    let replaced = store.put(key, b"{}".to_vec()).await.expect("put again");
    assert_eq!(store.get(key).await.expect("get"), b"{}");
    let (metadata, _) = head_raw(&server, key).await;
    assert_eq!(metadata.get(SHA256_METADATA), Some(&replaced.sha256));

    // An empty object is an object too.
    let empty = store
        .put("batches/b1/empty.log", Vec::new())
        .await
        .expect("put");
    assert_eq!(empty.size, 0);
    assert!(
        store
            .get("batches/b1/empty.log")
            .await
            .expect("get")
            .is_empty()
    );
}

#[tokio::test]
async fn create_if_absent_keeps_the_first_bytes() {
    let server = S3Server::start();
    let store = connect(&config(&server)).await;
    let key = "bundles/abc.tar.zst";

    let first = store
        .put_if_absent(key, b"one".to_vec())
        .await
        .expect("first put");
    let PutOutcome::Created(reference) = first else {
        panic!("the first create-if-absent put must create, got {first:?}");
    };
    assert_eq!(reference.sha256, sha256_hex(b"one"));
    assert_eq!(reference.size, 3);

    let second = store
        .put_if_absent(key, b"two".to_vec())
        .await
        .expect("second put");
    assert_eq!(second, PutOutcome::AlreadyExists);
    assert_eq!(store.get(key).await.expect("get"), b"one");
}

#[tokio::test]
async fn list_pages_through_more_than_one_page() {
    let server = S3Server::start();
    let mut config = config(&server);
    // 100 keys per page: 1,200 keys take 12 pages, so a store that read one page would miss most.
    config.list_page_size = 100;
    config.prefix = Some("fleet".to_owned());
    let store = Arc::new(connect(&config).await);

    let mut expected: Vec<String> = (0..1200)
        .map(|i| format!("batches/b1/jobs/j{i:04}.json"))
        .collect();
    // Written in reverse so the listing's order cannot come from the write order.
    let mut tasks = tokio::task::JoinSet::new();
    // Sixteen writers at a time: enough to keep the test quick, few enough for one s3s-fs.
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    for key in expected.iter().rev() {
        let key = key.clone();
        let store = Arc::clone(&store);
        let permits = Arc::clone(&permits);
        tasks.spawn(async move {
            let _permit = permits
                .acquire()
                .await
                .expect("the semaphore is never closed");
            store.put(&key, key.as_bytes().to_vec()).await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("put task").expect("put");
    }
    // Neighbours that the prefix must leave out.
    store
        .put("batches/b2/spec.json", b"{}".to_vec())
        .await
        .expect("put");
    store
        .put("batches/b10/spec.json", b"{}".to_vec())
        .await
        .expect("put");

    let listed = store.list("batches/b1/").await.expect("list");
    expected.sort();
    assert_eq!(listed.len(), expected.len());
    assert_eq!(listed, expected);

    let narrow = store.list("batches/b1/jobs/j011").await.expect("list");
    assert_eq!(narrow.len(), 10, "{narrow:?}");
    assert_eq!(narrow[0], "batches/b1/jobs/j0110.json");

    let all = store.list("").await.expect("list everything");
    assert_eq!(all.len(), 1202);
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]), "sorted");
    assert!(store.list("nothing/").await.expect("list").is_empty());

    // One level at a time, across listing pages (1,200 job files under batches/b1/jobs/).
    let batches = store
        .list_children("batches/")
        .await
        .expect("list children");
    assert_eq!(batches, ["b1", "b10", "b2"]);
    let jobs = store
        .list_children("batches/b1/jobs/")
        .await
        .expect("list children");
    assert_eq!(jobs.len(), expected.len(), "{:?}", &jobs[..3]);
    assert_eq!(jobs[0], "j0000.json");
    assert!(
        store
            .list_children("nothing/")
            .await
            .expect("list")
            .is_empty()
    );
}

#[tokio::test]
async fn multipart_uploads_round_trip() {
    let server = S3Server::start();
    let mut config = config(&server);
    config.multipart_threshold = 5 * MIB as u64;
    config.part_size = 5 * MIB as u64;
    let store = connect(&config).await;
    let key = "bundles/big.tar.zst";
    let body = pattern(12 * MIB, 1);

    let stored = store.put(key, body.clone()).await.expect("multipart put");
    assert_eq!(stored.size, body.len() as u64);
    assert_eq!(stored.sha256, sha256_hex(&body));
    let (metadata, e_tag) = head_raw(&server, key).await;
    assert_eq!(metadata.get(SHA256_METADATA), Some(&stored.sha256));
    // A multipart object's etag ends in "-<parts>": 5 + 5 + 2 MiB.
    assert!(e_tag.trim_matches('"').ends_with("-3"), "etag {e_tag}");
    let read = store.get(key).await.expect("get");
    assert!(read == body, "the 12 MiB object came back different");

    // Create-if-absent above the threshold: created once, then left alone.
    let other = "bundles/other.tar.zst";
    let first = store
        .put_if_absent(other, pattern(6 * MIB, 2))
        .await
        .expect("first put");
    assert!(matches!(first, PutOutcome::Created(_)), "{first:?}");
    let second = store
        .put_if_absent(other, pattern(6 * MIB, 3))
        .await
        .expect("second put");
    assert_eq!(second, PutOutcome::AlreadyExists);
    assert!(store.get(other).await.expect("get") == pattern(6 * MIB, 2));
}

#[tokio::test]
async fn files_go_up_in_parts_read_from_disk() {
    let server = S3Server::start();
    let mut config = config(&server);
    config.multipart_threshold = 5 * MIB as u64;
    config.part_size = 5 * MIB as u64;
    let store = connect(&config).await;
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, len) in [("small.json", 1000), ("big.json", 11 * MIB)] {
        let body = pattern(len, 4);
        let path = dir.path().join(name);
        std::fs::write(&path, &body).expect("writing the file");
        let key = format!("batches/b1/{name}");
        let stored = store.put_file(&key, &path).await.expect("put_file");
        assert_eq!(stored.size, len as u64);
        assert_eq!(stored.sha256, sha256_hex(&body));
        assert!(
            store.get(&key).await.expect("get") == body,
            "{name} came back different"
        );
    }
    let (_, e_tag) = head_raw(&server, "batches/b1/big.json").await;
    assert!(e_tag.trim_matches('"').ends_with("-3"), "etag {e_tag}");
}

#[tokio::test]
async fn changed_bytes_on_the_server_are_corrupt() {
    let server = S3Server::start();
    let mut config = config(&server);
    config.prefix = Some("fleet/".to_owned());
    let store = connect(&config).await;
    let key = "bundles/x.tar.zst";
    let original = store.put(key, b"original".to_vec()).await.expect("put");

    let on_disk = server.data_dir().join(BUCKET).join("fleet").join(key);
    assert!(
        on_disk.is_file(),
        "{} must hold the object",
        on_disk.display()
    );
    std::fs::write(&on_disk, b"tampered").expect("rewriting the object file");

    match store.get(key).await {
        Err(ArtifactError::Corrupt {
            key: found_key,
            expected,
            found,
        }) => {
            assert_eq!(found_key, key);
            assert_eq!(expected, original.sha256);
            assert_eq!(found, sha256_hex(b"tampered"));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn get_file_streams_an_object_into_a_file_and_refuses_a_tampered_one() {
    let server = S3Server::start();
    let mut config = config(&server);
    config.multipart_threshold = 5 * MIB as u64;
    config.part_size = 5 * MIB as u64;
    let store = connect(&config).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let body = pattern(12 * MIB, 9);
    let key = "batches/b1/envelope.json";
    let stored = store.put(key, body.clone()).await.expect("put");
    let copy = dir.path().join("copy.json");
    let size = store.get_file(key, &copy).await.expect("get_file");
    assert_eq!(size, body.len() as u64);
    assert!(
        std::fs::read(&copy).expect("reading the copy") == body,
        "the copy differs from the object"
    );

    let on_disk = server.data_dir().join(BUCKET).join(key);
    let mut tampered = body;
    tampered[7 * MIB] ^= 0xff;
    std::fs::write(&on_disk, &tampered).expect("rewriting the object file");
    let refused = dir.path().join("refused.json");
    match store.get_file(key, &refused).await {
        Err(ArtifactError::Corrupt {
            expected, found, ..
        }) => {
            assert_eq!(expected, stored.sha256);
            assert_eq!(found, sha256_hex(&tampered));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(
        !refused.exists(),
        "a file the store could not vouch for must not be left behind"
    );
    match store
        .get_file("batches/b1/missing.json", &dir.path().join("m"))
        .await
    {
        Err(ArtifactError::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn an_outage_is_transient_and_the_same_call_works_after_a_restart() {
    let mut server = S3Server::start();
    let config = config(&server);
    let store = connect(&config).await;
    let key = "batches/b1/rollup.json";
    store.put(key, b"{}".to_vec()).await.expect("put");

    server.kill();
    fn check<T: std::fmt::Debug>(what: &str, result: Result<T, ArtifactError>) {
        match result {
            Err(error) if error.is_transient() => {
                let text = error.to_string();
                assert!(text.contains("batches/"), "{what}: {text}");
                assert!(!text.contains("cowork-test-secret-key"), "{what}: {text}");
            }
            other => panic!("{what} with the server down: expected Transient, got {other:?}"),
        }
    }
    check("get", store.get(key).await);
    check("put", store.put("batches/b1/x", b"x".to_vec()).await);
    check(
        "put_if_absent",
        store.put_if_absent("batches/b1/y", b"y".to_vec()).await,
    );
    check("exists", store.exists(key).await);
    check("list", store.list("batches/").await);
    match S3ArtifactStore::connect(&config).await {
        Err(error) => assert!(error.is_transient(), "connect: {error}"),
        Ok(_) => panic!("connect with the server down must fail"),
    }

    server.restart();
    assert_eq!(store.get(key).await.expect("get after restart"), b"{}");
}

#[tokio::test]
async fn invalid_keys_are_refused_without_a_request() {
    let mut server = S3Server::start();
    let store = connect(&config(&server)).await;
    // With the server gone, any request would fail as Transient: InvalidKey proves none was sent.
    server.kill();
    for key in [
        "",
        "/abs",
        "a//b",
        "../escape",
        "a/./b",
        "trailing/",
        "a\\b",
    ] {
        let results = [
            store.put(key, b"x".to_vec()).await.map(|_| ()),
            store.put_if_absent(key, b"x".to_vec()).await.map(|_| ()),
            store.get(key).await.map(|_| ()),
            store.exists(key).await.map(|_| ()),
        ];
        for result in results {
            assert!(
                matches!(result, Err(ArtifactError::InvalidKey { .. })),
                "{key:?}: {result:?}"
            );
        }
    }
    for prefix in ["/", "/batches", "a//", "../"] {
        let result = store.list(prefix).await;
        assert!(
            matches!(result, Err(ArtifactError::InvalidKey { .. })),
            "{prefix:?}: {result:?}"
        );
    }
}

#[tokio::test]
async fn missing_objects_are_not_found() {
    let server = S3Server::start();
    let store = connect(&config(&server)).await;
    let missing = "batches/none/result.json";
    match store.get(missing).await {
        Err(ArtifactError::NotFound { key }) => assert_eq!(key, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!store.exists(missing).await.expect("exists"));
}

#[tokio::test]
async fn buckets_are_created_once_and_checked_otherwise() {
    let server = S3Server::start();

    // Without create_bucket a missing bucket is a clear, permanent error.
    let mut plain = config(&server);
    plain.create_bucket = false;
    match S3ArtifactStore::connect(&plain).await {
        Err(ArtifactError::Failed { message, .. }) => {
            assert!(message.contains("does not exist"), "{message}");
        }
        other => panic!("expected Failed for a missing bucket, got {other:?}"),
    }

    let first = connect(&config(&server)).await;
    first
        .put("batches/b1/spec.json", b"{}".to_vec())
        .await
        .expect("put");
    // Creating again is fine ("already exists"), and the objects stay.
    let second = connect(&config(&server)).await;
    assert_eq!(
        second.get("batches/b1/spec.json").await.expect("get"),
        b"{}"
    );
    assert!(S3ArtifactStore::connect(&plain).await.is_ok());

    // Wrong credentials are permanent, and the message does not carry them.
    let mut wrong = plain.clone();
    wrong.secret_access_key = Secret::new("not-the-secret-value");
    match S3ArtifactStore::connect(&wrong).await {
        Err(error @ ArtifactError::Failed { .. }) => {
            assert!(
                !error.to_string().contains("not-the-secret-value"),
                "{error}"
            );
        }
        other => panic!("expected Failed for wrong credentials, got {other:?}"),
    }

    // A bad config never reaches the server.
    let mut invalid = plain.clone();
    invalid.part_size = 1024;
    match S3ArtifactStore::connect(&invalid).await {
        Err(ArtifactError::Failed { message, .. }) => {
            assert!(message.contains("part_size"), "{message}");
        }
        other => panic!("expected Failed for a bad config, got {other:?}"),
    }
}
