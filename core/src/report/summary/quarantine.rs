//! What every report format says about the quarantine a batch's verdict honoured: a mark per
//! unit (in force, or expired) and the batch's lines (what was set aside, what expired, what
//! matched nothing). The unit's own verdict is never changed: a mark is said beside it.

use cowork_schema::quarantine::{Date, QuarantineEntry, QuarantineRecord};

use super::{Summary, UnitReport};

/// How the quarantine covers one unit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum QuarantineMark<'a> {
    /// An entry in force: the unit does not gate the verdict.
    InForce(&'a QuarantineEntry),
    /// Only an expired entry: the unit gates again.
    Expired(&'a QuarantineEntry),
}

impl QuarantineMark<'_> {
    /// `quarantined: <reason> (owner …, until …, link)` or `quarantine EXPIRED on …: …`.
    pub(crate) fn text(&self) -> String {
        let (head, entry) = match self {
            QuarantineMark::InForce(entry) => {
                (format!("quarantined until {}", entry.expires), entry)
            }
            QuarantineMark::Expired(entry) => (
                format!("quarantine EXPIRED on {}, gates again", entry.expires),
                entry,
            ),
        };
        let link = entry
            .link
            .as_ref()
            .map(|link| format!(", {link}"))
            .unwrap_or_default();
        format!("{head}: {} (owner {}{link})", entry.reason, entry.owner)
    }

    /// `true` for an entry in force.
    pub(crate) fn in_force(&self) -> bool {
        matches!(self, QuarantineMark::InForce(_))
    }
}

impl Summary<'_> {
    /// The quarantine the verdict honoured, if any.
    pub(crate) fn quarantine(&self) -> Option<&QuarantineRecord> {
        self.input
            .envelope
            .quarantine
            .as_ref()
            .or(self.input.rollup.quarantine.as_ref())
    }

    /// How the quarantine covers `unit`, with the entry that does.
    pub(crate) fn quarantine_mark(&self, unit: &UnitReport<'_>) -> Option<QuarantineMark<'_>> {
        let record = self.quarantine()?;
        let label = unit.label.to_owned();
        let today = Date::parse(&record.today);
        let matching = || {
            record
                .entries
                .iter()
                .filter(|entry| entry.matches(unit.scenario_name, unit.axes))
        };
        if record.quarantined.contains(&label) {
            let entry = matching()
                .find(|entry| today.is_some_and(|today| !entry.is_expired(today)))
                .or_else(|| matching().next())?;
            Some(QuarantineMark::InForce(entry))
        } else if record.expired.contains(&label) {
            matching().next().map(QuarantineMark::Expired)
        } else {
            None
        }
    }
}

/// The batch's lines about its quarantine, in every format: what it set aside, then each
/// expired unit (loudly) and each entry that matched no unit.
pub(crate) fn quarantine_lines(record: &QuarantineRecord) -> Vec<String> {
    let short = record.sha256.get(..12).unwrap_or(&record.sha256);
    let mut lines = vec![if record.applied.is_empty() {
        format!(
            "Quarantine {} (sha256 {short}, judged on {}): {} unit(s) quarantined, no failure set aside.",
            record.source,
            record.today,
            record.quarantined.len()
        )
    } else {
        format!(
            "Quarantine {} (sha256 {short}, judged on {}): {} unit(s) quarantined; failures set aside, not gating the verdict: {}.",
            record.source,
            record.today,
            record.quarantined.len(),
            record.applied.join(", ")
        )
    }];
    for unit in &record.expired {
        lines.push(format!(
            "WARNING: the quarantine of {unit} has EXPIRED: it gates the verdict again."
        ));
    }
    for entry in &record.unmatched {
        lines.push(format!(
            "Warning: the quarantine entry {entry} matches no unit of this batch."
        ));
    }
    lines
}
