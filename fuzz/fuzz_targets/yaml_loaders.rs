//! Fuzzes the strict loaders of every user-written input file.
//!
//! The first byte selects the loader (taken modulo [`N_LOADERS`], so the ASCII digits `0`–`5`
//! of the seed files select loaders 0–5); the rest is the document text, which must be UTF-8
//! because `load::read_text` refuses anything else before a loader sees it.
//!
//! | selector | loader |
//! | --- | --- |
//! | 0 | `Scenario::from_yaml` |
//! | 1 | `Session::from_yaml` |
//! | 2 | `MatrixFile::from_yaml` |
//! | 3 | `load::parse_strict::<SimProfile>` (`--sim-profile`) |
//! | 4 | `serde_json::from_str::<BatchSpec>` (the submit API's `spec` part) |
//! | 5 | `load::yaml_to_json` then `Scenario::from_frozen` (a cassette's frozen scenario) |
//!
//! Errors are expected and fine. The target fails on a panic, a hang (libFuzzer's `-timeout`),
//! an allocation over `-rss_limit_mb`, and on these invariants:
//! - every error renders, and names the file it was given;
//! - a scenario that loads from YAML also loads from its own `raw` JSON as a frozen scenario,
//!   to the same typed fields (what `record` freezes, `replay` must read back);
//! - a batch spec that parses survives a JSON round trip unchanged.

#![no_main]

use std::path::Path;

use cowork_schema::batch::{BatchSpec, SimProfile};
use cowork_schema::load::{self, LoadError};
use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::Scenario;
use cowork_schema::session::Session;
use libfuzzer_sys::fuzz_target;

/// How many loaders the selector byte chooses from.
const N_LOADERS: u8 = 6;

/// The file name every loader is told it is reading; each error must name it.
const FILE_NAME: &str = "fuzz/input.yaml";

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let file = Path::new(FILE_NAME);
    match selector % N_LOADERS {
        0 => match Scenario::from_yaml(text, file) {
            Ok(scenario) => check_scenario(&scenario, file),
            Err(errors) => check_errors(&errors),
        },
        1 => match Session::from_yaml(text, file) {
            Ok(session) => {
                // Batch preparation resolves every path the session names.
                let _ = session.path_fields();
            }
            Err(errors) => check_errors(&errors),
        },
        2 => match MatrixFile::from_yaml(text, file) {
            Ok(_) => {}
            Err(errors) => check_errors(&errors),
        },
        3 => match load::parse_strict::<SimProfile>(text, file) {
            Ok(_) => {}
            Err(error) => check_errors(std::slice::from_ref(&error)),
        },
        4 => {
            if let Ok(spec) = serde_json::from_str::<BatchSpec>(text) {
                let json = serde_json::to_string(&spec).expect("a parsed batch spec serializes");
                let again: BatchSpec =
                    serde_json::from_str(&json).expect("a serialized batch spec parses again");
                assert_eq!(again, spec, "batch spec changed in a JSON round trip");
            }
        }
        _ => match load::yaml_to_json(text, file) {
            Ok(value) => match Scenario::from_frozen(&value, file) {
                Ok(scenario) => {
                    let _ = scenario.input_paths();
                }
                Err(errors) => check_errors(&errors),
            },
            Err(error) => check_errors(std::slice::from_ref(&error)),
        },
    }
});

/// Every error renders and names the file it was reported for.
fn check_errors(errors: &[LoadError]) {
    assert!(!errors.is_empty(), "a loader failed without saying why");
    for error in errors {
        let rendered = error.to_string();
        assert!(
            rendered.starts_with(FILE_NAME),
            "error does not start with the file name: {rendered:?}"
        );
    }
}

/// Uses a loaded scenario the way batch planning does, then checks that its frozen form (the
/// `raw` JSON that `record` stores in a cassette) loads back to the same scenario.
fn check_scenario(scenario: &Scenario, file: &Path) {
    let _ = scenario.effective_name(file);
    let _ = scenario.session_ref();
    let _ = scenario.input_paths();
    let frozen = match Scenario::from_frozen(&scenario.raw, file) {
        Ok(frozen) => frozen,
        Err(errors) => panic!(
            "a scenario that loads from YAML does not load frozen: {}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    // Positions exist only for YAML text, so compare everything but `locations`.
    let strip = |s: &Scenario| Scenario {
        locations: Default::default(),
        ..s.clone()
    };
    assert_eq!(
        strip(&frozen),
        strip(scenario),
        "frozen scenario differs from the loaded one"
    );
}
