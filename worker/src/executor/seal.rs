//! What a job's artifacts become before they reach the store: secret values scrubbed and
//! every diagnostic file size-capped.
//!
//! The CLI scrubs its result, run and trace files and three logs, but never its stdout
//! envelope, its stderr, `timeline.jsonl`, `status.json`, `mounts.json`, the manifest, the
//! egress log, `work/`, or any log after a signal. So every artifact of a harness job passes
//! through [`scrub`] with the credential values the worker passes to the harness (the values
//! of [`super::harness::SECRET_ENV`] it holds), in each form the CLI itself matches: raw,
//! base64, percent-encoded and JSON-escaped. Diagnostic files are cut at a size limit with a
//! note saying so; the files the fleet reads back (the result, the envelope, the cassette)
//! are never cut.

use cowork_schema::layout::names;

/// What replaces a secret value.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// Values shorter than this are not treated as secrets: scrubbing a two-letter value would
/// mangle every file and protect nothing.
pub const MIN_SECRET_LEN: usize = 8;

/// Artifacts the fleet parses back (rollups, replays): never cut, or they would not parse.
pub const NEVER_CUT: &[&str] = &[
    names::RESULT,
    names::PARTIAL_RESULT,
    names::ENVELOPE,
    names::CASSETTE,
];

/// Every form of each secret value the scrub looks for, longest first (so a base64 form is
/// replaced whole before a raw value inside it could be).
pub fn secret_forms(values: &[String]) -> Vec<Vec<u8>> {
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for value in values.iter().filter(|value| value.len() >= MIN_SECRET_LEN) {
        let json = serde_json::to_string(value).expect("serializing a string cannot fail");
        let candidates = [
            value.as_bytes().to_vec(),
            base64(value.as_bytes()).into_bytes(),
            percent_encode(value).into_bytes(),
            json.as_bytes()[1..json.len() - 1].to_vec(),
        ];
        for form in candidates {
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    forms.sort_by_key(|form| std::cmp::Reverse(form.len()));
    forms
}

/// `bytes` with every occurrence of each of `forms` replaced by [`REDACTED`], and how many
/// were replaced.
pub fn scrub(bytes: &[u8], forms: &[Vec<u8>]) -> (Vec<u8>, usize) {
    let mut current = bytes.to_vec();
    let mut n_replaced = 0;
    for form in forms {
        if form.is_empty() || !current.windows(form.len()).any(|window| window == form) {
            continue;
        }
        let mut out = Vec::with_capacity(current.len());
        let mut at = 0;
        while at < current.len() {
            if current[at..].starts_with(form) {
                out.extend_from_slice(REDACTED);
                at += form.len();
                n_replaced += 1;
            } else {
                out.push(current[at]);
                at += 1;
            }
        }
        current = out;
    }
    (current, n_replaced)
}

/// The first `limit` bytes of a file of `total` bytes, with a note that it was cut; the bytes
/// unchanged when they fit.
pub fn cut(mut bytes: Vec<u8>, limit: usize, total: u64) -> Vec<u8> {
    if total <= limit as u64 && bytes.len() <= limit {
        return bytes;
    }
    bytes.truncate(limit);
    bytes.extend_from_slice(
        format!("\n[cowork-fleet: cut at {limit} of {total} bytes; the rest was not stored]\n")
            .as_bytes(),
    );
    bytes
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for (index, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `encodeURIComponent` of `text`: every byte but the unreserved ones as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_secret_is_replaced() {
        let secret = "sk-ant-canary/+=\"x".to_owned();
        let forms = secret_forms(std::slice::from_ref(&secret));
        let json = serde_json::to_string(&secret).expect("a string serializes");
        let text = format!(
            "raw {secret} b64 {} uri {} json {json} bearer Bearer {secret}",
            base64(secret.as_bytes()),
            percent_encode(&secret)
        );
        let (scrubbed, n_replaced) = scrub(text.as_bytes(), &forms);
        let scrubbed = String::from_utf8(scrubbed).expect("still text");
        assert!(!scrubbed.contains("canary"), "{scrubbed}");
        assert_eq!(n_replaced, 5, "{scrubbed}");
        assert!(scrubbed.contains("Bearer [REDACTED]"), "{scrubbed}");
    }

    #[test]
    fn short_values_are_not_secrets() {
        assert!(secret_forms(&["abc".to_owned()]).is_empty());
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn a_cut_file_says_it_was_cut_and_a_small_one_is_unchanged() {
        assert_eq!(cut(b"abc".to_vec(), 10, 3), b"abc");
        let cut_text = String::from_utf8(cut(b"abcdef".to_vec(), 4, 600)).expect("text");
        assert!(
            cut_text.starts_with("abcd\n[cowork-fleet: cut at 4 of 600 bytes"),
            "{cut_text}"
        );
    }
}
