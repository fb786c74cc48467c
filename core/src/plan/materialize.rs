//! Materializing matrix cells (harness-behaviour.md#choice-c1, strategy A) and the bundle-relative
//! path arithmetic it needs.
//!
//! `run` has no flag that overrides a baseline, a model or a skill dir, so a cell with axes runs
//! a derived scenario written next to the original, as JSON (JSON is YAML):
//! `<scenario dir>/.cowork-cell-<index>-<scenario basename>`. It is the original document with
//! `name:` set to the original effective name (harness-behaviour.md#scenario-name, so the run
//! directory, cassette and rollup keep their name), `baseline:` replaced when the cell has a
//! baseline, and — when the cell has a model or a skill dir — `session:` pointing to a derived
//! session written next to the original session: `<session dir>/.cowork-cell-<index>-<session
//! basename>`, with `model` replaced and `plugins.local_plugins[0]` replaced by the candidate,
//! relative to the session's directory. Because both files sit beside the originals, every other
//! relative path in them resolves exactly as before. An `(inline)` session with a model axis
//! becomes a derived session holding only `model`, next to the scenario.
//!
//! The matrix preconditions of harness-behaviour.md#matrix-axes are checked here: a skill-dir
//! candidate whose basename differs from the replaced entry's basename (the mount name derives from
//! it) is a cell error, not a usage error — the cell gets no jobs and the other cells still run.
//! So is a session `effort:` the cell's model does not take under the cell's baseline
//! ([`crate::effort`]), which the harness refuses for that cell alone.

use serde_json::{Map, Value};

use cowork_schema::job::CellAxes;

use super::DerivedFile;
use crate::prepared::PreparedScenario;

/// Prefix of every derived file name.
pub const DERIVED_PREFIX: &str = ".cowork-cell-";

/// What a cell runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaterializedCell {
    /// Bundle path of the scenario the cell's jobs run.
    pub scenario_file: String,
    /// Files to add to the bundle (none for a cell without axes).
    pub derived: Vec<DerivedFile>,
}

/// Materializes cell `index` of a matrix over `scenario`. `resolved_skill_dir` is the
/// bundle-relative directory of the cell's skill-dir candidate. `Err` is the cell error.
pub fn materialize_cell(
    index: u32,
    axes: &CellAxes,
    resolved_skill_dir: Option<&str>,
    scenario: &PreparedScenario,
) -> Result<MaterializedCell, String> {
    // The harness refuses the cell's run before staging anything: a cell error, as in the CLI.
    if let Some(refusal) = crate::effort::unit_effort_refusal(
        scenario,
        axes.model.as_deref(),
        axes.baseline.as_deref(),
    ) {
        return Err(refusal.to_string());
    }
    if axes.baseline.is_none() && axes.model.is_none() && axes.skill_dir.is_none() {
        return Ok(MaterializedCell {
            scenario_file: scenario.rel_path.clone(),
            derived: Vec::new(),
        });
    }
    let scenario_dir = dir_of(&scenario.rel_path);
    let mut derived = Vec::new();
    let mut session_value = None;
    if axes.model.is_some() || axes.skill_dir.is_some() {
        let (file, value) = derive_session(index, axes, resolved_skill_dir, scenario)?;
        derived.push(file);
        session_value = Some(value);
    }

    let Value::Object(original) = &scenario.scenario.raw else {
        return Err(format!(
            "{}: the scenario document is not a mapping",
            scenario.rel_path
        ));
    };
    // `name:` first when it was absent, so the derived file reads naturally.
    let mut document = Map::new();
    if !original.contains_key("name") {
        document.insert("name".to_owned(), Value::Null);
    }
    for (key, value) in original {
        document.insert(key.clone(), value.clone());
    }
    document.insert("name".to_owned(), Value::String(scenario.name.clone()));
    if let Some(baseline) = &axes.baseline {
        document.insert("baseline".to_owned(), Value::String(baseline.clone()));
    }
    if let Some(session) = session_value {
        document.insert("session".to_owned(), Value::String(session));
    }
    let path = join_rel(
        scenario_dir,
        &format!("{DERIVED_PREFIX}{index}-{}", base_of(&scenario.rel_path)),
    );
    derived.insert(
        0,
        DerivedFile {
            path: path.clone(),
            contents: json_bytes(&Value::Object(document)),
        },
    );
    Ok(MaterializedCell {
        scenario_file: path,
        derived,
    })
}

/// Writes the cell's derived session; returns it and the `session:` value that reaches it from
/// the scenario's directory.
fn derive_session(
    index: u32,
    axes: &CellAxes,
    resolved_skill_dir: Option<&str>,
    scenario: &PreparedScenario,
) -> Result<(DerivedFile, String), String> {
    let Some(prepared) = &scenario.session else {
        if axes.skill_dir.is_some() {
            return Err(
                "skill_dirs needs a session declaring exactly one plugins.local_plugins entry; the scenario's \
                 session is (inline)"
                    .to_owned(),
            );
        }
        let name = format!("{DERIVED_PREFIX}{index}-session.yaml");
        let mut document = Map::new();
        if let Some(model) = &axes.model {
            document.insert("model".to_owned(), Value::String(model.clone()));
        }
        let file = DerivedFile {
            path: join_rel(dir_of(&scenario.rel_path), &name),
            contents: json_bytes(&Value::Object(document)),
        };
        return Ok((file, name));
    };

    let session_dir = dir_of(&prepared.rel_path);
    let mut document = prepared.session.raw.clone();
    let Value::Object(map) = &mut document else {
        return Err(format!(
            "{}: the session document is not a mapping",
            prepared.rel_path
        ));
    };
    if let Some(model) = &axes.model {
        map.insert("model".to_owned(), Value::String(model.clone()));
    }
    if let Some(declared) = &axes.skill_dir {
        let entries = &prepared.session.plugins.local_plugins;
        let [entry] = entries.as_slice() else {
            return Err(format!(
                "skill_dirs needs exactly one plugins.local_plugins entry in {}, found {}",
                prepared.rel_path,
                entries.len()
            ));
        };
        let Some(candidate) = resolved_skill_dir else {
            return Err(format!(
                "skill_dirs candidate {declared:?} was not resolved"
            ));
        };
        let entry_resolved = normalize_rel(session_dir, entry)
            .unwrap_or_else(|| entry.trim_end_matches('/').to_owned());
        let entry_base = base_of(&entry_resolved);
        let candidate_base = base_of(candidate);
        if entry_base != candidate_base {
            return Err(format!(
                "skill_dirs candidate {declared:?} has basename {candidate_base:?}, but it replaces the session's \
                 plugins.local_plugins entry {entry:?} with basename {entry_base:?}; the plugin's mount name \
                 derives from the basename, so they must be equal"
            ));
        }
        let replacement = Value::String(relative_path(session_dir, candidate));
        let slot = map
            .get_mut("plugins")
            .and_then(|plugins| plugins.get_mut("local_plugins"))
            .and_then(|list| list.get_mut(0));
        match slot {
            Some(slot) => *slot = replacement,
            None => {
                return Err(format!(
                    "{}: plugins.local_plugins[0] is missing",
                    prepared.rel_path
                ));
            }
        }
    }
    let name = format!("{DERIVED_PREFIX}{index}-{}", base_of(&prepared.rel_path));
    let file = DerivedFile {
        path: join_rel(session_dir, &name),
        contents: json_bytes(&document),
    };
    // Replace only the last component of the authored value, so the derived session is reached
    // through the same directories as the original.
    let authored = scenario.scenario.session.as_deref().unwrap_or_default();
    let value = match authored.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/{name}"),
        None => name,
    };
    Ok((file, value))
}

/// Pretty JSON with a final newline.
fn json_bytes(value: &Value) -> Vec<u8> {
    let mut bytes = cowork_schema::json_number::to_vec_pretty(value)
        .expect("a serde_json::Value always serializes");
    bytes.push(b'\n');
    bytes
}

/// Resolves `value` against the bundle-relative directory `dir`, lexically (`.` dropped, `..`
/// applied, empty components ignored); `None` when it climbs above the bundle root.
pub fn normalize_rel(dir: &str, value: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in value.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// The relative path that leads from the bundle-relative directory `from_dir` to `to`
/// (`sessions` → `variants/v1/skill` gives `../variants/v1/skill`; `.` for the same place).
pub fn relative_path(from_dir: &str, to: &str) -> String {
    let from: Vec<&str> = from_dir.split('/').filter(|p| !p.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|p| !p.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// The directory part of a bundle-relative path (`""` at the top).
pub fn dir_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The last component of a bundle-relative path.
pub fn base_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or(rel, |(_, base)| base)
}

/// `dir/name`, or `name` at the top.
pub fn join_rel(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}
