//! Classifying a finished CLI process (harness-behaviour.md#outcome-classes,
//! harness-behaviour.md#exit-codes and the measured behaviour of harness-behaviour.md#real-cli).
//!
//! This module is pure: it reads the way the process ended and the bytes it printed on stdout,
//! and decides which outcome the job had. It does no IO, so every exit-code rule is tested
//! here without a process. Reading the run directory (to prefer the on-disk, secret-scrubbed
//! copy of a result) is the caller's job.
//!
//! The envelope is read by key: it is the CLI's stdout line, its shape open across CLI versions,
//! and it is kept as printed (unknown keys and key order survive byte for byte).

use cowork_schema::event::{ErrorCategory, InfraClass};
use serde_json::Value;

use super::Classified;

/// The value of the envelope's `tool` key that marks a `cowork-harness` envelope.
const ENVELOPE_TOOL: &str = "cowork-harness";

/// How many bytes of stdout an error message quotes when no envelope was found.
const STDOUT_PREVIEW_BYTES: usize = 200;

/// How the CLI process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it (its own crash, the OOM killer, or its own `kill(0, SIGKILL)`).
    Signaled(i32),
    /// The job's hard timeout fired and the worker killed the process group
    /// (harness-behaviour.md#choice-c13).
    TimedOut { timeout_ms: u64 },
    /// The job was cancelled and the worker killed the process group.
    Cancelled,
}

/// The JSON envelope the CLI printed as its last stdout line
/// (harness-behaviour.md#envelope-success, harness-behaviour.md#envelope-error).
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// The parsed envelope, keys in their printed order.
    pub value: Value,
    /// The envelope line as printed, without its line terminator.
    pub line: Vec<u8>,
}

impl Envelope {
    /// `envelope.version`, the version of the CLI that ran the job
    /// (harness-behaviour.md#cli-version-pin).
    pub fn version(&self) -> Option<String> {
        self.value
            .get("version")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// Finds the envelope: the last line of `stdout` that parses as a JSON object whose `tool` is
/// `"cowork-harness"`. Human output goes to stderr, but a last line is not trusted blindly: a
/// line that is not an envelope is skipped.
pub fn find_envelope(stdout: &[u8]) -> Option<Envelope> {
    stdout.split(|&byte| byte == b'\n').rev().find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let trimmed = line.trim_ascii();
        if !trimmed.starts_with(b"{") {
            return None;
        }
        let value: Value = serde_json::from_slice(trimmed).ok()?;
        if value.get("tool").and_then(Value::as_str) != Some(ENVELOPE_TOOL) {
            return None;
        }
        Some(Envelope {
            value,
            line: trimmed.to_vec(),
        })
    })
}

/// The CLI's reason for refusing to replay a cassette: its last stderr line
/// `replay: <path>: <reason>` (a corrupt or tampered cassette gets a stub result without one).
pub fn replay_refusal(stderr: &[u8]) -> Option<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.starts_with("replay: "))
        .map(str::to_owned)
}

/// Maps a finished process to its outcome.
///
/// For [`Classified::Completed`] the result is `results[0]` of the envelope; the caller
/// replaces it with the on-disk copy when the run directory has one.
pub fn classify(end: ProcessEnd, envelope: Option<&Envelope>, stdout: &[u8]) -> Classified {
    let code = match end {
        ProcessEnd::Cancelled => {
            return Classified::error(
                ErrorCategory::Cancelled,
                "job was cancelled; the harness was stopped (SIGTERM, its grace, then SIGKILL of its process group)".to_owned(),
            );
        }
        ProcessEnd::TimedOut { timeout_ms } => {
            return Classified::error(
                ErrorCategory::Timeout,
                format!(
                    "job exceeded its timeout of {timeout_ms} ms; the harness was stopped (SIGTERM, its grace, then SIGKILL of its process group)"
                ),
            );
        }
        ProcessEnd::Signaled(signal) => {
            return Classified::error(ErrorCategory::Crashed, format!("killed by signal {signal}"));
        }
        ProcessEnd::Exited(code) => code,
    };
    let Some(envelope) = envelope else {
        return Classified::error(
            ErrorCategory::Internal,
            format!(
                "no JSON envelope on stdout (exit code {code}; {})",
                stdout_preview(stdout)
            ),
        );
    };
    let error = envelope_error(&envelope.value);
    match code {
        0 | 1 => {
            if let Some(error) = error {
                // `record` reports its own failures with exit 1 and an error envelope, nearly
                // all of them as `usage`: what it says decides what they are.
                if code == 1
                    && envelope.value.get("command").and_then(Value::as_str) == Some("record")
                    && error.category.as_deref() == Some("usage")
                {
                    return classify_record_failure(&error);
                }
                return Classified::error(error.category_or(ErrorCategory::Internal), error.text());
            }
            let results = envelope.value.get("results").and_then(Value::as_array);
            match results.map(Vec::as_slice) {
                Some([result]) if result.is_object() => Classified::Completed {
                    result: result.clone(),
                },
                Some([_]) => Classified::error(
                    ErrorCategory::Internal,
                    "envelope result is not a JSON object".to_owned(),
                ),
                Some(results) => Classified::error(
                    ErrorCategory::Internal,
                    format!(
                        "expected exactly one result in the envelope, found {}",
                        results.len()
                    ),
                ),
                None => Classified::error(
                    ErrorCategory::Internal,
                    "envelope has no results array".to_owned(),
                ),
            }
        }
        2 => classify_exit_2(error),
        3 => {
            let message = match error {
                Some(error) => error.text(),
                None => "harness exited with code 3 (boundary error)".to_owned(),
            };
            Classified::error(ErrorCategory::Boundary, message)
        }
        other => {
            let (category, detail) = match error {
                Some(error) => (error.category_or(ErrorCategory::Internal), error.text()),
                None => (ErrorCategory::Internal, "no error reported".to_owned()),
            };
            Classified::error(
                category,
                format!("harness exited with unexpected code {other}: {detail}"),
            )
        }
    }
}

/// Exit 2: an unanswered gate, a sandbox that could not be set up, or the error the CLI names.
fn classify_exit_2(error: Option<EnvelopeError>) -> Classified {
    match error {
        Some(error) if error.category.as_deref() == Some("unanswered") => Classified::Unanswered {
            message: error.message_or_default(),
            hint: error.hint,
        },
        Some(error) if error.is_sandbox_setup() => Classified::Infra {
            class: InfraClass::SandboxStart,
            message: error.text(),
        },
        Some(error) => Classified::error(error.category_or(ErrorCategory::Usage), error.text()),
        // A corrupt cassette makes `replay` print a stub result with `error: null` and exit
        // 2: the exit code is the truth (harness-behaviour.md#real-cli).
        None => Classified::error(
            ErrorCategory::Usage,
            "harness exited with code 2 but reported no error (unreadable input?)".to_owned(),
        ),
    }
}

/// The start of the message of `record` refusing to keep a cassette of a run whose verdict
/// failed: the run was paid for and its result is on disk.
pub const RECORD_FAILING_RUN: &str = "refusing to freeze a failing run";

/// Category of a `record` job whose run completed with a failing verdict and was not frozen;
/// the executor replaces it with the on-disk result when it finds one.
pub const RECORD_VERDICT_FAIL: &str = "verdict_fail";

/// A `record` exit 1 that the CLI labelled `usage`, classified by its message (real-cli facts,
/// exit codes): an unanswered gate, a boundary error, a failing run it refused to freeze, an
/// internal failure (Docker, a binary, git), or, for anything else, usage as it said.
fn classify_record_failure(error: &EnvelopeError) -> Classified {
    let message = error.message_or_default();
    let lower = message.to_lowercase();
    let category = if lower.contains("unanswered question") {
        return Classified::Unanswered {
            message,
            hint: error.hint.clone(),
        };
    } else if lower.contains(RECORD_FAILING_RUN) {
        ErrorCategory::Other(RECORD_VERDICT_FAIL.to_owned())
    } else if lower.contains("git-tracked files")
        || lower.contains("boundary")
        || lower.contains("escapes")
    {
        ErrorCategory::Boundary
    } else if is_sandbox_setup_message(&lower) {
        return Classified::Infra {
            class: InfraClass::SandboxStart,
            message: error.text(),
        };
    } else if lower.contains("git ls-files") || lower.contains("spawn") {
        ErrorCategory::Internal
    } else {
        ErrorCategory::Usage
    };
    Classified::error(category, error.text())
}

/// Words of a harness error that say the sandbox could not be set up on this worker: Docker
/// (the engine, an image, the egress proxy's build), Lima (the VM, its firewall), the staged
/// agent binary, or a full disk. The CLI has no preflight and reports them as `internal`
/// (exit 2) before the agent starts, so nothing was spent and another worker may succeed.
const SANDBOX_SETUP_WORDS: [&str; 7] = [
    "docker",
    "egress-proxy",
    "limactl",
    "lima ",
    "staged agent binary",
    "no space left on device",
    "enospc",
];

/// Whether a lowercased harness error message names a sandbox that could not be set up.
fn is_sandbox_setup_message(lower: &str) -> bool {
    SANDBOX_SETUP_WORDS.iter().any(|word| lower.contains(word))
}

/// The `error` object of an envelope (harness-behaviour.md#envelope-error).
#[derive(Debug, PartialEq)]
struct EnvelopeError {
    category: Option<String>,
    message: Option<String>,
    hint: Option<String>,
}

impl EnvelopeError {
    fn category_or(&self, default: ErrorCategory) -> ErrorCategory {
        self.category
            .as_deref()
            .map_or(default, ErrorCategory::parse)
    }

    /// An `internal` error whose message names the sandbox's setup ([`SANDBOX_SETUP_WORDS`]).
    fn is_sandbox_setup(&self) -> bool {
        self.category.as_deref() == Some("internal")
            && is_sandbox_setup_message(&self.message_or_default().to_lowercase())
    }

    fn message_or_default(&self) -> String {
        self.message
            .clone()
            .unwrap_or_else(|| "harness reported an error without a message".to_owned())
    }

    /// The message with the hint appended, since [`Classified::Error`] has no hint field.
    fn text(&self) -> String {
        let message = self.message_or_default();
        match &self.hint {
            Some(hint) => format!("{message} (hint: {hint})"),
            None => message,
        }
    }
}

/// Reads `error`; `None` when it is `null` or absent.
fn envelope_error(envelope: &Value) -> Option<EnvelopeError> {
    let error = envelope.get("error")?;
    if error.is_null() {
        return None;
    }
    let text = |key: &str| error.get(key).and_then(Value::as_str).map(str::to_owned);
    if !error.is_object() {
        return Some(EnvelopeError {
            category: None,
            message: Some(format!("malformed envelope error: {error}")),
            hint: None,
        });
    }
    Some(EnvelopeError {
        category: text("category"),
        message: text("message"),
        hint: text("hint"),
    })
}

/// Quotes the start of stdout for an error message.
fn stdout_preview(stdout: &[u8]) -> String {
    if stdout.trim_ascii().is_empty() {
        return "stdout was empty".to_owned();
    }
    let end = stdout.len().min(STDOUT_PREVIEW_BYTES);
    let preview = String::from_utf8_lossy(&stdout[..end]);
    format!("first {end} bytes: {preview:?}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn envelope(value: Value) -> Envelope {
        let line = cowork_schema::json_number::to_vec(&value)
            .expect("serializing a json value cannot fail");
        Envelope { value, line }
    }

    fn ok_envelope(results: Value) -> Envelope {
        envelope(json!({
            "tool": "cowork-harness", "version": "2.0.0", "command": "run", "ok": true,
            "results": results, "error": null
        }))
    }

    fn error_envelope(error: Value) -> Envelope {
        envelope(json!({
            "tool": "cowork-harness", "version": "2.0.0", "command": "run", "ok": false,
            "results": [], "error": error
        }))
    }

    fn check(end: ProcessEnd, envelope: Option<Envelope>, expect: Classified) {
        let stdout = envelope
            .as_ref()
            .map(|e| e.line.clone())
            .unwrap_or_default();
        let got = classify(end, envelope.as_ref(), &stdout);
        assert_eq!(got, expect, "end {end:?}");
    }

    fn error(category: &str, message: &str) -> Classified {
        Classified::error(category.into(), message.to_owned())
    }

    #[test]
    fn a_refused_replay_is_named_by_its_stderr_line() {
        let stderr = b"::warning:: stale\nreplay: /b/c.cassette.json: body does not match its sha256\n[cowork-fleet: note]\n";
        assert_eq!(
            super::replay_refusal(stderr).as_deref(),
            Some("replay: /b/c.cassette.json: body does not match its sha256")
        );
        assert_eq!(super::replay_refusal(b"warn\n"), None);
    }

    #[test]
    fn exit_codes_map_to_outcomes() {
        let result = json!({"scenario": "s", "outDir": "/x"});
        check(
            ProcessEnd::Exited(0),
            Some(ok_envelope(json!([result.clone()]))),
            Classified::Completed {
                result: result.clone(),
            },
        );
        check(
            ProcessEnd::Exited(1),
            Some(ok_envelope(json!([result.clone()]))),
            Classified::Completed {
                result: result.clone(),
            },
        );
        check(
            ProcessEnd::Exited(0),
            Some(ok_envelope(json!([result.clone(), result.clone()]))),
            error(
                "internal",
                "expected exactly one result in the envelope, found 2",
            ),
        );
        check(
            ProcessEnd::Exited(1),
            Some(ok_envelope(json!([]))),
            error(
                "internal",
                "expected exactly one result in the envelope, found 0",
            ),
        );
        check(
            ProcessEnd::Exited(0),
            Some(ok_envelope(json!(["text"]))),
            error("internal", "envelope result is not a JSON object"),
        );
        check(
            ProcessEnd::Exited(1),
            Some(error_envelope(
                json!({"category": "usage", "message": "cassette exists"}),
            )),
            error("usage", "cassette exists"),
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "unanswered", "message": "no answer", "hint": "add answers:"}),
            )),
            Classified::Unanswered {
                message: "no answer".to_owned(),
                hint: Some("add answers:".to_owned()),
            },
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "unanswered", "message": "no answer"}),
            )),
            Classified::Unanswered {
                message: "no answer".to_owned(),
                hint: None,
            },
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "runtime", "message": "boom", "hint": "retry"}),
            )),
            error("runtime", "boom (hint: retry)"),
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(json!({"message": "no category"}))),
            error("usage", "no category"),
        );
        check(
            ProcessEnd::Exited(2),
            Some(ok_envelope(json!([result.clone()]))),
            error(
                "usage",
                "harness exited with code 2 but reported no error (unreadable input?)",
            ),
        );
        check(
            ProcessEnd::Exited(3),
            Some(error_envelope(
                json!({"category": "boundary", "message": "no tracked files"}),
            )),
            error("boundary", "no tracked files"),
        );
        check(
            ProcessEnd::Exited(3),
            Some(ok_envelope(json!([]))),
            error("boundary", "harness exited with code 3 (boundary error)"),
        );
        check(
            ProcessEnd::Exited(4),
            Some(ok_envelope(json!([]))),
            error(
                "internal",
                "harness exited with unexpected code 4: no error reported",
            ),
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(json!("flat string"))),
            error("usage", "malformed envelope error: \"flat string\""),
        );
    }

    #[test]
    fn a_sandbox_that_did_not_start_is_infrastructure() {
        let docker = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock";
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "internal", "message": docker}),
            )),
            Classified::Infra {
                class: InfraClass::SandboxStart,
                message: docker.to_owned(),
            },
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "internal", "message": "write /runs/x: no space left on device"}),
            )),
            Classified::Infra {
                class: InfraClass::SandboxStart,
                message: "write /runs/x: no space left on device".to_owned(),
            },
        );
        // Another internal error, or a usage error that names Docker, is the job's own.
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "internal", "message": "git failed"}),
            )),
            error("internal", "git failed"),
        );
        check(
            ProcessEnd::Exited(2),
            Some(error_envelope(
                json!({"category": "usage", "message": "--docker is not a flag"}),
            )),
            error("usage", "--docker is not a flag"),
        );
    }

    #[test]
    fn kills_and_signals_win_over_any_envelope() {
        let envelope = ok_envelope(json!([{"scenario": "s"}]));
        check(
            ProcessEnd::Signaled(11),
            Some(envelope.clone()),
            error("crashed", "killed by signal 11"),
        );
        check(
            ProcessEnd::TimedOut { timeout_ms: 250 },
            Some(envelope.clone()),
            error(
                "timeout",
                "job exceeded its timeout of 250 ms; the harness was stopped (SIGTERM, its grace, then SIGKILL of its process group)",
            ),
        );
        check(
            ProcessEnd::Cancelled,
            None,
            error(
                "cancelled",
                "job was cancelled; the harness was stopped (SIGTERM, its grace, then SIGKILL of its process group)",
            ),
        );
    }

    #[test]
    fn missing_envelope_quotes_stdout() {
        let got = classify(ProcessEnd::Exited(0), None, b"hello\nworld");
        assert_eq!(
            got,
            error(
                "internal",
                "no JSON envelope on stdout (exit code 0; first 11 bytes: \"hello\\nworld\")"
            )
        );
        let got = classify(ProcessEnd::Exited(0), None, b"  \n");
        assert_eq!(
            got,
            error(
                "internal",
                "no JSON envelope on stdout (exit code 0; stdout was empty)"
            )
        );
        let long = vec![b'x'; 1000];
        let Classified::Error { message, .. } = classify(ProcessEnd::Exited(1), None, &long) else {
            panic!("expected an error");
        };
        assert!(message.contains("first 200 bytes"), "{message}");
        assert!(message.len() < 300, "{message}");
    }

    fn check_find(stdout: &str, expect_command: Option<&str>) {
        let found = find_envelope(stdout.as_bytes());
        let command = found
            .as_ref()
            .and_then(|e| e.value.get("command"))
            .and_then(Value::as_str);
        assert_eq!(command, expect_command, "stdout {stdout:?}");
        if let Some(found) = found {
            let reparsed: Value =
                serde_json::from_slice(&found.line).expect("the kept line is the parsed json");
            assert_eq!(reparsed, found.value);
        }
    }

    #[test]
    fn envelope_is_the_last_harness_object_line() {
        let env = |command: &str| format!(r#"{{"tool":"cowork-harness","command":"{command}"}}"#);
        check_find(&env("run"), Some("run"));
        check_find(&format!("{}\n", env("run")), Some("run"));
        check_find(&format!("{}\r\n\n", env("run")), Some("run"));
        check_find(&format!("{}\n{}\n", env("a"), env("b")), Some("b"));
        check_find(&format!("{}\nnot json\n", env("a")), Some("a"));
        check_find(
            &format!("{}\n{{\"tool\":\"other\"}}\n", env("a")),
            Some("a"),
        );
        check_find("[1,2]\n\"x\"\n", None);
        check_find("{\"tool\":\"cowork-harness\"", None);
        check_find("", None);
        let envelope = find_envelope(env("run").as_bytes()).expect("an envelope line");
        assert_eq!(envelope.version(), None);
        let versioned = find_envelope(br#"{"tool":"cowork-harness","version":"2.0.0"}"#)
            .expect("an envelope line");
        assert_eq!(versioned.version().as_deref(), Some("2.0.0"));
    }
}

#[cfg(test)]
mod record_failure_tests {
    use super::*;
    use serde_json::json;

    fn record_exit_1(message: &str) -> Classified {
        let line = json!({
            "tool": "cowork-harness", "version": "2.0.0", "command": "record", "ok": false,
            "results": [], "error": {"category": "usage", "message": message}
        })
        .to_string();
        let envelope = find_envelope(line.as_bytes()).expect("one envelope line");
        classify(ProcessEnd::Exited(1), Some(&envelope), line.as_bytes())
    }

    fn category(classified: &Classified) -> &str {
        match classified {
            Classified::Error { category, .. } => category.as_str(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn a_record_failure_is_classified_by_what_it_says() {
        assert_eq!(
            category(&record_exit_1(
                "refusing to freeze a failing run of s.yaml (pass --allow-failing to keep it)"
            )),
            RECORD_VERDICT_FAIL
        );
        assert_eq!(
            category(&record_exit_1(
                "skills.local[0] has 0 git-tracked files — staging delivers tracked files only"
            )),
            "boundary"
        );
        assert_eq!(
            record_exit_1("failed to build cowork-egress-proxy:5 (docker exited 1)"),
            Classified::Infra {
                class: InfraClass::SandboxStart,
                message: "failed to build cowork-egress-proxy:5 (docker exited 1)".to_owned()
            }
        );
        assert_eq!(
            category(&record_exit_1("record: ENOENT: no such file")),
            "usage"
        );
        assert!(matches!(
            record_exit_1("`s.yaml`: unanswered question (on_unanswered=fail)"),
            Classified::Unanswered { .. }
        ));
    }
}
