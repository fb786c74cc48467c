//! Hostile input: each case feeds one malicious or broken input and checks
//! three things — the input is refused as a usage error (`cowork run` exits 2; the coordinator
//! answers 400, 413 or 401), the message names the file and the field, key or bundle entry, and
//! nothing was dispatched or written.
//!
//! CLI cases break one thing in a copy of the fixture project and run `cowork run --executor
//! sim` on it; "nothing written" means the `--store` directory holds no batch. They complement
//! `bad_input` with nastier inputs of the same kinds (bombs, symlinks, special files, non-UTF-8
//! names, numbers that overflow).
//!
//! Fleet cases talk to a real coordinator (real nats-server and S3 server) over HTTP with the
//! multipart form `cowork submit` sends, because a hostile archive never comes from our own
//! packer. "Nothing written" there means: no `batches/` or `bundles/` object in the bucket, no
//! message in the events or jobs stream, `GET /v1/batches` lists nothing, and the coordinator's
//! scratch directory is empty. Each fleet test ends, where it can, with a valid submit through
//! the same helper, so a refusal cannot come from a malformed request and the "nothing stored"
//! check is shown to see what a stored batch leaves.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cowork_fabric::nats::NatsConfig;
use cowork_schema::api::ApiError;
use cowork_schema::batch::{BatchFlags, BatchSpec, SimSpec};
use cowork_schema::event::JobEventKind;
use cowork_testkit::batch_spec;
use serde_json::Value;

use crate::fleet::{Fleet, TOKEN, batch_of};
use crate::support::{Output, Sandbox, fixture};

/// The project's scenario: `session` is on line 4, `prompt` on 5, `assert` on 6.
pub(crate) const SCENARIO: &str = "scenarios/report.yaml";
/// The project's session: `uploads[0]` is on line 3, `plugins.local_plugins[0]` on line 6.
const SESSION: &str = "sessions/report.yaml";
/// A plain repeat batch of the project's scenario.
const REPEAT: &[&str] = &[SCENARIO, "--repeat", "2"];

// ---------------------------------------------------------------------------------------------
// CLI helpers
// ---------------------------------------------------------------------------------------------

/// Runs `cowork run <args> --executor sim` in `sandbox` and checks the refusal: exit 2, every
/// fragment of `expect` on stderr, nothing on stdout, and no batch in the store.
fn refused<S: AsRef<OsStr>>(sandbox: &Sandbox, args: &[S], expect: &[&str]) -> Output {
    let mut all: Vec<OsString> = args.iter().map(|arg| arg.as_ref().to_owned()).collect();
    all.extend(["--executor".into(), "sim".into()]);
    let out = sandbox.run_batch(&all);
    out.expect_code(2);
    for fragment in expect {
        out.expect_stderr(fragment);
    }
    if !out.stdout.is_empty() {
        out.fail("a refused batch printed on stdout");
    }
    expect_no_batches(&sandbox.store(), &out);
    out
}

/// Panics unless `store` is absent or holds no batch directory.
fn expect_no_batches(store: &Path, out: &Output) {
    let batches = store.join("batches");
    if !batches.exists() {
        return;
    }
    let listing = std::fs::read_dir(&batches)
        .unwrap_or_else(|e| panic!("listing {}: {e}", batches.display()));
    let names: Vec<PathBuf> = listing
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    if !names.is_empty() {
        out.fail(&format!("a refused batch wrote {names:?}"));
    }
}

/// Replaces `rel` in the sandbox (a file or a directory) with a symlink to `target`.
fn symlink_over(sandbox: &Sandbox, rel: &str, target: &Path) {
    let link = sandbox.path().join(rel);
    if link.symlink_metadata().is_ok() {
        sandbox.remove(rel);
    }
    std::os::unix::fs::symlink(target, &link)
        .unwrap_or_else(|e| panic!("linking {} to {}: {e}", link.display(), target.display()));
}

/// A path of the sandbox whose last component is the raw bytes `name` (not UTF-8).
fn raw_name(sandbox: &Sandbox, dir: &str, name: &[u8]) -> PathBuf {
    sandbox.path().join(dir).join(OsStr::from_bytes(name))
}

/// A YAML "billion laughs": nine levels of ten aliases each expand to 10^9 strings.
fn alias_bomb(key: &str) -> String {
    let mut text = format!("{key}:\n  - &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..=9 {
        let previous = format!("*l{}", level - 1);
        let row = [previous.as_str(); 10].join(", ");
        text.push_str(&format!("  - &l{level} [{row}]\n"));
    }
    text
}

// ---------------------------------------------------------------------------------------------
// CLI cases: malformed YAML and resource bombs
// ---------------------------------------------------------------------------------------------

#[test]
fn yaml_alias_bomb_is_refused_before_it_expands() {
    let sandbox = Sandbox::with_project();
    // The bomb sits under a known key, so only the alias budget can stop it.
    let scenario = format!(
        "baseline: latest\nsession: ../sessions/report.yaml\nprompt: Hello.\n{}",
        alias_bomb("assert")
    );
    sandbox.write(SCENARIO, &scenario);
    refused(&sandbox, REPEAT, &["scenarios/report.yaml:", "alias"]);
}

#[test]
fn yaml_nesting_bomb_is_refused() {
    let sandbox = Sandbox::with_project();
    let depth = 10_000;
    let scenario = format!(
        "session: ../sessions/report.yaml\nprompt: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    sandbox.write(SCENARIO, &scenario);
    // The parser's own recursion limit stops it, without a stack overflow. The message has the
    // line and column but no key: the document never became a tree to name one in.
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml:2:", "recursion limit"],
    );
}

#[test]
fn yaml_file_over_the_size_limit_is_refused_without_parsing() {
    let sandbox = Sandbox::with_project();
    // A valid session padded with a comment past the 4 MiB document limit.
    let padding = format!("# {}\n", "x".repeat(5 * 1024 * 1024));
    sandbox.append(SESSION, &padding);
    refused(&sandbox, REPEAT, &["sessions/report.yaml", "bytes"]);
}

#[test]
fn yaml_with_a_second_document_is_refused() {
    let sandbox = Sandbox::with_project();
    // A second document could smuggle keys past a reader that only looks at the first.
    sandbox.append(SCENARIO, "---\nprompt: something else\n");
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml:10:", "more than one yaml document"],
    );
}

#[test]
fn yaml_that_is_not_utf8_is_refused() {
    let sandbox = Sandbox::with_project();
    let path = sandbox.path().join(SCENARIO);
    let mut bytes = std::fs::read(&path).expect("reading the scenario");
    // Latin-1 "é" in the prompt.
    bytes.extend_from_slice(b"# caf\xe9\n");
    std::fs::write(&path, bytes).expect("writing the scenario");
    refused(&sandbox, REPEAT, &["scenarios/report.yaml", "UTF-8"]);
}

#[test]
fn duplicate_key_is_refused_naming_the_key() {
    let sandbox = Sandbox::with_project();
    // The second `session` would win in a lenient reader and point outside the project.
    sandbox.append(SCENARIO, "session: /etc/passwd\n");
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml:9:", "session", "duplicate"],
    );
}

// ---------------------------------------------------------------------------------------------
// CLI cases: unknown keys and wrong types
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_key_nested_in_the_session_is_refused() {
    let sandbox = Sandbox::with_project();
    sandbox.replace(SESSION, "local_plugins:", "local_plugin:");
    refused(
        &sandbox,
        REPEAT,
        &[
            "sessions/report.yaml:5:",
            "plugins.local_plugin",
            "local_plugins",
        ],
    );
}

#[test]
fn numbers_that_overflow_or_go_negative_are_refused_naming_the_key() {
    // 2^64 does not fit a u64; a reader that wraps or saturates would accept it.
    let sandbox = Sandbox::with_project();
    sandbox.append(SCENARIO, "timeout_ms: 18446744073709551616\n");
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml:9:", "timeout_ms"],
    );

    let sandbox = Sandbox::with_project();
    sandbox.append(SCENARIO, "timeout_ms: -5\n");
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml:9:", "timeout_ms"],
    );
}

#[test]
fn a_scalar_where_a_list_belongs_is_refused() {
    let sandbox = Sandbox::with_project();
    // A bare string would otherwise be read as a list of its characters, or as one upload.
    sandbox.replace(
        SESSION,
        "uploads:\n  - ../data/sales.csv",
        "uploads: ../data/sales.csv",
    );
    refused(&sandbox, REPEAT, &["sessions/report.yaml:2:", "uploads"]);
}

// ---------------------------------------------------------------------------------------------
// CLI cases: missing files and paths leaving the bundle root
// ---------------------------------------------------------------------------------------------

#[test]
fn upload_behind_a_dangling_symlink_is_missing() {
    let sandbox = Sandbox::with_project();
    symlink_over(&sandbox, "data/sales.csv", Path::new("gone.csv"));
    refused(
        &sandbox,
        REPEAT,
        &["sessions/report.yaml:3:", "uploads[0]", "../data/sales.csv"],
    );
}

#[test]
fn skill_dir_that_is_a_file_is_refused() {
    let sandbox = Sandbox::with_project();
    sandbox.remove("skills/v1/report");
    sandbox.write("skills/v1/report", "not a directory\n");
    refused(
        &sandbox,
        REPEAT,
        &[
            "sessions/report.yaml:6:",
            "plugins.local_plugins[0]",
            "not a directory",
        ],
    );
}

#[test]
fn session_reaching_outside_the_bundle_root_via_dotdot_is_refused() {
    // The file exists, so only the bundle-root check can refuse it; the detour through
    // `sessions/` makes a prefix check on the raw string useless.
    let sandbox = Sandbox::with_project();
    let climb = "../".repeat(32);
    sandbox.replace(
        SCENARIO,
        "session: ../sessions/report.yaml",
        &format!("session: ../sessions/{climb}etc/passwd"),
    );
    refused(
        &sandbox,
        REPEAT,
        &[
            "scenarios/report.yaml:4:",
            "session",
            "outside the bundle root",
        ],
    );
}

#[test]
fn absolute_and_home_paths_are_refused_even_inside_the_root() {
    // The absolute path names the project's own session: it is inside the root, but a worker
    // has another filesystem, so an absolute path can never be shipped.
    let sandbox = Sandbox::with_project();
    let absolute = sandbox.path().join(SESSION);
    sandbox.replace(
        SCENARIO,
        "session: ../sessions/report.yaml",
        &format!("session: {}", absolute.display()),
    );
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml:4:", "session", "absolute path"],
    );

    let sandbox = Sandbox::with_project();
    sandbox.replace(SESSION, "../data/sales.csv", "~/.ssh/id_ed25519");
    refused(
        &sandbox,
        REPEAT,
        &["sessions/report.yaml:3:", "uploads[0]", "~"],
    );
}

// ---------------------------------------------------------------------------------------------
// CLI cases: symlinks, special files and names
// ---------------------------------------------------------------------------------------------

#[test]
fn upload_symlinked_outside_the_root_is_refused() {
    let sandbox = Sandbox::with_project();
    symlink_over(&sandbox, "data/sales.csv", Path::new("/etc/passwd"));
    refused(
        &sandbox,
        REPEAT,
        &[
            "sessions/report.yaml:3:",
            "uploads[0]",
            "symlink",
            "outside the bundle root",
        ],
    );
}

#[test]
fn symlink_inside_a_skill_dir_escaping_the_root_is_refused() {
    let sandbox = Sandbox::with_project();
    let link = sandbox.path().join("skills/v1/report/leak");
    std::os::unix::fs::symlink("/etc", &link).expect("creating the symlink");
    refused(
        &sandbox,
        REPEAT,
        &[
            "sessions/report.yaml:6:",
            "plugins.local_plugins[0]",
            "skills/v1/report/leak",
            "outside the bundle root",
        ],
    );
}

#[test]
fn scenario_symlinked_outside_the_root_is_refused() {
    // A valid scenario outside the project, reached through a symlink inside it.
    let outside = Sandbox::with_project();
    let sandbox = Sandbox::with_project();
    symlink_over(&sandbox, SCENARIO, &outside.path().join(SCENARIO));
    refused(
        &sandbox,
        REPEAT,
        &["scenarios/report.yaml", "outside the bundle root"],
    );
}

#[test]
fn fifo_in_a_skill_dir_is_refused() {
    let sandbox = Sandbox::with_project();
    let fifo = sandbox.path().join("skills/v1/report/pipe");
    // Reading a fifo with no writer blocks forever, so the walk must refuse it unread.
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("running mkfifo");
    assert!(status.success(), "mkfifo {} failed", fifo.display());
    refused(
        &sandbox,
        REPEAT,
        &[
            "sessions/report.yaml:6:",
            "plugins.local_plugins[0]",
            "skills/v1/report/pipe",
            "not a regular file",
        ],
    );
}

#[test]
fn env_file_named_as_an_upload_is_refused() {
    let sandbox = Sandbox::with_project();
    sandbox.write("data/.env", "ANTHROPIC_API_KEY=sk-canary\n");
    sandbox.replace(SESSION, "../data/sales.csv", "../data/.env");
    let out = refused(
        &sandbox,
        REPEAT,
        &["sessions/report.yaml:3:", "uploads[0]", ".env"],
    );
    if out.stderr.contains("sk-canary") {
        out.fail("the refusal printed the secret");
    }
}

#[test]
fn non_utf8_file_name_in_a_skill_dir_is_refused() {
    let sandbox = Sandbox::with_project();
    let path = raw_name(&sandbox, "skills/v1/report", b"notes-\xff\xfe.md");
    std::fs::write(&path, "hello\n").expect("writing the file");
    refused(
        &sandbox,
        REPEAT,
        &[
            "sessions/report.yaml:6:",
            "plugins.local_plugins[0]",
            "skills/v1/report",
            "not UTF-8",
        ],
    );
}

#[test]
fn non_utf8_scenario_file_in_a_target_directory_is_refused() {
    // Skipping the file would silently run a smaller batch than the user asked for.
    let sandbox = Sandbox::with_project();
    let scenario = sandbox.read(SCENARIO);
    std::fs::write(
        raw_name(&sandbox, "scenarios", b"r\xe9sum\xe9.yaml"),
        scenario,
    )
    .expect("writing the scenario");
    refused(
        &sandbox,
        &["scenarios", "--repeat", "2"],
        &["scenarios", "not UTF-8"],
    );
}

#[test]
fn non_utf8_target_path_is_refused() {
    let sandbox = Sandbox::with_project();
    let scenario = sandbox.read(SCENARIO);
    let target = raw_name(&sandbox, "scenarios", b"r\xe9sum\xe9.yaml");
    std::fs::write(&target, scenario).expect("writing the scenario");
    let rel = Path::new("scenarios").join(OsStr::from_bytes(b"r\xe9sum\xe9.yaml"));
    let args: Vec<&OsStr> = vec![rel.as_os_str(), "--repeat".as_ref(), "2".as_ref()];
    refused(&sandbox, &args, &["scenarios/r", "not UTF-8"]);
}

// ---------------------------------------------------------------------------------------------
// CLI cases: flags out of range
// ---------------------------------------------------------------------------------------------

#[test]
fn repeat_values_that_wrap_or_use_other_notations_are_refused() {
    // 4294967298 is 2 after wrapping to 32 bits, and 2^64 + 2 is 2 after wrapping to 64. Other
    // notations such as `1e3` or `0x10` are not hostile: the CLI parses numbers with
    // (harness-behaviour.md#js-number-flags) JavaScript's `Number()`, so they are accepted when in
    // range.
    for value in [
        "4294967298",
        "18446744073709551618",
        "99999999999999999999999",
        "0",
        "-3",
        "1e5",
    ] {
        let sandbox = Sandbox::with_project();
        let flag = format!("--repeat={value}");
        refused(&sandbox, &[SCENARIO, &flag], &["--repeat", value]);
    }
}

#[test]
fn min_pass_rate_nan_and_infinity_are_refused() {
    for value in ["NaN", "nan", "inf", "-inf", "1.0000001", "1e999"] {
        let sandbox = Sandbox::with_project();
        let flag = format!("--min-pass-rate={value}");
        refused(
            &sandbox,
            &[SCENARIO, "--repeat", "2", &flag],
            &["--min-pass-rate", value],
        );
    }
}

#[test]
fn budget_nan_infinity_and_zero_are_refused() {
    // 1e999 parses to infinity: an unlimited budget must be asked for by leaving the flag out.
    for value in ["NaN", "inf", "1e999", "-0", "0.0"] {
        let sandbox = Sandbox::with_project();
        let flag = format!("--max-budget-usd={value}");
        refused(
            &sandbox,
            &[SCENARIO, "--repeat", "2", &flag],
            &["--max-budget-usd", value],
        );
    }
}

#[test]
fn max_cells_out_of_range_is_refused() {
    for value in ["100001", "4294967296", "-1", "1.5"] {
        let sandbox = Sandbox::with_project();
        let flag = format!("--max-cells={value}");
        refused(
            &sandbox,
            &[SCENARIO, "--repeat", "2", "--matrix", "matrix.yaml", &flag],
            &["--max-cells", value],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Fleet helpers
// ---------------------------------------------------------------------------------------------

/// The fixture project's files a plain batch of its scenario needs.
const PROJECT_FILES: [&str; 4] = [
    "data/sales.csv",
    "scenarios/report.yaml",
    "sessions/report.yaml",
    "skills/v1/report/SKILL.md",
];

/// A hand-made `tar.zst`: the project's files, then whatever hostile entries a case adds.
struct Archive {
    builder: tar::Builder<Vec<u8>>,
}

impl Archive {
    /// An archive holding the project's files.
    fn with_project() -> Archive {
        let mut archive = Archive {
            builder: tar::Builder::new(Vec::new()),
        };
        for rel in PROJECT_FILES {
            let contents = std::fs::read(fixture("project").join(rel))
                .unwrap_or_else(|e| panic!("reading fixture {rel}: {e}"));
            archive.entry(rel.as_bytes(), tar::EntryType::Regular, b"", &contents);
        }
        archive
    }

    /// Appends an entry with the raw name and link name `name` and `link` (each under 100
    /// bytes). The header is written field by field because the tar crate's setters refuse the
    /// very paths these cases need (`..`, absolute).
    fn entry(&mut self, name: &[u8], kind: tar::EntryType, link: &[u8], data: &[u8]) {
        self.entry_with_size(name, kind, link, data.len() as u64, data);
    }

    /// Like [`Archive::entry`], with a header size that may lie about `data`.
    fn entry_with_size(
        &mut self,
        name: &[u8],
        kind: tar::EntryType,
        link: &[u8],
        size: u64,
        data: &[u8],
    ) {
        let mut header = tar::Header::new_gnu();
        {
            let gnu = header
                .as_gnu_mut()
                .expect("a header made by new_gnu is gnu");
            gnu.name[..name.len()].copy_from_slice(name);
            gnu.linkname[..link.len()].copy_from_slice(link);
        }
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        if kind.is_character_special() || kind.is_block_special() {
            // 1:3 is /dev/null; 8:0 would be a disk.
            header.set_device_major(1).expect("device numbers fit");
            header.set_device_minor(3).expect("device numbers fit");
        }
        header.set_cksum();
        self.builder
            .append(&header, data)
            .expect("appending to an in-memory archive");
    }

    /// The zstd-compressed archive.
    fn finish(self) -> Vec<u8> {
        let tar = self
            .builder
            .into_inner()
            .expect("finishing an in-memory archive");
        zstd::stream::encode_all(tar.as_slice(), 3).expect("compressing in memory")
    }
}

/// The bundle `cowork submit` would send for the project's scenario, from the real packer.
pub(crate) fn valid_bundle() -> Vec<u8> {
    let files = PROJECT_FILES.iter().map(|rel| (*rel).to_owned()).collect();
    cowork_fabric::bundle::pack(&fixture("project"), &files, &[])
        .expect("packing the fixture project")
        .bytes
}

/// A valid spec of a plain `--repeat 2` batch of the project's scenario over `bundle`.
pub(crate) fn spec_for(bundle: &[u8]) -> BatchSpec {
    batch_spec()
        .target(SCENARIO, SCENARIO)
        .scenario_files([SCENARIO])
        .flags(BatchFlags {
            repeat: Some(2),
            ..BatchFlags::default()
        })
        .sim(SimSpec {
            seed: 7,
            rules: Vec::new(),
        })
        .bundle_sha256(cowork_fabric::sha256_hex(bundle))
        .build()
}

/// What the coordinator answered.
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// The `ApiError`'s line and problems, or the raw body when it is not an `ApiError`.
    pub(crate) text: String,
    pub(crate) problems: Vec<String>,
}

/// A client of the fleet's coordinator API.
pub(crate) struct Api<'a> {
    fleet: &'a Fleet,
    http: reqwest::Client,
}

impl<'a> Api<'a> {
    pub(crate) fn new(fleet: &'a Fleet) -> Api<'a> {
        Api {
            fleet,
            http: reqwest::Client::new(),
        }
    }

    /// `POST /v1/batches` with the parts `cowork submit` sends (see
    /// `CoordinatorClient::submit`): `spec` (JSON) and `bundle` (tar.zst).
    async fn submit_raw(&self, spec: Vec<u8>, bundle: Vec<u8>, token: Option<&str>) -> Answer {
        let spec_part = reqwest::multipart::Part::bytes(spec)
            .file_name("spec.json")
            .mime_str("application/json")
            .expect("a literal mime type parses");
        let bundle_part = reqwest::multipart::Part::bytes(bundle)
            .file_name("bundle.tar.zst")
            .mime_str("application/zstd")
            .expect("a literal mime type parses");
        let form = reqwest::multipart::Form::new()
            .part("spec", spec_part)
            .part("bundle", bundle_part);
        let mut request = self
            .http
            .post(format!("{}/v1/batches", self.fleet.coordinator_url()))
            .multipart(form);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap_or_else(|e| {
            panic!("posting a batch: {e}\n{}", self.fleet.logs());
        });
        let status = response.status().as_u16();
        let body = response.text().await.expect("reading the answer");
        match serde_json::from_str::<ApiError>(&body) {
            Ok(error) => Answer {
                status,
                text: format!("{}: {}", error.error, error.problems.join("; ")),
                problems: error.problems,
            },
            Err(_) => Answer {
                status,
                text: body,
                problems: Vec::new(),
            },
        }
    }

    /// Submits `spec` and `bundle` with the fleet's token.
    pub(crate) async fn submit(&self, spec: &BatchSpec, bundle: Vec<u8>) -> Answer {
        let spec = serde_json::to_vec(spec).expect("a spec serializes");
        self.submit_raw(spec, bundle, Some(TOKEN)).await
    }

    /// Submits a hostile `bundle` under a spec that is valid for it, and checks that it is
    /// refused with `status`, that the answer holds every fragment of `expect`, and that
    /// nothing was stored.
    async fn refuse_bundle(&self, case: &str, bundle: Vec<u8>, status: u16, expect: &[&str]) {
        let spec = spec_for(&bundle);
        let answer = self.submit(&spec, bundle).await;
        self.expect_refusal(case, &answer, status, expect).await;
        // The spec is valid for the bundle, so the hostile entry must be the only problem.
        assert!(
            answer.problems.len() <= 1,
            "{case}: more than the one expected problem: {:?}",
            answer.problems
        );
    }

    /// Checks one refusal and that nothing was stored.
    async fn expect_refusal(&self, case: &str, answer: &Answer, status: u16, expect: &[&str]) {
        assert_eq!(
            answer.status,
            status,
            "{case}: status; answer: {}\n{}",
            answer.text,
            self.fleet.logs()
        );
        for fragment in expect {
            assert!(
                answer.text.contains(fragment),
                "{case}: the answer does not mention {fragment:?}: {}",
                answer.text
            );
        }
        self.expect_nothing_stored(case).await;
    }

    /// `GET /v1/batches` with the fleet's token.
    async fn list(&self) -> Vec<Value> {
        let response = self
            .http
            .get(format!("{}/v1/batches", self.fleet.coordinator_url()))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("listing batches");
        assert_eq!(response.status().as_u16(), 200, "GET /v1/batches");
        response.json().await.expect("a JSON list of batches")
    }

    /// Messages in the events stream and jobs in the jobs stream, across every batch.
    async fn stream_messages(&self) -> (u64, u64) {
        let config = NatsConfig::new(&self.fleet.nats.url());
        let fabric = cowork_fabric::nats::connect(&config)
            .await
            .expect("connecting to nats");
        let events = fabric
            .jetstream
            .get_stream(&config.events_stream)
            .await
            .unwrap_or_else(|e| panic!("reading stream {}: {e}", config.events_stream))
            .cached_info()
            .state
            .messages;
        // The coordinator's fence markers are no jobs.
        let jobs = crate::support::job_messages(&fabric, &config.jobs_stream).await;
        (events, jobs)
    }

    /// Panics unless the bucket holds no batch and no bundle, both streams are empty, the
    /// registry lists no batch and the coordinator's scratch directory is empty.
    async fn expect_nothing_stored(&self, case: &str) {
        let stored: Vec<String> = self
            .fleet
            .object_keys()
            .into_iter()
            .filter(|key| key.starts_with("batches/") || key.starts_with("bundles/"))
            .collect();
        assert!(stored.is_empty(), "{case}: the bucket holds {stored:?}");
        let (events, jobs) = self.stream_messages().await;
        assert_eq!(events, 0, "{case}: messages in the events stream");
        assert_eq!(jobs, 0, "{case}: messages in the jobs stream");
        let listed = self.list().await;
        assert!(
            listed.is_empty(),
            "{case}: GET /v1/batches lists {listed:?}"
        );
        let scratch = self.fleet.dir.path().join("scratch");
        let left: Vec<PathBuf> = match std::fs::read_dir(&scratch) {
            Ok(listing) => listing
                .map(|entry| entry.expect("an entry").path())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("listing {}: {e}", scratch.display()),
        };
        assert!(left.is_empty(), "{case}: scratch holds {left:?}");
    }

    /// Submits the valid bundle: it must be accepted, and then the bucket holds its bundle, so
    /// the "nothing stored" check of the refusals above could have failed.
    async fn accept_valid_bundle(&self) {
        let bundle = valid_bundle();
        let answer = self.submit(&spec_for(&bundle), bundle).await;
        assert_eq!(
            answer.status,
            201,
            "the valid control batch: {}\n{}",
            answer.text,
            self.fleet.logs()
        );
        let keys = self.fleet.object_keys();
        assert!(
            keys.iter().any(|key| key.starts_with("bundles/")),
            "an accepted batch stores its bundle: {keys:?}"
        );
        assert_eq!(self.list().await.len(), 1, "an accepted batch is listed");
        // Intake unpacked the bundle there, so the scratch check above looked at the right
        // directory.
        let scratch = self.fleet.dir.path().join("scratch");
        assert!(
            scratch.is_dir(),
            "{} is not the scratch dir",
            scratch.display()
        );
    }
}

/// Every problem of a refusal mentions the `bundle` and one entry.
fn bundle_entry(path: &str) -> String {
    format!("bundle entry {path:?}")
}

// ---------------------------------------------------------------------------------------------
// Fleet cases: hostile archives
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_entries_escaping_the_root_are_refused() {
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    let escape_name = "../../escaped-by-hostile-test";
    let cases: Vec<(&str, &[u8], tar::EntryType, &[u8])> = vec![
        (
            "`../` entry",
            escape_name.as_bytes(),
            tar::EntryType::Regular,
            b"",
        ),
        (
            "`..` in the middle",
            b"data/../../../escaped-by-hostile-test",
            tar::EntryType::Regular,
            b"",
        ),
        (
            "absolute entry",
            b"/tmp/escaped-by-hostile-test",
            tar::EntryType::Regular,
            b"",
        ),
        (
            "symlink escaping the root",
            b"skills/v1/report/leak",
            tar::EntryType::Symlink,
            b"/etc",
        ),
        (
            "hard link escaping the root",
            b"data/passwd",
            tar::EntryType::Link,
            b"../../../../../../etc/passwd",
        ),
    ];
    for (case, name, kind, link) in cases {
        let mut archive = Archive::with_project();
        archive.entry(name, kind, link, b"escaped\n");
        let name = String::from_utf8_lossy(name).into_owned();
        let kind_word = match kind {
            tar::EntryType::Symlink => "symlink",
            tar::EntryType::Link => "hard link",
            _ => {
                if name.starts_with('/') {
                    "absolute path"
                } else {
                    "`..` component"
                }
            }
        };
        api.refuse_bundle(
            case,
            archive.finish(),
            400,
            &[&bundle_entry(&name), kind_word],
        )
        .await;
    }
    for escaped in [
        fleet.dir.path().join("escaped-by-hostile-test"),
        PathBuf::from("/tmp/escaped-by-hostile-test"),
    ] {
        assert!(!escaped.exists(), "{} was written", escaped.display());
    }
    api.accept_valid_bundle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_device_and_fifo_entries_are_refused() {
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    let cases = [
        ("character device", tar::EntryType::Char),
        ("block device", tar::EntryType::Block),
        ("fifo", tar::EntryType::Fifo),
    ];
    for (kind_word, kind) in cases {
        let mut archive = Archive::with_project();
        archive.entry(b"data/device", kind, b"", b"");
        api.refuse_bundle(
            kind_word,
            archive.finish(),
            400,
            &[&bundle_entry("data/device"), kind_word],
        )
        .await;
    }
    api.accept_valid_bundle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_over_the_size_caps_is_refused() {
    // The upload cap is lowered to 1 MiB (`COWORK_MAX_BUNDLE_MIB`).
    let fleet = Fleet::start_with_env(&[("COWORK_MAX_BUNDLE_MIB", "1")]);
    let api = Api::new(&fleet);

    // Over the upload cap: 413 Payload Too Large, not 400 — the documented status of the
    // upload limit (`CoordinatorConfig::max_bundle_bytes`); it names the `bundle` part. The
    // bytes need not be an archive: the size is checked first.
    let over_by_one = vec![0x5a_u8; (1 << 20) + 1];
    api.refuse_bundle(
        "one byte over the upload cap",
        over_by_one,
        413,
        &["part bundle", "1048577 bytes", "1048576 bytes"],
    )
    .await;
    // Far over: the request body itself is over the limit, before the handler sees the part.
    let far_over = vec![0x5a_u8; 3 << 20];
    api.refuse_bundle(
        "3 MiB over a 1 MiB cap",
        far_over,
        413,
        &["reading part bundle", "at most 1048576 bytes"],
    )
    .await;

    // A tiny archive whose header claims a 600 MiB file: refused from the header, before any
    // byte is unpacked (the per-file cap is 512 MiB).
    let mut archive = Archive::with_project();
    archive.entry_with_size(
        b"data/huge.bin",
        tar::EntryType::Regular,
        b"",
        600 << 20,
        b"",
    );
    api.refuse_bundle(
        "header claiming 600 MiB",
        archive.finish(),
        400,
        &[&bundle_entry("data/huge.bin"), "per-file limit"],
    )
    .await;
    api.accept_valid_bundle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_over_the_entry_count_cap_is_refused() {
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    // The coordinator's cap is its `--max-bundle-entries` default, 50,000 entries (lower than
    // the worker's own unpack cap). The same directory entry repeated keeps the archive small;
    // the last entry is the one over the cap.
    let cap: u64 = 50_000;
    let mut archive = Archive::with_project();
    let n_project = PROJECT_FILES.len() as u64;
    for _ in n_project..cap {
        archive.entry(b"many/", tar::EntryType::Directory, b"", b"");
    }
    archive.entry(b"many/one-too-many", tar::EntryType::Regular, b"", b"x");
    api.refuse_bundle(
        "50,001 entries",
        archive.finish(),
        400,
        &[
            &bundle_entry("many/one-too-many"),
            "more than 50000 entries",
        ],
    )
    .await;
    api.accept_valid_bundle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_with_a_non_utf8_entry_name_is_refused() {
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    // Two names that differ only in their invalid bytes would collide once decoded lossily.
    let mut archive = Archive::with_project();
    archive.entry(
        b"data/r\xe9sum\xe9.csv",
        tar::EntryType::Regular,
        b"",
        b"a\n",
    );
    api.refuse_bundle(
        "non-UTF-8 entry name",
        archive.finish(),
        400,
        &["bundle entry \"data/r", "UTF-8"],
    )
    .await;
    api.accept_valid_bundle().await;
}

// ---------------------------------------------------------------------------------------------
// Fleet cases: the spec and the inputs inside a bundle
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_flags_out_of_range_are_refused_by_the_coordinator() {
    // The client checks these flags too; a server trusts nothing it receives, so the spec is
    // sent as a hand-made document.
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    let bundle = valid_bundle();
    let base = spec_for(&bundle);
    let with = |edit: &dyn Fn(&mut BatchFlags)| {
        let mut spec = base.clone();
        edit(&mut spec.flags);
        spec
    };
    let cases: Vec<(&str, BatchSpec, &[&str])> = vec![
        (
            "repeat 1",
            with(&|flags| flags.repeat = Some(1)),
            &["spec.flags.repeat", "got 1"],
        ),
        (
            "repeat 10001",
            with(&|flags| flags.repeat = Some(10_001)),
            &["spec.flags.repeat", "got 10001"],
        ),
        (
            "min pass rate 1.5",
            with(&|flags| flags.min_pass_rate = 1.5),
            &["spec.flags.minPassRate", "1.5"],
        ),
        (
            "negative budget",
            with(&|flags| flags.max_budget_usd = Some(-1.0)),
            &["spec.flags.maxBudgetUsd", "-1"],
        ),
        (
            "max cells 0",
            with(&|flags| flags.max_cells = 0),
            &["spec.flags.maxCells", "got 0"],
        ),
        (
            "max cells over the maximum",
            with(&|flags| flags.max_cells = u32::MAX),
            &["spec.flags.maxCells", "4294967295"],
        ),
    ];
    for (case, spec, expect) in cases {
        let answer = api.submit(&spec, bundle.clone()).await;
        api.expect_refusal(case, &answer, 400, expect).await;
    }

    // Values JSON can carry but the Rust types cannot: a negative repeat and a repeat over
    // u32, and NaN spelled as a string. serde refuses them, naming the field.
    let raw_cases = [
        ("repeat -2", "repeat", "-2"),
        ("repeat 2^32 + 2", "repeat", "4294967298"),
        ("min pass rate NaN", "minPassRate", "\"NaN\""),
    ];
    for (case, field, value) in raw_cases {
        let mut spec = serde_json::to_value(&base).expect("a spec serializes");
        spec["flags"][field] = serde_json::from_str(value).expect("a JSON literal");
        let spec = serde_json::to_vec(&spec).expect("a value serializes");
        let answer = api.submit_raw(spec, bundle.clone(), Some(TOKEN)).await;
        let path = format!("flags.{field}");
        api.expect_refusal(case, &answer, 400, &["part spec", &path])
            .await;
    }
    api.accept_valid_bundle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_reaching_outside_the_bundle_are_refused_by_the_coordinator() {
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    let bundle = valid_bundle();

    // Spec paths are joined onto the unpack directory, so each is checked as an entry path.
    let mut spec = spec_for(&bundle);
    spec.target = "../../etc".to_owned();
    spec.scenario_files = vec!["/etc/passwd".to_owned()];
    spec.matrix_file = Some("data/../../matrix.yaml".to_owned());
    let answer = api.submit(&spec, bundle.clone()).await;
    api.expect_refusal(
        "spec paths",
        &answer,
        400,
        &[
            "spec.target: \"../../etc\"",
            "spec.scenarioFiles[0]: \"/etc/passwd\"",
            "spec.matrixFile: \"data/../../matrix.yaml\"",
        ],
    )
    .await;

    // A scenario inside the bundle whose session climbs out of the unpack directory to a file
    // that exists on the coordinator.
    let climbing = format!(
        "session: ../{}etc/passwd\nprompt: Hello.\n",
        "../".repeat(32)
    );
    let mut archive = Archive::with_project();
    archive.entry(
        b"scenarios/climb.yaml",
        tar::EntryType::Regular,
        b"",
        climbing.as_bytes(),
    );
    let bundle = archive.finish();
    let mut spec = spec_for(&bundle);
    spec.target = "scenarios/climb.yaml".to_owned();
    spec.scenario_files = vec!["scenarios/climb.yaml".to_owned()];
    let answer = api.submit(&spec, bundle).await;
    api.expect_refusal(
        "session climbing out of the bundle",
        &answer,
        400,
        &[
            "scenarios/climb.yaml:1:",
            "session",
            "outside the bundle root",
        ],
    )
    .await;
    // The problem names the file as the client knows it, not the coordinator's scratch path.
    assert!(
        !answer.text.contains("scratch"),
        "the answer leaks the scratch path: {}",
        answer.text
    );

    // An alias bomb inside a bundled scenario.
    let bomb = format!(
        "session: ../sessions/report.yaml\nprompt: Hello.\n{}",
        alias_bomb("assert")
    );
    let mut archive = Archive::with_project();
    archive.entry(
        b"scenarios/bomb.yaml",
        tar::EntryType::Regular,
        b"",
        bomb.as_bytes(),
    );
    let bundle = archive.finish();
    let mut spec = spec_for(&bundle);
    spec.target = "scenarios/bomb.yaml".to_owned();
    spec.scenario_files = vec!["scenarios/bomb.yaml".to_owned()];
    let answer = api.submit(&spec, bundle).await;
    api.expect_refusal(
        "alias bomb in a bundled scenario",
        &answer,
        400,
        &["scenarios/bomb.yaml:", "alias"],
    )
    .await;
    api.accept_valid_bundle().await;
}

// ---------------------------------------------------------------------------------------------
// Fleet cases: authentication
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_without_or_with_a_wrong_token_is_refused() {
    let fleet = Fleet::start();
    let api = Api::new(&fleet);
    let bundle = valid_bundle();
    let spec = serde_json::to_vec(&spec_for(&bundle)).expect("a spec serializes");
    let cases = [
        ("no token", None),
        ("wrong token", Some("it-token-7f3b")),
        ("the token with a trailing byte", Some("it-token-7f3a0")),
        ("a prefix of the token", Some("it-token-7f3")),
    ];
    for (case, token) in cases {
        let answer = api.submit_raw(spec.clone(), bundle.clone(), token).await;
        api.expect_refusal(case, &answer, 401, &["bearer token"])
            .await;
    }

    // `cowork submit` with a wrong token: a usage error naming the token, and nothing stored.
    let sandbox = Sandbox::with_project();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut command);
    let coordinator = fleet.coordinator_url();
    let args = [
        "submit",
        SCENARIO,
        "--repeat",
        "2",
        "--executor",
        "sim",
        "--coordinator",
        &coordinator,
    ];
    command
        .args(args)
        .env("COWORK_API_TOKEN", "not-the-token")
        .current_dir(sandbox.path());
    let out = Output::new(
        format!("cowork {}", args.join(" ")),
        sandbox.path().to_path_buf(),
        command.output().expect("running cowork submit"),
    );
    out.expect_code(2).expect_stderr("token");
    if out.stderr.contains("not-the-token") {
        out.fail("the refusal printed the token");
    }
    api.expect_nothing_stored("cowork submit with a wrong token")
        .await;
    api.accept_valid_bundle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cowork_submit_of_a_bundle_over_the_cap_exits_2() {
    let fleet = Fleet::start_with_env(&[("COWORK_MAX_BUNDLE_MIB", "1")]);
    let api = Api::new(&fleet);
    let sandbox = Sandbox::with_project();
    // 2 MiB that zstd cannot shrink: an xorshift stream.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut noise = Vec::with_capacity(2 << 20);
    while noise.len() < 2 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        noise.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(sandbox.path().join("data/sales.csv"), &noise).expect("writing the upload");
    let out = fleet.cowork(
        sandbox.path(),
        &["submit", SCENARIO, "--repeat", "2", "--executor", "sim"],
    );
    out.expect_code(2)
        .expect_stderr("reading part bundle")
        .expect_stderr("at most 1048576 bytes");
    api.expect_nothing_stored("cowork submit over the cap")
        .await;
}

// ---------------------------------------------------------------------------------------------
// Matrix basename mismatch: a cell error, not a usage error (harness-behaviour.md#matrix-axes,
// harness-behaviour.md#matrix-repeat, TC-33 of harness-behaviour.md#test-cases)
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_basename_mismatch_on_the_fleet_is_a_cell_error_with_no_jobs() {
    // TC-33 makes a skill-dir candidate whose basename differs from the replaced entry's a
    // per-cell error: the batch runs, the cell is marked with an error, the verdict fails
    // (exit 1). It is not a usage error, so this case does not expect exit 2. "Nothing is
    // dispatched for bad input" still holds here (harness-behaviour.md#matrix-repeat): no job of
    // that cell is dispatched. The mismatch differs only in case (`Report` against `report`), which
    // a case-insensitive comparison would miss.
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container,hostloop,microvm,protocol,replay", "2");
    let sandbox = Sandbox::with_project();
    std::fs::rename(
        sandbox.path().join("skills/v2/report"),
        sandbox.path().join("skills/v2/Report"),
    )
    .expect("renaming the skill dir");
    sandbox.write(
        "matrix.yaml",
        "skill_dirs:\n  - skills/v1/report\n  - skills/v2/Report\n",
    );
    let out = fleet.submit(
        sandbox.path(),
        &[
            SCENARIO,
            "--repeat",
            "2",
            "--matrix",
            "matrix.yaml",
            "--executor",
            "sim",
        ],
    );
    out.expect_code(1);
    let envelope = out.envelope();
    let cells = envelope["matrixRepeat"]["cells"]
        .as_array()
        .unwrap_or_else(|| out.fail("no matrixRepeat cells"));
    assert_eq!(cells.len(), 2, "{}", out.context());
    assert!(
        cells[0].get("rollup").is_some(),
        "cell 0 runs: {}",
        cells[0]
    );
    let error = cells[1]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("Report") && error.contains("report"),
        "the cell error names both basenames: {}",
        cells[1]
    );
    assert_eq!(envelope["matrixRepeat"]["anyFail"], true);
    let batch = batch_of(&envelope);
    let started: Vec<String> = fleet
        .events(&batch)
        .await
        .into_iter()
        .filter(|event| matches!(event.event, JobEventKind::Started))
        .map(|event| event.job_id.to_string())
        .collect();
    let cell_0 = format!("{batch}/c0/");
    assert!(
        started.iter().any(|job| job.starts_with(&cell_0)),
        "cell 0's jobs ran: {started:?}"
    );
    let cell_1 = format!("{batch}/c1/");
    assert!(
        started.iter().all(|job| !job.starts_with(&cell_1)),
        "a job of the erroneous cell was dispatched: {started:?}"
    );
}

/// A compression bomb — the project plus 96 MiB of zeros, ~100 KB on the wire —
/// is refused while it is decompressed once it passes the coordinator's `--max-unpacked-mib`,
/// naming the limit; nothing is stored and the scratch dir is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compression_bomb_is_stopped_at_the_coordinators_unpack_limit() {
    let fleet = Fleet::start_with_env(&[("COWORK_MAX_UNPACKED_MIB", "64")]);
    let api = Api::new(&fleet);
    let files = PROJECT_FILES.iter().map(|rel| (*rel).to_owned()).collect();
    let zeros = vec![0u8; 96 << 20];
    let bomb = cowork_fabric::bundle::pack(
        &fixture("project"),
        &files,
        &[("data/zeros.bin".to_owned(), zeros)],
    )
    .expect("packing the bomb")
    .bytes;
    assert!(
        bomb.len() < 1 << 20,
        "the bomb is small on the wire: {} bytes",
        bomb.len()
    );
    api.refuse_bundle(
        "a compression bomb",
        bomb,
        400,
        &["data/zeros.bin", &(64u64 << 20).to_string()],
    )
    .await;
    api.expect_nothing_stored("a compression bomb").await;
    let scratch = fleet.dir.path().join("scratch");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|dir| dir.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "the scratch dir keeps {left:?}");
    api.accept_valid_bundle().await;
}
