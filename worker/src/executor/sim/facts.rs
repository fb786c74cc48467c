//! What a simulated run is regardless of its draws (command, scenario, fidelity, axes, skill,
//! label, run dir), and the keys of a result that come from it alone.

use cowork_schema::ids::UnitRef;
use cowork_schema::job::{JobCommand, JobSpec, Tier};
use cowork_schema::json_number;
use serde_json::{Map, Value, json};

use super::SIM_GENERATOR;

/// Model named in results when the cell has no model axis.
const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// Skill offered in results when the cell has no skill-dir axis.
const DEFAULT_SKILL: &str = "sim-skill";

/// The `models` list of a result: the cell's model axis or the default.
pub(super) fn models_of(facts: &RunFacts) -> Vec<String> {
    vec![facts.model.clone()]
}

/// The part of a run that does not depend on the drawn outcome.
#[derive(Clone, Debug)]
pub(super) struct RunFacts {
    pub(super) command: JobCommand,
    scenario: String,
    fidelity: &'static str,
    baseline: String,
    pub(super) model: String,
    pub(super) skill: String,
    pub(super) ablated: bool,
    label: Option<String>,
    pub(super) replay: bool,
    out_dir: String,
    /// The scenario's authored assertions, when the simulator could read the scenario.
    pub(super) authored: Option<Vec<(String, Map<String, Value>)>>,
}

impl RunFacts {
    pub(super) fn new(job: &JobSpec) -> RunFacts {
        let axes = job.axes.as_ref();
        let skill = axes
            .and_then(|axes| axes.skill_dir.as_deref())
            .and_then(|dir| dir.trim_end_matches('/').rsplit('/').next())
            .filter(|name| !name.is_empty())
            .unwrap_or(DEFAULT_SKILL)
            .to_owned();
        let unit = match job.unit {
            UnitRef::File(index) => format!("f{index}"),
            UnitRef::Cell(index) => format!("c{index}"),
        };
        RunFacts {
            command: job.command,
            scenario: job.scenario_name.clone(),
            fidelity: match job.tier {
                Tier::Container | Tier::Replay => "container",
                Tier::Hostloop => "hostloop",
                Tier::Microvm => "microvm",
                Tier::Protocol => "protocol",
            },
            baseline: axes
                .and_then(|axes| axes.baseline.clone())
                .unwrap_or_else(|| "latest".to_owned()),
            model: axes
                .and_then(|axes| axes.model.clone())
                .unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
            skill,
            ablated: job
                .forwarded_flags
                .iter()
                .any(|flag| flag == "--ablate-skill"),
            label: job
                .forwarded_flags
                .iter()
                .position(|flag| flag == "--label")
                .and_then(|at| job.forwarded_flags.get(at + 1))
                .cloned(),
            replay: job.command == JobCommand::Replay,
            out_dir: format!(
                "sim://{}/{unit}/{}",
                job.scenario_name,
                job.repeat_index.unwrap_or(0)
            ),
            authored: None,
        }
    }

    /// The leading keys of a result, in the CLI's order.
    pub(super) fn head(&self, result: &str) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("generator".into(), json!(SIM_GENERATOR));
        map.insert("simulated".into(), json!(true));
        map.insert("mode".into(), json!("run"));
        map.insert("command".into(), json!(self.command.as_str()));
        // `lane` is where the run executed (`local` or `remote`), not the verdict lane.
        map.insert("lane".into(), json!("local"));
        map.insert("scenario".into(), json!(self.scenario));
        map.insert("fidelity".into(), json!(self.fidelity));
        map.insert("baseline".into(), json!(self.baseline));
        map.insert("result".into(), json!(result));
        map
    }

    /// Decisions, models, context and egress.
    pub(super) fn insert_common(&self, map: &mut Map<String, Value>, models: &[String]) {
        map.insert("decisions".into(), json!([]));
        map.insert("models".into(), json!(models));
        let available: Vec<Value> = if self.ablated {
            Vec::new()
        } else {
            vec![json!({"id": self.skill})]
        };
        map.insert("context".into(), json!({"availableSkills": available}));
        map.insert("egress".into(), json!([]));
    }

    /// Label, ablation, fidelity and run dir.
    pub(super) fn insert_tail(&self, map: &mut Map<String, Value>) {
        if let Some(label) = &self.label {
            map.insert("runLabel".into(), json!(label));
        }
        if self.ablated {
            map.insert("ablated".into(), json!(true));
        }
        map.insert("effectiveFidelity".into(), json!(self.fidelity));
        map.insert("outDir".into(), json!(self.out_dir));
    }
}

#[derive(Clone, Copy, Debug)]
/// Cost and usage of a run that reports them.
pub(super) struct Telemetry {
    pub(super) usd: f64,
    pub(super) input_tokens: u64,
    pub(super) output_tokens: u64,
}

/// Adds `usage` and `cost` when the run reports them.
pub(super) fn insert_telemetry(map: &mut Map<String, Value>, telemetry: Option<&Telemetry>) {
    if let Some(telemetry) = telemetry {
        map.insert(
            "usage".into(),
            json!({
                "input_tokens": telemetry.input_tokens,
                "output_tokens": telemetry.output_tokens,
                "turns": 1,
            }),
        );
        map.insert(
            "cost".into(),
            json!({"usd": json_number::to_value(telemetry.usd)}),
        );
    }
}
