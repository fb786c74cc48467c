use super::*;
use crate::trend::UnitCounts;

fn batch(id: &str) -> BatchId {
    BatchId::new(id).expect("a valid batch id")
}

fn unit(label: &str, passes: u32, runs: u32) -> UnitCounts {
    UnitCounts {
        label: label.to_owned(),
        scenario: label.to_owned(),
        axes: None,
        runs,
        passes,
        cost_usd: 0.0,
        priced_runs: 0,
    }
}

fn counts(id: &str, units: Vec<UnitCounts>) -> BatchCounts {
    BatchCounts {
        batch_id: batch(id),
        min_pass_rate: 1.0,
        units,
    }
}

#[test]
fn hmac_matches_the_rfc_4231_vectors() {
    let short = hmac_sha256(&[0x0b; 20], b"Hi There");
    assert_eq!(
        hex(&short),
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    );
    let long_key = hmac_sha256(
        &[0xaa; 131],
        b"Test Using Larger Than Block-Size Key - Hash Key First",
    );
    assert_eq!(
        hex(&long_key),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
}

#[test]
fn the_signature_is_hmac_of_timestamp_dot_body() {
    // Python: hmac.new(b"whsec_test", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert_eq!(
        signature_header(b"whsec_test", 1_700_000_000, br#"{"a":1}"#),
        "t=1700000000,v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
    );
}

#[test]
fn a_decided_batch_names_its_failing_and_newly_failing_units() {
    let then = counts(
        "20260101-000000-aaaa",
        vec![unit("a", 2, 2), unit("b", 0, 2), unit("c", 2, 2)],
    );
    let now = counts(
        "20260102-000000-bbbb",
        vec![
            unit("a", 1, 2),
            unit("b", 0, 2),
            unit("c", 2, 2),
            unit("d", 0, 0),
        ],
    );
    let verdict = Verdict {
        verdict: "FAIL".to_owned(),
        exit_code: 1,
        cost_usd: 4.2,
    };
    let decided = Decided::from_counts(&now, Some(&then), verdict, Vec::new());
    assert_eq!(decided.failing, ["a", "b", "d"]);
    assert_eq!(decided.newly_failing, ["a"]);
    let event = NotifyEvent::Decided(Box::new(decided));
    let body = body(&event, 1_700_000_000, Some("https://c.example/r"));
    assert_eq!(
        body.text,
        "cowork: batch 20260102-000000-bbbb FAIL — 3 of 4 units failing (a, b, d), $4.20 — \
         https://c.example/r\nnewly failing: a"
    );
    assert_eq!(body.quarantined, Some(Vec::new()));
    let json = serde_json::to_value(&body).expect("a body serializes");
    assert_eq!(json["kind"], "decided");
    assert_eq!(json["id"], event_id(&event));
    assert_eq!(json["costUsd"], 4.2);
    assert!(json.get("reason").is_none(), "{json}");
}

#[test]
fn the_event_id_is_stable_and_tells_moments_apart() {
    let stalled = |reason: &str| NotifyEvent::Stalled {
        batch_id: batch("20260102-000000-bbbb"),
        reason: reason.to_owned(),
    };
    assert_eq!(event_id(&stalled("x")), event_id(&stalled("x")));
    assert_ne!(event_id(&stalled("x")), event_id(&stalled("y")));
    let cancelled = NotifyEvent::Cancelled {
        batch_id: batch("20260102-000000-bbbb"),
        cost_usd: 0.0,
    };
    assert_ne!(event_id(&stalled("x")), event_id(&cancelled));
    assert!(event_id(&cancelled).starts_with("evt_"));
}

#[test]
fn outside_text_cannot_make_a_slack_link() {
    let event = NotifyEvent::Stalled {
        batch_id: batch("20260102-000000-bbbb"),
        reason: "<https://evil|click> & \u{1b}[2J".to_owned(),
    };
    let text = text(&event, None);
    assert!(!text.contains('<') && !text.contains('\u{1b}'), "{text}");
    assert!(text.contains("&lt;https://evil|click&gt; &amp;"), "{text}");
}

#[test]
fn a_takeover_names_both_coordinators_and_each_takeover_is_its_own_event() {
    let taken = |leader: &str, revision: u64| NotifyEvent::TakenOver {
        batch_id: batch("b1"),
        leader: leader.to_owned(),
        previous: "alpha".to_owned(),
        revision,
    };
    let body = body(&taken("beta", 7), 1_700_000_000, None);
    assert_eq!(body.kind.as_str(), "taken_over");
    assert_eq!(
        body.reason.as_deref(),
        Some("coordinator beta took over from alpha")
    );
    assert_eq!(
        body.text,
        "cowork: batch b1 resumed by coordinator beta, which took over from alpha — nothing is lost or run twice"
    );
    // Told again (a retry): the same id; a later takeover: another.
    assert_eq!(event_id(&taken("beta", 7)), event_id(&taken("beta", 7)));
    assert_ne!(event_id(&taken("beta", 7)), event_id(&taken("beta", 9)));
}
