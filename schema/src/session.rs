//! The session file: the pre-prompt setup a scenario runs under (model, mounts, plugins, MCP).
//!
//! [`Session::from_yaml`] follows `session.schema.json` strictly: every mapping in that schema
//! has `additionalProperties: false`, so an unknown key anywhere is an error naming its dotted
//! key. Enumerated values are checked and kept as their strings. [`Session::path_fields`] lists
//! every path the session names (rule R2 of harness-behaviour.md#job-bundle) so that batch
//! preparation can resolve, check and ship them.

use std::path::Path;

use serde_json::Value;

use crate::load::{
    self, KeyLocations, LoadError, MapView, NodeValue, Position, Reader, UnknownKeys,
};

/// Top-level keys of a session.
pub const SESSION_KEYS: &[&str] = &[
    "model",
    "effort",
    "account_name",
    "extended_thinking",
    "agent_max_turns",
    "permission_mode",
    "permission_parity",
    "folders",
    "projects",
    "trusted_folders",
    "auto_mount_folders",
    "uploads",
    "plugins",
    "skills",
    "mcp",
    "egress",
    "web_fetch",
    "staleness",
    "debug",
    "agent_env",
];

const PLUGINS_KEYS: &[&str] = &[
    "config_dir",
    "marketplaces",
    "local_marketplaces",
    "enabled",
    "local_plugins",
    "remote_plugins",
];

/// Largest integer the schema allows (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// What a path must name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathKind {
    File,
    Dir,
    /// Either; used where the seeds do not say.
    Any,
}

/// What a relative path is resolved against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathAnchor {
    /// The directory of the file that declares it (the session for rule R2, the scenario for rule
    /// R4 of harness-behaviour.md#path-resolution).
    DeclaringFile,
    /// The CLI process's working directory: `projects[].from` (harness-behaviour.md#job-bundle,
    /// harness-behaviour.md#tilde-paths).
    WorkerCwd,
}

/// One path named by an input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathField {
    /// Dotted key, such as `plugins.local_plugins[0]` or `folders[1].from`.
    pub key: String,
    /// The path as written.
    pub value: String,
    pub kind: PathKind,
    pub anchor: PathAnchor,
    /// Where the key was written, when known.
    pub position: Option<Position>,
}

/// A connected folder (`folders[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folder {
    pub from: String,
    /// `r`, `rw` (default) or `rwd`.
    pub mode: Option<String>,
}

/// A project (`projects[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    pub uuid: String,
    pub from: String,
}

/// `plugins:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plugins {
    /// `null` and absent both read as `None`.
    pub config_dir: Option<String>,
    /// Git URLs or local paths.
    pub marketplaces: Vec<String>,
    pub local_marketplaces: Vec<String>,
    pub enabled: Vec<String>,
    pub local_plugins: Vec<String>,
    pub remote_plugins: Vec<String>,
}

/// `skills:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skills {
    pub local: Vec<String>,
    pub suggest_enabled: Option<bool>,
    pub proactive_suggest_enabled: Option<bool>,
}

/// `mcp:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mcp {
    /// `null` and absent both read as `None`.
    pub config: Option<String>,
    pub enabled: Vec<String>,
}

/// `egress:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Egress {
    pub extra_allow: Vec<String>,
    pub unrestricted: Option<bool>,
}

/// `web_fetch:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebFetch {
    pub approved_domains: Vec<String>,
}

/// `staleness:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Staleness {
    pub hash_ignore: Vec<String>,
}

/// `debug:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebugSettings {
    pub max_thinking_tokens: Option<u64>,
    /// `summarized` or `omitted`.
    pub thinking_display: Option<String>,
}

/// `agent_env:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentEnv {
    pub subagent_model: Option<String>,
    /// `auto` or `off`.
    pub tool_search: Option<String>,
    pub disable_experimental_betas: Option<bool>,
}

/// A loaded session file.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    pub model: Option<String>,
    /// `low`, `medium`, `high`, `xhigh`, `max` or `extra`.
    pub effort: Option<String>,
    pub account_name: Option<String>,
    pub extended_thinking: Option<bool>,
    pub agent_max_turns: Option<u64>,
    /// `default`, `acceptEdits`, `plan` or `bypassPermissions`.
    pub permission_mode: Option<String>,
    /// `cowork` or `strict`.
    pub permission_parity: Option<String>,
    pub folders: Vec<Folder>,
    pub projects: Vec<Project>,
    pub trusted_folders: Vec<String>,
    pub auto_mount_folders: Option<bool>,
    pub uploads: Vec<String>,
    pub plugins: Plugins,
    pub skills: Skills,
    pub mcp: Mcp,
    pub egress: Egress,
    pub web_fetch: WebFetch,
    pub staleness: Staleness,
    pub debug: DebugSettings,
    pub agent_env: AgentEnv,
    /// The whole document as JSON, key order preserved.
    pub raw: Value,
    /// Where each key was written.
    pub locations: KeyLocations,
}

impl Session {
    /// Parses and validates a session document. `file` is used in error messages only.
    pub fn from_yaml(text: &str, file: &Path) -> Result<Session, Vec<LoadError>> {
        let root = load::parse_yaml(text, file).map_err(|e| vec![e])?;
        let mut reader = Reader::new(file);
        let Some(map) = reader.mapping(&root, "") else {
            return Err(reader.errors);
        };
        reader.check_keys(map, SESSION_KEYS, UnknownKeys::Reject);
        let session = Session {
            model: reader.opt_string(map, "model"),
            effort: reader.opt_enum(
                map,
                "effort",
                &["low", "medium", "high", "xhigh", "max", "extra"],
            ),
            account_name: reader.opt_string(map, "account_name"),
            extended_thinking: reader.opt_bool(map, "extended_thinking"),
            agent_max_turns: reader.opt_integer(map, "agent_max_turns", 1, MAX_SAFE_INTEGER),
            permission_mode: reader.opt_enum(
                map,
                "permission_mode",
                &["default", "acceptEdits", "plan", "bypassPermissions"],
            ),
            permission_parity: reader.opt_enum(map, "permission_parity", &["cowork", "strict"]),
            folders: read_folders(&mut reader, map),
            projects: read_projects(&mut reader, map),
            trusted_folders: reader.string_list(map, "trusted_folders", true),
            auto_mount_folders: reader.opt_bool(map, "auto_mount_folders"),
            uploads: reader.string_list(map, "uploads", true),
            plugins: read_plugins(&mut reader, map),
            skills: read_skills(&mut reader, map),
            mcp: read_mcp(&mut reader, map),
            egress: read_egress(&mut reader, map),
            web_fetch: read_web_fetch(&mut reader, map),
            staleness: read_staleness(&mut reader, map),
            debug: read_debug(&mut reader, map),
            agent_env: read_agent_env(&mut reader, map),
            raw: root.to_json(),
            locations: KeyLocations::of(&root),
        };
        if reader.errors.is_empty() {
            Ok(session)
        } else {
            Err(reader.errors)
        }
    }

    /// Every path the session names (rule R2 of harness-behaviour.md#path-resolution), in a fixed
    /// order: `uploads[]` (files), `trusted_folders[]`, `folders[].from`, `skills.local[]` (dirs),
    /// `mcp.config` (file), `plugins.config_dir`, local `plugins.marketplaces[]` (URLs and `git@…`
    /// are left out), `plugins.local_plugins[]`, `plugins.local_marketplaces[]`,
    /// `plugins.remote_plugins[]` (dirs), then `projects[].from` (anchored at the worker's cwd, not
    /// the session file).
    pub fn path_fields(&self) -> Vec<PathField> {
        let mut out = Vec::new();
        let mut push = |key: String, value: &str, kind: PathKind, anchor: PathAnchor| {
            out.push(PathField {
                position: self.locations.get(&key),
                key,
                value: value.to_owned(),
                kind,
                anchor,
            });
        };
        let file = PathAnchor::DeclaringFile;
        let list = |name: &str, values: &[String]| -> Vec<(String, String)> {
            values
                .iter()
                .enumerate()
                .map(|(i, v)| (load::index_path(name, i), v.clone()))
                .collect()
        };
        for (key, value) in list("uploads", &self.uploads) {
            push(key, &value, PathKind::File, file);
        }
        for (key, value) in list("trusted_folders", &self.trusted_folders) {
            push(key, &value, PathKind::Dir, file);
        }
        for (index, folder) in self.folders.iter().enumerate() {
            push(
                format!("folders[{index}].from"),
                &folder.from,
                PathKind::Dir,
                file,
            );
        }
        for (key, value) in list("skills.local", &self.skills.local) {
            push(key, &value, PathKind::Dir, file);
        }
        if let Some(config) = &self.mcp.config {
            push("mcp.config".to_owned(), config, PathKind::File, file);
        }
        if let Some(config_dir) = &self.plugins.config_dir {
            push(
                "plugins.config_dir".to_owned(),
                config_dir,
                PathKind::Dir,
                file,
            );
        }
        for (key, value) in list("plugins.marketplaces", &self.plugins.marketplaces) {
            if !is_remote_marketplace(&value) {
                // A local marketplace may be a directory or its marketplace file.
                push(key, &value, PathKind::Any, file);
            }
        }
        for (key, value) in list("plugins.local_plugins", &self.plugins.local_plugins) {
            push(key, &value, PathKind::Dir, file);
        }
        for (key, value) in list(
            "plugins.local_marketplaces",
            &self.plugins.local_marketplaces,
        ) {
            push(key, &value, PathKind::Dir, file);
        }
        for (key, value) in list("plugins.remote_plugins", &self.plugins.remote_plugins) {
            push(key, &value, PathKind::Dir, file);
        }
        for (index, project) in self.projects.iter().enumerate() {
            push(
                format!("projects[{index}].from"),
                &project.from,
                PathKind::Dir,
                PathAnchor::WorkerCwd,
            );
        }
        out
    }
}

/// True for marketplace entries that name a remote repository rather than a local path: URLs
/// (`scheme://…`) and scp-style `git@host:…`.
pub fn is_remote_marketplace(value: &str) -> bool {
    value.contains("://") || value.starts_with("git@")
}

/// Reads an optional nested mapping, checking its keys; `None` when absent or not a mapping.
fn sub_map<'n>(
    reader: &mut Reader<'_>,
    map: MapView<'n>,
    name: &str,
    path: &'n str,
    allowed: &[&str],
) -> Option<MapView<'n>> {
    let node = map.get(name)?;
    let view = reader.mapping(node, path)?;
    reader.check_keys(view, allowed, UnknownKeys::Reject);
    Some(view)
}

fn read_folders(reader: &mut Reader<'_>, map: MapView<'_>) -> Vec<Folder> {
    read_objects(reader, map, "folders", |reader, entry| {
        reader.check_keys(entry, &["from", "mode"], UnknownKeys::Reject);
        let from = reader_required(reader, entry, "from");
        let from = non_empty(reader, entry, from);
        let mode = reader.opt_enum(entry, "mode", &["r", "rw", "rwd"]);
        from.map(|from| Folder { from, mode })
    })
}

fn read_projects(reader: &mut Reader<'_>, map: MapView<'_>) -> Vec<Project> {
    read_objects(reader, map, "projects", |reader, entry| {
        reader.check_keys(entry, &["uuid", "from"], UnknownKeys::Reject);
        let uuid = reader_required(reader, entry, "uuid");
        let uuid = non_empty(reader, entry, uuid);
        let from = reader_required(reader, entry, "from");
        let from = non_empty(reader, entry, from);
        Some(Project {
            uuid: uuid?,
            from: from?,
        })
    })
}

/// A required string field, remembered with its key for [`non_empty`].
fn reader_required(
    reader: &mut Reader<'_>,
    entry: MapView<'_>,
    name: &'static str,
) -> Option<(&'static str, String)> {
    reader.required_string(entry, name).map(|v| (name, v))
}

/// Checks `minLength: 1` on a value read by [`reader_required`].
fn non_empty(
    reader: &mut Reader<'_>,
    entry: MapView<'_>,
    value: Option<(&'static str, String)>,
) -> Option<String> {
    let (name, value) = value?;
    if value.is_empty() {
        let position = entry.get(name).and_then(|n| n.position);
        reader.error(
            position,
            &entry.child_path(name),
            "must not be empty".to_owned(),
        );
        return None;
    }
    Some(value)
}

/// Reads a sequence of mappings under `name` with `read_one` per entry.
fn read_objects<T>(
    reader: &mut Reader<'_>,
    map: MapView<'_>,
    name: &str,
    mut read_one: impl FnMut(&mut Reader<'_>, MapView<'_>) -> Option<T>,
) -> Vec<T> {
    let Some(node) = map.get(name) else {
        return Vec::new();
    };
    let NodeValue::Sequence(items) = &node.value else {
        reader.error(
            node.position,
            name,
            format!("expected a sequence of mappings, got {}", node.kind_name()),
        );
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let path = load::index_path(name, index);
        let Some(entry) = reader.mapping(item, &path) else {
            continue;
        };
        if let Some(value) = read_one(reader, entry) {
            out.push(value);
        }
    }
    out
}

fn read_plugins(reader: &mut Reader<'_>, map: MapView<'_>) -> Plugins {
    let Some(plugins) = sub_map(reader, map, "plugins", "plugins", PLUGINS_KEYS) else {
        return Plugins::default();
    };
    Plugins {
        config_dir: reader.nullable_string(plugins, "config_dir", true),
        marketplaces: reader.string_list(plugins, "marketplaces", true),
        local_marketplaces: reader.string_list(plugins, "local_marketplaces", true),
        enabled: reader.string_list(plugins, "enabled", true),
        local_plugins: reader.string_list(plugins, "local_plugins", true),
        remote_plugins: reader.string_list(plugins, "remote_plugins", true),
    }
}

fn read_skills(reader: &mut Reader<'_>, map: MapView<'_>) -> Skills {
    let allowed = ["local", "suggest_enabled", "proactive_suggest_enabled"];
    let Some(skills) = sub_map(reader, map, "skills", "skills", &allowed) else {
        return Skills::default();
    };
    Skills {
        local: reader.string_list(skills, "local", true),
        suggest_enabled: reader.opt_bool(skills, "suggest_enabled"),
        proactive_suggest_enabled: reader.opt_bool(skills, "proactive_suggest_enabled"),
    }
}

fn read_mcp(reader: &mut Reader<'_>, map: MapView<'_>) -> Mcp {
    let Some(mcp) = sub_map(reader, map, "mcp", "mcp", &["config", "enabled"]) else {
        return Mcp::default();
    };
    Mcp {
        config: reader.nullable_string(mcp, "config", true),
        enabled: reader.string_list(mcp, "enabled", false),
    }
}

fn read_egress(reader: &mut Reader<'_>, map: MapView<'_>) -> Egress {
    let Some(egress) = sub_map(
        reader,
        map,
        "egress",
        "egress",
        &["extra_allow", "unrestricted"],
    ) else {
        return Egress::default();
    };
    Egress {
        extra_allow: reader.string_list(egress, "extra_allow", true),
        unrestricted: reader.opt_bool(egress, "unrestricted"),
    }
}

fn read_web_fetch(reader: &mut Reader<'_>, map: MapView<'_>) -> WebFetch {
    let Some(web_fetch) = sub_map(reader, map, "web_fetch", "web_fetch", &["approved_domains"])
    else {
        return WebFetch::default();
    };
    WebFetch {
        approved_domains: reader.string_list(web_fetch, "approved_domains", false),
    }
}

fn read_staleness(reader: &mut Reader<'_>, map: MapView<'_>) -> Staleness {
    let Some(staleness) = sub_map(reader, map, "staleness", "staleness", &["hash_ignore"]) else {
        return Staleness::default();
    };
    Staleness {
        hash_ignore: reader.string_list(staleness, "hash_ignore", true),
    }
}

fn read_debug(reader: &mut Reader<'_>, map: MapView<'_>) -> DebugSettings {
    let allowed = ["max_thinking_tokens", "thinking_display"];
    let Some(debug) = sub_map(reader, map, "debug", "debug", &allowed) else {
        return DebugSettings::default();
    };
    DebugSettings {
        max_thinking_tokens: reader.opt_integer(debug, "max_thinking_tokens", 1, MAX_SAFE_INTEGER),
        thinking_display: reader.opt_enum(debug, "thinking_display", &["summarized", "omitted"]),
    }
}

fn read_agent_env(reader: &mut Reader<'_>, map: MapView<'_>) -> AgentEnv {
    let allowed = [
        "subagent_model",
        "tool_search",
        "disable_experimental_betas",
    ];
    let Some(agent_env) = sub_map(reader, map, "agent_env", "agent_env", &allowed) else {
        return AgentEnv::default();
    };
    AgentEnv {
        subagent_model: reader.opt_string(agent_env, "subagent_model"),
        tool_search: reader.opt_enum(agent_env, "tool_search", &["auto", "off"]),
        disable_experimental_betas: reader.opt_bool(agent_env, "disable_experimental_betas"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `text` as `se.yaml` and compares the rendered errors (or `ok`) with `expect`.
    fn check(text: &str, expect: &str) {
        let got = match Session::from_yaml(text, Path::new("se.yaml")) {
            Ok(_) => "ok".to_owned(),
            Err(errors) => errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        };
        assert_eq!(got, expect, "input {text:?}");
    }

    #[test]
    fn strict_everywhere() {
        check("model: m\n", "ok");
        check("", "se.yaml:1:1: expected a mapping, got null");
        check(
            "plugins:\n  local_plugin: [x]\n",
            "se.yaml:2:3: plugins.local_plugin: unknown key `local_plugin`, did you mean `local_plugins`?",
        );
        check(
            "plugins:\n  local_plugins: x\n",
            "se.yaml:2:18: plugins.local_plugins: expected a sequence of strings, got a string",
        );
        check(
            "plugins:\n  local_plugins: ['']\n",
            "se.yaml:2:19: plugins.local_plugins[0]: must not be empty",
        );
        check(
            "folders:\n  - {from: d, mode: x}\n",
            "se.yaml:2:21: folders[0].mode: invalid value \"x\"; expected one of: r, rw, rwd",
        );
        check(
            "folders:\n  - {mode: r}\n",
            "se.yaml:2:5: folders[0].from: missing required field",
        );
        check(
            "effort: huge\nmcp: {config: 1}\n",
            "se.yaml:1:9: effort: invalid value \"huge\"; expected one of: low, medium, high, xhigh, max, extra\nse.yaml:2:15: mcp.config: expected a string, got an integer",
        );
        check(
            "debug: {max_thinking_tokens: -1}\n",
            "se.yaml:1:30: debug.max_thinking_tokens: expected an integer from 1 to 9007199254740991, got -1",
        );
        check("plugins: {config_dir: null}\nmcp: {config: ~}\n", "ok");
    }

    #[test]
    fn path_fields_cover_rule_r2() {
        let text = "uploads: [u.csv]\ntrusted_folders: [t]\nfolders:\n  - from: f\nskills:\n  local: [s]\n\
                    mcp:\n  config: m.json\nplugins:\n  config_dir: c\n  marketplaces: [https://x/y.git, git@h:r, ./mk]\n  \
                    local_plugins: [lp]\n  local_marketplaces: [lm]\n  remote_plugins: [rp]\nprojects:\n  - {uuid: u, from: p}\n";
        let session = Session::from_yaml(text, Path::new("se.yaml")).expect("valid session");
        let fields: Vec<String> = session
            .path_fields()
            .iter()
            .map(|f| {
                format!(
                    "{}={} {:?} {:?} @{}",
                    f.key,
                    f.value,
                    f.kind,
                    f.anchor,
                    f.position.map_or(0, |p| p.line)
                )
            })
            .collect();
        assert_eq!(
            fields,
            [
                "uploads[0]=u.csv File DeclaringFile @1",
                "trusted_folders[0]=t Dir DeclaringFile @2",
                "folders[0].from=f Dir DeclaringFile @4",
                "skills.local[0]=s Dir DeclaringFile @6",
                "mcp.config=m.json File DeclaringFile @8",
                "plugins.config_dir=c Dir DeclaringFile @10",
                "plugins.marketplaces[2]=./mk Any DeclaringFile @11",
                "plugins.local_plugins[0]=lp Dir DeclaringFile @12",
                "plugins.local_marketplaces[0]=lm Dir DeclaringFile @13",
                "plugins.remote_plugins[0]=rp Dir DeclaringFile @14",
                "projects[0].from=p Dir WorkerCwd @16",
            ]
        );
    }
}
