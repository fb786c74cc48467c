//! The quarantine a batch carries: its file's text read and checked into a
//! [`QuarantineSpec`] (with the sha256 of its canonical entries), and the warnings a planned
//! batch gives about it (expired entries, entries that match no unit).
//!
//! The caller reads the file (from the working tree or a git ref) and takes "today" from its
//! clock; nothing here reads either.

use std::path::PathBuf;

use cowork_core::plan::Plan;
use cowork_core::reduce::BatchShape;
use cowork_schema::quarantine::{Date, QuarantineSpec, canonical_entries, parse_quarantine};
use sha2::Digest;

/// A quarantine file as read by the caller.
#[derive(Clone, Debug)]
pub struct QuarantineText {
    /// Where it was read, as the envelope names it (`quarantine.yaml`, a path, `REF:path`).
    pub source: String,
    /// The name errors give (a path, or `REF:path`).
    pub file: PathBuf,
    pub text: String,
    /// The day expiry is judged on.
    pub today: Date,
}

/// Reads and checks a quarantine file; every problem names the file, the line and the fix.
pub fn quarantine_spec(input: &QuarantineText) -> Result<QuarantineSpec, Vec<String>> {
    let entries = parse_quarantine(&input.text, &input.file, input.today)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    Ok(QuarantineSpec {
        source: input.source.clone(),
        today: input.today.to_string(),
        sha256: entries_sha256(&canonical_entries(&entries)),
        entries,
    })
}

/// sha256 (hex) of the canonical entries.
pub fn entries_sha256(canonical: &str) -> String {
    sha2::Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Checks a submitted spec's quarantine: a readable `today` and a hash that matches its entries.
pub fn check_submitted(spec: &QuarantineSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if Date::parse(&spec.today).is_none() {
        problems.push(format!(
            "spec.flags.quarantine.today: {:?} is not a date (YYYY-MM-DD)",
            spec.today
        ));
    }
    let expected = entries_sha256(&canonical_entries(&spec.entries));
    if spec.sha256 != expected {
        problems.push(format!(
            "spec.flags.quarantine.sha256: {} does not match its entries (sha256 {expected})",
            spec.sha256
        ));
    }
    problems
}

/// The warnings a planned batch gives about its quarantine: entries that expired (their units
/// gate again) and entries that match no unit.
pub fn quarantine_notes(plan: &Plan) -> Vec<String> {
    let Some(spec) = &plan.flags.quarantine else {
        return Vec::new();
    };
    let shape = BatchShape::from_summary(&plan.summary(), &plan.flags);
    let Some(matched) = shape.quarantine else {
        return Vec::new();
    };
    let record = matched.record(&[]);
    let mut notes = Vec::new();
    let today = Date::parse(&spec.today);
    for entry in &spec.entries {
        if today.is_some_and(|today| entry.is_expired(today)) {
            let place = entry
                .line
                .map(|line| format!(":{line}"))
                .unwrap_or_default();
            notes.push(format!(
                "WARNING: {}{place}: the quarantine of {} (owner {}) expired on {}: its units \
                 gate the verdict again; fix them, or renew the entry with a new expires date",
                spec.source,
                entry.label(),
                entry.owner,
                entry.expires
            ));
        }
    }
    for label in &record.unmatched {
        let line = spec
            .entries
            .iter()
            .find(|entry| &entry.label() == label)
            .and_then(|entry| entry.line)
            .map(|line| format!(":{line}"))
            .unwrap_or_default();
        notes.push(format!(
            "warning: {}{line}: the quarantine entry {label} matches no unit of this batch; \
             check its scenario name and cell, or remove it",
            spec.source
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(body: &str) -> QuarantineText {
        QuarantineText {
            source: "quarantine.yaml".into(),
            file: PathBuf::from("quarantine.yaml"),
            text: body.into(),
            today: Date::parse("2026-12-06").expect("a date"),
        }
    }

    #[test]
    fn a_spec_carries_its_day_and_a_hash_the_coordinator_checks() {
        let body = "quarantine:\n  - scenario: csv\n    owner: o\n    reason: r\n    expires: 2027-01-01\n";
        let spec = quarantine_spec(&text(body)).expect("valid");
        assert_eq!(spec.today, "2026-12-06");
        assert_eq!(spec.sha256.len(), 64);
        assert!(check_submitted(&spec).is_empty());
        // The same entries on other lines hash alike: the hash is over the entries.
        let moved = quarantine_spec(&text(&format!("# note\n{body}"))).expect("valid");
        assert_eq!(moved.sha256, spec.sha256);
        let mut tampered = spec.clone();
        tampered.entries[0].expires = "2027-03-01".into();
        assert!(check_submitted(&tampered)[0].contains("does not match its entries"));
        let undated = QuarantineSpec {
            today: "tomorrow".into(),
            ..spec
        };
        assert!(check_submitted(&undated)[0].contains("is not a date"));
        let errors = quarantine_spec(&text("quarantine:\n  - scenario: csv\n"))
            .expect_err("an entry without owner, reason or expires");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("quarantine.yaml:2:5: quarantine[0].owner")),
            "{errors:?}"
        );
    }
}
