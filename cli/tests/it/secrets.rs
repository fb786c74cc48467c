//! The canary secret: a random `ANTHROPIC_API_KEY` is set in the environment
//! of every fleet process and of `cowork submit`, a harness batch runs on the fleet, and the
//! canary must then reach the harness (the strict double passes only if the sha256 of its
//! `ANTHROPIC_API_KEY` matches the digest written into the scenario) and nothing else: no log
//! line, no event, no stored message, no S3 object, no bundle entry, no file in a worker's work
//! or cache dir, and not the submit's output.
//!
//! Every byte on disk is searched, not just the places we expect: the fleet's dir (process
//! logs, worker work and cache dirs, the coordinator's scratch), nats-server's dir (its log,
//! written with tracing on so every protocol message and payload is in it, and its JetStream
//! store), and s3s-fs's dir (its log and every object). zstd data, wherever it is, is
//! decompressed and searched too, and so are the entries of any tar archive inside it.

use std::io::Read;
use std::path::{Path, PathBuf};

use cowork_fabric::nats::NatsConfig;
use cowork_testkit::{NatsOptions, NatsServer, S3Server};

use crate::fleet::{Fleet, batch_of};
use crate::support::{Sandbox, strict_harness};

/// Scenarios in the batch, each run this many times.
const N_SCENARIOS: usize = 2;
const REPEAT: usize = 2;

/// A fresh random canary shaped like an Anthropic API key.
fn random_canary() -> String {
    let mut bytes = [0u8; 20];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .expect("reading /dev/urandom");
    format!("sk-ant-canary-{}", hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const STANDARD_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 of `bytes` without padding.
fn base64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let block = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let bits = (u32::from(block[0]) << 16) | (u32::from(block[1]) << 8) | u32::from(block[2]);
        let n_chars = chunk.len() + 1;
        for index in 0..n_chars {
            let sextet = (bits >> (18 - 6 * index)) & 0x3f;
            text.push(char::from(alphabet[sextet as usize]));
        }
    }
    text
}

/// The byte strings that betray the canary: itself, its hex, and its base64 (standard and
/// URL-safe) at each of the three alignments it can have inside a longer base64 text — only
/// the characters that depend on the canary's bytes alone, so surrounding bytes do not matter.
fn canary_forms(canary: &str) -> Vec<(String, Vec<u8>)> {
    let mut forms = vec![
        ("plain".to_owned(), canary.as_bytes().to_vec()),
        ("hex".to_owned(), hex(canary.as_bytes()).into_bytes()),
    ];
    for (name, alphabet) in [
        ("base64", STANDARD_ALPHABET),
        ("base64url", URL_SAFE_ALPHABET),
    ] {
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(canary.as_bytes());
            let encoded = base64(&shifted, alphabet);
            // Character i covers bits 6i..6i+6; keep those inside the canary's bits.
            let first = (8 * offset).div_ceil(6);
            let end = (8 * shifted.len()) / 6;
            forms.push((
                format!("{name} at offset {offset}"),
                encoded.as_bytes()[first..end].to_vec(),
            ));
        }
    }
    forms
}

/// Searches bytes, files and trees for every form of the canary, counting what it looked at so
/// the test can tell an empty search from a clean one.
struct Scanner {
    forms: Vec<(String, Vec<u8>)>,
    hits: Vec<String>,
    n_files: usize,
    n_archives: usize,
    n_tar_entries: usize,
}

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

impl Scanner {
    fn new(canary: &str) -> Scanner {
        Scanner {
            forms: canary_forms(canary),
            hits: Vec::new(),
            n_files: 0,
            n_archives: 0,
            n_tar_entries: 0,
        }
    }

    /// Searches `bytes` (found at `place`); zstd data is also decompressed and searched, and a
    /// tar archive's entries one by one.
    fn scan_bytes(&mut self, place: &str, bytes: &[u8]) {
        for (form, needle) in &self.forms {
            if bytes.windows(needle.len()).any(|window| window == needle) {
                self.hits.push(format!("{place} ({form})"));
            }
        }
        if bytes.starts_with(&ZSTD_MAGIC) {
            match zstd::stream::decode_all(bytes) {
                Ok(plain) => {
                    self.n_archives += 1;
                    self.scan_bytes(&format!("{place} (zstd)"), &plain);
                }
                Err(error) => self.hits.push(format!(
                    "{place}: zstd data that does not decompress ({error}), so it cannot be searched"
                )),
            }
        } else if is_tar(bytes) {
            let mut archive = tar::Archive::new(bytes);
            let entries = match archive.entries() {
                Ok(entries) => entries,
                Err(error) => {
                    self.hits
                        .push(format!("{place}: unreadable tar archive ({error})"));
                    return;
                }
            };
            for entry in entries {
                let mut entry = match entry {
                    Ok(entry) => entry,
                    Err(error) => {
                        self.hits
                            .push(format!("{place}: unreadable tar entry ({error})"));
                        return;
                    }
                };
                let name = entry
                    .path()
                    .map(|path| path.display().to_string())
                    .unwrap_or_else(|_| "<bad name>".to_owned());
                let mut content = Vec::new();
                if let Err(error) = entry.read_to_end(&mut content) {
                    self.hits
                        .push(format!("{place}!{name}: unreadable ({error})"));
                    continue;
                }
                self.n_tar_entries += 1;
                self.scan_bytes(&format!("{place}!{name}"), &content);
            }
        }
    }

    /// Searches every regular file under `root` (symlinks are not followed).
    fn scan_tree(&mut self, root: &Path) {
        let mut stack = vec![root.to_path_buf()];
        while let Some(path) = stack.pop() {
            let Ok(metadata) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if metadata.is_dir() {
                let entries = std::fs::read_dir(&path)
                    .unwrap_or_else(|e| panic!("listing {}: {e}", path.display()));
                stack.extend(entries.flatten().map(|entry| entry.path()));
            } else if metadata.is_file() {
                // A file may vanish between listing and reading (a log rotated, a temp file
                // renamed); everything that stays is read.
                if let Ok(bytes) = std::fs::read(&path) {
                    self.n_files += 1;
                    self.scan_bytes(&path.display().to_string(), &bytes);
                }
            }
        }
    }
}

/// A POSIX tar archive has `ustar` at offset 257 of its first header.
fn is_tar(bytes: &[u8]) -> bool {
    bytes.len() >= 512 && &bytes[257..262] == b"ustar"
}

/// The scanner finds the canary in each form it knows, also inside a zstd-compressed tar entry,
/// and finds nothing in bytes without it: the fleet test's "zero hits" means something.
#[test]
fn the_scanner_finds_every_form_of_the_canary() {
    let canary = random_canary();
    let other = random_canary();
    let mut clean = Scanner::new(&canary);
    clean.scan_bytes("other", format!("key={other}").as_bytes());
    clean.scan_bytes(
        "digest",
        cowork_fabric::sha256_hex(canary.as_bytes()).as_bytes(),
    );
    assert!(clean.hits.is_empty(), "{:?}", clean.hits);

    for prefix in ["", "x", "xy", "xyz"] {
        let payload = format!("{prefix}{canary}");
        for (encoding, encoded) in [
            ("standard", base64(payload.as_bytes(), STANDARD_ALPHABET)),
            ("url-safe", base64(payload.as_bytes(), URL_SAFE_ALPHABET)),
            ("hex", hex(payload.as_bytes())),
        ] {
            let mut scanner = Scanner::new(&canary);
            scanner.scan_bytes(encoding, encoded.as_bytes());
            assert!(
                !scanner.hits.is_empty(),
                "{encoding} after prefix {prefix:?} was not found"
            );
        }
    }

    let mut tar_bytes = Vec::new();
    {
        let mut builder = tar::Builder::new(&mut tar_bytes);
        let content = format!("ANTHROPIC_API_KEY={canary}\n");
        let mut header = tar::Header::new_ustar();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, "scenarios/.env", content.as_bytes())
            .expect("appending a tar entry");
        builder.finish().expect("finishing the tar");
    }
    let compressed = zstd::stream::encode_all(tar_bytes.as_slice(), 3).expect("compressing");
    let mut scanner = Scanner::new(&canary);
    scanner.scan_bytes("bundle.tar.zst", &compressed);
    assert_eq!(scanner.n_archives, 1);
    assert_eq!(scanner.n_tar_entries, 1);
    assert!(
        scanner
            .hits
            .iter()
            .any(|hit| hit.contains("bundle.tar.zst (zstd)!scenarios/.env")),
        "{:?}",
        scanner.hits
    );
}

/// `scenarios/s<i>.yaml`: the strict double's `secret` behaviour, expecting `digest`.
fn write_scenarios(sandbox: &Sandbox, digest: &str) {
    for index in 0..N_SCENARIOS {
        sandbox.write(
            &format!("scenarios/s{index}.yaml"),
            &format!(
                "# strict-harness: secret\n\
                 # strict-harness-secret-sha256: {digest}\n\
                 # The strict double passes only if the sha256 of its ANTHROPIC_API_KEY is the\n\
                 # digest above; the secret itself is never written anywhere.\n\
                 session: (inline)\n\
                 prompt: Say hello {index}.\n\
                 assert:\n  - result: success\n"
            ),
        );
    }
}

/// Every stored event message of `batch`, raw, as (subject, headers and payload text).
async fn raw_events(nats_url: &str, batch: &str) -> Vec<(String, Vec<u8>)> {
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(nats_url))
        .await
        .expect("connecting to nats");
    let mut stream = fabric
        .jetstream
        .get_stream(NatsConfig::new(nats_url).events_stream)
        .await
        .expect("the events stream");
    let last = stream
        .info()
        .await
        .expect("events stream info")
        .state
        .last_sequence;
    let subject = cowork_fabric::nats::events_subject(
        &cowork_schema::BatchId::new(batch).expect("a valid batch id"),
    );
    let mut events = Vec::new();
    for sequence in 1..=last {
        let message = stream
            .get_raw_message(sequence)
            .await
            .unwrap_or_else(|e| panic!("reading event message {sequence}: {e}"));
        if message.subject.as_str() != subject {
            continue;
        }
        let mut bytes = format!("{:?}\n", message.headers).into_bytes();
        bytes.extend_from_slice(&message.payload);
        events.push((format!("event #{sequence} on {}", message.subject), bytes));
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_secret_reaches_the_harness_and_nothing_else() {
    let canary = random_canary();
    let digest = cowork_fabric::sha256_hex(canary.as_bytes());
    // Tracing (-V) puts every protocol line and payload into the nats-server log, so anything
    // sent over NATS, stored or not, is searched.
    let nats = NatsServer::start_with(NatsOptions {
        extra_args: vec!["-V".to_owned()],
        ..NatsOptions::default()
    });
    let s3 = S3Server::start();
    // Every process gets the canary (a user's laptop and every fleet machine have it set), and
    // debug logging, so that log lines are plentiful.
    let mut fleet = Fleet::with_servers(
        nats,
        s3,
        &[("ANTHROPIC_API_KEY", &canary), ("COWORK_LOG", "debug")],
    );
    let harness = strict_harness();
    let harness = harness.to_str().expect("a UTF-8 path to the strict double");
    fleet.spawn(
        "w1",
        &[
            "worker",
            "--executor",
            "harness",
            "--harness-bin",
            harness,
            "--tiers",
            "container",
            "--slots",
            "2",
            "--worker-id",
            "w1",
            "--cache-dir",
            "w1/cache",
            "--work-dir",
            "w1/work",
            // Kept so that the harness's run dirs are searched too.
            "--keep-work",
        ],
    );

    let sandbox = Sandbox::empty();
    write_scenarios(&sandbox, &digest);
    let repeat = REPEAT.to_string();
    let out = fleet.submit(
        sandbox.path(),
        &["scenarios", "--repeat", &repeat, "--executor", "harness"],
    );
    let envelope = out.envelope();
    let n_jobs = N_SCENARIOS * REPEAT;
    // Every job passed, so the canary did reach the harness (else it exits 2, a usage error).
    assert_eq!(
        (out.code(), &envelope["ok"]),
        (0, &serde_json::Value::Bool(true)),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    let results = envelope["results"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    assert_eq!(results.len(), n_jobs, "{}", out.context());
    for result in results {
        // `doubleCopy: disk` marks the strict double's own result: the harness really ran.
        assert_eq!(result["doubleCopy"], "disk", "{result}");
        assert_eq!(result["verdict"]["pass"], true, "{result}");
    }
    let batch = batch_of(&envelope);

    let mut scanner = Scanner::new(&canary);
    scanner.scan_bytes("submit stdout", out.stdout.as_bytes());
    scanner.scan_bytes("submit stderr", out.stderr.as_bytes());

    let events = raw_events(&fleet.nats.url(), batch.as_str()).await;
    assert!(
        events.len() >= n_jobs,
        "{} events for {n_jobs} jobs",
        events.len()
    );
    for (place, bytes) in &events {
        scanner.scan_bytes(place, bytes);
    }

    // Stop every process first, so that all logs are complete and no file changes under the
    // scan.
    let names: Vec<String> = fleet
        .children
        .iter()
        .map(|(name, _)| name.clone())
        .collect();
    for name in names {
        fleet.kill(&name);
    }
    fleet.nats.kill();
    fleet.s3.kill();

    let fleet_dir = fleet.dir.path().to_path_buf();
    let nats_dir = parent_of(&fleet.nats.log_path());
    let s3_dir = parent_of(&fleet.s3.log_path());
    for root in [
        &fleet_dir,
        &nats_dir,
        &s3_dir,
        &sandbox.path().to_path_buf(),
    ] {
        scanner.scan_tree(root);
    }

    // The search covered what it claims to: the logs, the harness's run dirs, the bundle (a
    // tar.zst with the scenarios) and every job's result object.
    let coordinator_log = fleet.log("coordinator");
    assert!(
        coordinator_log.lines().count() > 5 && fleet.log("w1").lines().count() > 5,
        "debug logging is on, so the logs have lines\n{}",
        fleet.logs()
    );
    let nats_log = std::fs::read_to_string(fleet.nats.log_path()).expect("the nats-server log");
    assert!(
        nats_log.contains("cowork.events."),
        "the nats-server log traces the event messages"
    );
    assert!(
        fleet_dir.join("w1/work").is_dir(),
        "the worker kept its work dir"
    );
    assert!(
        scanner.n_archives >= 1,
        "no zstd data (the bundle) was searched"
    );
    assert!(
        scanner.n_tar_entries >= N_SCENARIOS,
        "the bundle's scenarios were searched: {} tar entries",
        scanner.n_tar_entries
    );
    let n_results = fleet
        .object_keys()
        .iter()
        .filter(|key| key.ends_with("/result.json"))
        .count();
    assert!(
        n_results >= n_jobs,
        "{n_results} result objects for {n_jobs} jobs"
    );

    assert!(
        scanner.hits.is_empty(),
        "the canary secret leaked ({} files, {} archives, {} tar entries searched):\n{}",
        scanner.n_files,
        scanner.n_archives,
        scanner.n_tar_entries,
        scanner.hits.join("\n")
    );
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent()
        .unwrap_or_else(|| panic!("{} has a parent dir", path.display()))
        .to_path_buf()
}
