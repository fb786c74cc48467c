//! Bearer auth on `/v1/*`: a missing or wrong token is refused before anything is read or
//! stored; the probes stay open; a server without tokens refuses to start.

use cowork_client::CoordinatorClient;
use cowork_coordinator::server::{ServerError, run};
use tokio_util::sync::CancellationToken;

use crate::support::{Fleet, Server, kind, packed, project, repeat};

#[tokio::test]
async fn requests_without_the_right_token_are_refused_and_store_nothing() {
    let fleet = Fleet::new();
    let server = Server::start(fleet.config("c1", 8), fleet.ports()).await;
    let dir = project();
    let batch = packed(dir.path(), repeat(3));
    for token in [None, Some("wrong-token".to_owned()), Some(String::new())] {
        let client = CoordinatorClient::new(&server.url, token.clone()).expect("a valid url");
        let error = client
            .submit(&batch.spec, batch.bundle.clone())
            .await
            .expect_err("the submit is refused");
        assert_eq!(kind(&error), "unauthorized", "{token:?}: {error}");
        let error = client.list().await.expect_err("the list is refused");
        assert_eq!(kind(&error), "unauthorized", "{token:?}: {error}");
    }
    assert!(
        fleet.stored_files().is_empty(),
        "{:#?}",
        fleet.stored_files()
    );

    let http = reqwest::Client::new();
    for path in [
        "/v1/batches",
        "/v1/workers",
        "/v1/batches/b1",
        "/v1/batches/b1/events",
    ] {
        let response = http
            .get(format!("{}{path}", server.url))
            .bearer_auth("nope")
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 401, "{path}");
        assert_eq!(
            response
                .headers()
                .get("www-authenticate")
                .and_then(|value| value.to_str().ok()),
            Some("Bearer"),
            "{path}"
        );
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = http
            .get(format!("{}{path}", server.url))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200, "{path} is open");
    }
    // The right token passes.
    assert!(server.client().list().await.expect("list").is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_server_without_tokens_refuses_to_start_unless_allowed() {
    let fleet = Fleet::new();
    let mut config = fleet.config("c1", 8);
    config.api_tokens.clear();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let refused = run(
        config.clone(),
        fleet.ports(),
        listener,
        CancellationToken::new(),
    )
    .await;
    assert!(
        matches!(refused, Err(ServerError::NoApiTokens)),
        "{refused:?}"
    );

    config.allow_unauthenticated = true;
    let server = Server::start(config, fleet.ports()).await;
    let anonymous = CoordinatorClient::new(&server.url, None).expect("a valid url");
    assert!(anonymous.list().await.expect("open access").is_empty());
    server.stop().await;
}
