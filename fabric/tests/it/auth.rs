//! Authentication and TLS of the distributed fabric against real servers: NATS with
//! user/password, with a token, with a creds file (operator mode: operator, account and user
//! JWTs generated at runtime) and with TLS (a CA generated at runtime), and S3 over TLS through
//! the testkit's TLS-terminating proxy.
//!
//! A right setting must connect and work end to end (streams ensured, a job published and
//! pulled; an object stored and read). A wrong or missing one must fail with an error that names
//! the problem and never carries the password or token.

use std::time::Duration;

use cowork_fabric::artifacts::{ArtifactError, ArtifactStore};
use cowork_fabric::nats::{NatsConfig, NatsError, connect};
use cowork_fabric::queue::JobQueue;
use cowork_fabric::s3::{S3ArtifactStore, S3Config};
use cowork_fabric::secret::Secret;
use cowork_schema::job::{JobSpec, Tier};
use cowork_testkit::{
    NatsOptions, NatsServer, S3Options, S3Server, TestCertificates, TlsCertificate, job_spec,
};

const USER: &str = "fleet";
const PASSWORD: &str = "pw-9d41c7e2b5";
const TOKEN: &str = "tok-5be08f3a71";
/// Bounds a connect that retries (TLS handshake failures count as I/O errors and are retried
/// until `connect_timeout`); short, because these attempts are meant to fail.
const FAILING_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Upper bound for a pull of a job that was just published.
const EVENTUALLY: Duration = Duration::from_secs(30);

fn config(url: &str) -> NatsConfig {
    let mut config = NatsConfig::new(url);
    config.connect_timeout = Duration::from_secs(20);
    config
}

/// The error and all its sources, one after the other: what an operator would read.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Connects with `config`, which must fail; returns the whole error text (display chain and
/// debug form), after checking that no secret appears in it.
async fn refused(mut config: NatsConfig) -> String {
    config.connect_timeout = FAILING_CONNECT_TIMEOUT;
    let error: NatsError = match connect(&config).await {
        Ok(_) => panic!("connecting to {} must fail", config.url),
        Err(error) => error,
    };
    let text = format!("{} | {error:?}", chain(&error));
    for secret in [PASSWORD, TOKEN] {
        assert!(!text.contains(secret), "the error shows a secret: {text}");
    }
    text
}

fn job(batch_id: &str) -> JobSpec {
    job_spec()
        .batch(batch_id)
        .tier(Tier::Container)
        .repeat_index(0)
        .timeout_ms(1000)
        .build()
}

/// Connects with `config` (which sets up the streams), publishes a job of batch `batch_id` and
/// pulls it back. Each call on one server needs its own batch: the jobs stream drops a job id it
/// has seen within its duplicate window.
async fn round_trip(config: &NatsConfig, batch_id: &str) {
    let fabric = connect(config)
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {}", config.url, chain(&e)));
    let sent = job(batch_id);
    fabric.queue.publish(&sent).await.expect("publishing a job");
    let delivery = tokio::time::timeout(EVENTUALLY, fabric.queue.pull(&[Tier::Container]))
        .await
        .expect("a job within the deadline")
        .expect("pulling")
        .expect("an open queue");
    assert_eq!(delivery.job, sent);
    delivery.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn nats_user_and_password_are_required_and_checked() {
    let server = NatsServer::start_with(NatsOptions {
        user_password: Some((USER.to_owned(), PASSWORD.to_owned())),
        ..NatsOptions::default()
    });
    let mut right = config(&server.url());
    right.user = Some(USER.to_owned());
    right.password = Some(Secret::new(PASSWORD));
    round_trip(&right, "auth-b1").await;

    let mut wrong = right.clone();
    wrong.password = Some(Secret::new("pw-not-the-one"));
    let text = refused(wrong).await;
    assert!(text.contains("authorization violation"), "{text}");

    let missing = config(&server.url());
    let text = refused(missing).await;
    assert!(text.contains("authorization violation"), "{text}");

    // A bad password is a person's problem: retrying it cannot help.
    let mut wrong = right.clone();
    wrong.password = Some(Secret::new("pw-not-the-one"));
    let error = connect(&wrong).await.err().expect("a wrong password fails");
    assert!(!error.is_transient(), "{error}");
}

#[tokio::test]
async fn nats_token_is_required_and_checked() {
    let server = NatsServer::start_with(NatsOptions {
        token: Some(TOKEN.to_owned()),
        ..NatsOptions::default()
    });
    let mut right = config(&server.url());
    right.token = Some(Secret::new(TOKEN));
    round_trip(&right, "auth-b2").await;

    let mut wrong = right.clone();
    wrong.token = Some(Secret::new("tok-not-the-one"));
    let text = refused(wrong).await;
    assert!(text.contains("authorization violation"), "{text}");

    let text = refused(config(&server.url())).await;
    assert!(text.contains("authorization violation"), "{text}");

    // The password of another method is not a token.
    let mut other_method = config(&server.url());
    other_method.user = Some(USER.to_owned());
    other_method.password = Some(Secret::new(TOKEN));
    let text = refused(other_method).await;
    assert!(text.contains("authorization violation"), "{text}");
}

#[tokio::test]
async fn nats_tls_works_with_the_servers_ca_only() {
    let server = NatsServer::start_with(NatsOptions {
        tls: Some(TlsCertificate::Generated),
        token: Some(TOKEN.to_owned()),
        ..NatsOptions::default()
    });
    assert!(server.url().starts_with("tls://"), "{}", server.url());
    let ca = server.ca_path().expect("a generated CA");

    let mut right = config(&server.url());
    right.token = Some(Secret::new(TOKEN));
    right.tls_ca_file = Some(ca.clone());
    right.tls_required = true;
    round_trip(&right, "auth-b3").await;

    // A `nats://` URL upgrades to TLS because the server demands it.
    let mut upgraded = right.clone();
    upgraded.url = format!("nats://127.0.0.1:{}", server.port);
    upgraded.tls_required = false;
    round_trip(&upgraded, "auth-b4").await;

    // Without the CA the server's certificate is not trusted (the system roots lack it).
    let mut without_ca = right.clone();
    without_ca.tls_ca_file = None;
    let text = refused(without_ca).await;
    assert!(text.contains("certificate"), "{text}");

    // Nor with another CA.
    let other_dir = tempfile::tempdir().expect("temp dir");
    let other = TestCertificates::generate(other_dir.path(), &[]);
    let mut other_ca = right.clone();
    other_ca.tls_ca_file = Some(other.ca_cert.clone());
    let text = refused(other_ca).await;
    assert!(text.contains("certificate"), "{text}");

    // The right CA does not replace the token.
    let mut no_token = right.clone();
    no_token.token = None;
    let text = refused(no_token).await;
    assert!(text.contains("authorization violation"), "{text}");
}

#[tokio::test]
async fn nats_tls_required_refuses_a_plain_server() {
    let server = NatsServer::start();
    let mut plain = config(&server.url());
    round_trip(&plain, "auth-b5").await;

    // The client starts a TLS handshake the plain server cannot answer. The error is rustls's
    // ("received corrupt message"), which does not say that TLS was required: only failing is
    // asserted here.
    plain.tls_required = true;
    refused(plain).await;
}

fn s3_config(server: &S3Server) -> S3Config {
    let mut config = S3Config::new(
        "cowork-tls",
        server.access_key.clone(),
        Secret::new(server.secret_key.clone()),
    );
    config.endpoint = Some(server.endpoint());
    config.create_bucket = true;
    config.connect_timeout = Duration::from_secs(5);
    config.operation_timeout = Duration::from_secs(20);
    config
}

#[tokio::test]
async fn s3_over_tls_works_with_the_ca_file_only() {
    let server = S3Server::start_with(S3Options {
        tls: true,
        ..S3Options::default()
    });
    assert!(
        server.endpoint().starts_with("https://"),
        "{}",
        server.endpoint()
    );
    let ca = server.ca_path().expect("a generated CA");

    let mut trusted = s3_config(&server);
    trusted.ca_file = Some(ca);
    let store = S3ArtifactStore::connect(&trusted)
        .await
        .unwrap_or_else(|e| panic!("connecting over tls with the ca_file: {e}"));
    let key = "batches/tls/result.json";
    store
        .put(key, br#"{"verdict":"pass"}"#.to_vec())
        .await
        .expect("put over tls");
    assert_eq!(
        store.get(key).await.expect("get over tls"),
        br#"{"verdict":"pass"}"#
    );
    let on_disk = server.data_dir().join("cowork-tls").join(key);
    assert!(on_disk.is_file(), "{} was not stored", on_disk.display());

    // Without the CA (the system's roots lack it) the server is not trusted.
    let untrusted = s3_config(&server);
    let error: ArtifactError = match S3ArtifactStore::connect(&untrusted).await {
        Ok(_) => panic!("connecting over tls without the ca_file must fail"),
        Err(error) => error,
    };
    let text = format!("{error} | {error:?}");
    assert!(text.contains("invalid peer certificate"), "{text}");
    assert!(!text.contains(&server.secret_key), "{text}");
    // Recognized by its type as a TLS failure: permanent (no retry can fix it), with the fix.
    assert!(!error.is_transient(), "{text}");
    assert!(text.contains("--s3-ca-file"), "{text}");

    // Nor with another CA.
    let other_dir = tempfile::tempdir().expect("temp dir");
    let other = TestCertificates::generate(other_dir.path(), &[]);
    let mut wrong_ca = s3_config(&server);
    wrong_ca.ca_file = Some(other.ca_cert.clone());
    let error = match S3ArtifactStore::connect(&wrong_ca).await {
        Ok(_) => panic!("connecting over tls with another CA must fail"),
        Err(error) => error,
    };
    let text = format!("{error} | {error:?}");
    assert!(text.contains("invalid peer certificate"), "{text}");
    assert!(!text.contains(&server.secret_key), "{text}");
}

#[tokio::test]
async fn nats_creds_file_is_required_and_checked() {
    let server = NatsServer::start_with(NatsOptions {
        creds: true,
        ..NatsOptions::default()
    });
    let creds = server.creds_path().expect("a generated creds file");
    let mut right = config(&server.url());
    right.creds_file = Some(creds.clone());
    round_trip(&right, "auth-b6").await;

    let text = refused(config(&server.url())).await;
    assert!(text.contains("authorization violation"), "{text}");

    // A user signed by an account the server does not know is refused too.
    let stranger = NatsServer::start_with(NatsOptions {
        creds: true,
        ..NatsOptions::default()
    });
    let mut foreign = config(&server.url());
    foreign.creds_file = stranger.creds_path();
    let text = refused(foreign).await;
    assert!(text.contains("authorization violation"), "{text}");
    // Nothing of the creds file's secret part (the user's NKey seed) shows in the error.
    let creds_text = std::fs::read_to_string(&creds).expect("reading the creds file");
    let seed = creds_text
        .lines()
        .find(|line| line.starts_with("SU"))
        .expect("the creds file holds a user seed");
    assert!(!text.contains(seed), "{text}");

    // A missing creds file is named.
    let mut missing = config(&server.url());
    missing.creds_file = Some(creds.with_file_name("nowhere.creds"));
    let text = refused(missing).await;
    assert!(text.contains("nowhere.creds"), "{text}");
}
