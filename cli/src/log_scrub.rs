//! The stderr log's last step: every line is searched for the secret values this process
//! knows and each is replaced by `[REDACTED]` before it is written.
//!
//! Not every line is ours to write carefully: the NATS client prints its server URLs whole at
//! debug level, a library error may quote a header, and a harness's stderr may be logged on a
//! failure. So instead of trusting each print site, the writer scrubs what was formatted,
//! with the same forms (raw, base64, percent-encoded, JSON-escaped) as the worker's uploads
//! (`cowork_worker::executor::seal`).

use std::io::Write;
use std::sync::Arc;

use cowork_worker::executor::harness::SECRET_ENV;
use cowork_worker::executor::seal::{scrub, secret_forms};
use tracing_subscriber::fmt::MakeWriter;

/// Secrets given by value in a variable, or in a file a `*_FILE` variable names.
const SECRET_VARS: &[(&str, Option<&str>)] = &[
    ("COWORK_API_TOKEN", Some("COWORK_API_TOKEN_FILE")),
    ("COWORK_API_READ_TOKEN", Some("COWORK_API_READ_TOKEN_FILE")),
    ("COWORK_NATS_PASSWORD", Some("COWORK_NATS_PASSWORD_FILE")),
    ("COWORK_NATS_TOKEN", Some("COWORK_NATS_TOKEN_FILE")),
    ("COWORK_NOTIFY_SECRET", Some("COWORK_NOTIFY_SECRET_FILE")),
    (
        "COWORK_S3_SECRET_ACCESS_KEY",
        Some("COWORK_S3_SECRET_ACCESS_KEY_FILE"),
    ),
];

/// Every secret value this process was given through its environment: the API tokens (one
/// per line), the NATS password or token (also the password of a `nats://user:pw@…` URL),
/// the S3 secret key, and the model credentials a worker passes to its harness.
///
/// `nats_url` is the NATS URL of the command line, when one was given there rather than in
/// `COWORK_NATS_URL`.
pub fn known_secret_values(nats_url: Option<&str>) -> Vec<String> {
    let mut values = Vec::new();
    for (value_var, file_var) in SECRET_VARS {
        if let Ok(value) = std::env::var(value_var) {
            values.extend(value.lines().map(str::trim).map(str::to_owned));
        }
        let file = file_var.and_then(std::env::var_os);
        if let Some(text) = file.and_then(|path| std::fs::read_to_string(path).ok()) {
            values.extend(text.lines().map(str::trim).map(str::to_owned));
        }
    }
    for name in SECRET_ENV {
        if let Ok(value) = std::env::var(name) {
            values.push(value);
        }
    }
    let env_url = std::env::var("COWORK_NATS_URL").ok();
    for url in nats_url.into_iter().chain(env_url.as_deref()) {
        if let Some((_, password)) = cowork_fabric::nats::url_credentials(url) {
            values.push(password);
        }
    }
    values
}

/// `text` with every secret value of [`known_secret_values`] replaced: for what a command
/// prints itself rather than through the log (its final error), which may quote a URL or a
/// library's message.
pub fn scrub_known(text: &str) -> String {
    let forms = secret_forms(&known_secret_values(None));
    let (scrubbed, _) = scrub(text.as_bytes(), &forms);
    String::from_utf8_lossy(&scrubbed).into_owned()
}

/// A [`MakeWriter`] for stderr that scrubs each formatted event.
#[derive(Clone)]
pub struct ScrubbedStderr {
    /// The forms of every secret value, longest first.
    forms: Arc<Vec<Vec<u8>>>,
}

impl ScrubbedStderr {
    /// A writer that scrubs `values` (values shorter than the seal's minimum are ignored).
    pub fn new(values: &[String]) -> ScrubbedStderr {
        ScrubbedStderr {
            forms: Arc::new(secret_forms(values)),
        }
    }
}

impl<'a> MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedLine;

    fn make_writer(&'a self) -> ScrubbedLine {
        ScrubbedLine {
            forms: Arc::clone(&self.forms),
            buffer: Vec::new(),
        }
    }
}

/// One event's text, held until the formatter is done with it: a secret split across two
/// `write` calls is still found whole.
pub struct ScrubbedLine {
    forms: Arc<Vec<Vec<u8>>>,
    buffer: Vec<u8>,
}

impl Write for ScrubbedLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let (scrubbed, _) = scrub(&self.buffer, &self.forms);
        self.buffer.clear();
        std::io::stderr().lock().write_all(&scrubbed)
    }
}

impl Drop for ScrubbedLine {
    fn drop(&mut self) {
        // Nowhere to report a failed write of the log itself.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_split_across_writes_is_scrubbed_whole() {
        let stderr = ScrubbedStderr::new(&["hunter2-password".to_owned()]);
        let mut line = stderr.make_writer();
        line.write_all(b"url nats://u:hunter2-").expect("buffered");
        line.write_all(b"password@n1:4222\n").expect("buffered");
        let (scrubbed, n_replaced) = scrub(&line.buffer, &line.forms);
        line.buffer.clear();
        assert_eq!(n_replaced, 1);
        assert_eq!(scrubbed, b"url nats://u:[REDACTED]@n1:4222\n");
    }
}
