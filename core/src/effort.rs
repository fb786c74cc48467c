//! Which `effort:` a session may set for its model, as cowork-harness 2.0.0 decides it before it
//! stages anything (harness-behaviour.md#effort-selectors).
//!
//! The harness reads the effort selectors of the model from the run's baseline. Its packaged
//! baselines from desktop-1.19367.0 on list them; older ones list none, and then any effort
//! passes. A model the baseline lists with no levels (claude-haiku-4-5, claude-sonnet-4-5) has
//! no selector, and an explicit `effort:` is refused; a model listed with levels takes only
//! those; a model the list does not name takes anything, except the fable/mythos family, which
//! takes the levels of its pattern. `extra` is read as `xhigh` first. The words of each refusal
//! are the harness's own, so the fleet refuses at validation what the harness would refuse at
//! the start of every run.

use crate::prepared::{InputError, PreparedScenario};

/// The baselines cowork-harness 2.0.0 ships, oldest first; `latest` is the last.
const PACKAGED_BASELINES: &[[u32; 3]] = &[
    [1, 11847, 5],
    [1, 12603, 1],
    [1, 13576, 1],
    [1, 14271, 0],
    [1, 15200, 0],
    [1, 15962, 0],
    [1, 15962, 1],
    [1, 17377, 1],
    [1, 17377, 2],
    [1, 18286, 0],
    [1, 18286, 2],
    [1, 19367, 0],
    [1, 20186, 0],
    [1, 20186, 1],
    [1, 20186, 9],
    [1, 21459, 0],
    [1, 22209, 3],
    [1, 24012, 0],
    [1, 24012, 1],
    [1, 24012, 9],
    [1, 24012, 11],
    [1, 25927, 0],
    [1, 26832, 0],
    [1, 28929, 0],
    [1, 30096, 1],
    [1, 32352, 0],
    [1, 32885, 1],
    [1, 34493, 1],
];

const FOUR_LEVELS: &[&str] = &["low", "medium", "high", "max"];
const FIVE_LEVELS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

/// One model of the baselines' effort table: its levels (`None`: no selector) and the first
/// packaged baseline that lists it.
struct ModelEffort {
    model: &'static str,
    levels: Option<&'static [&'static str]>,
    since: [u32; 3],
}

const FIRST_TABLE: [u32; 3] = [1, 19367, 0];

const MODELS: &[ModelEffort] = &[
    ModelEffort {
        model: "claude-haiku-4-5",
        levels: None,
        since: FIRST_TABLE,
    },
    ModelEffort {
        model: "claude-sonnet-4-5",
        levels: None,
        since: FIRST_TABLE,
    },
    ModelEffort {
        model: "claude-sonnet-4-6",
        levels: Some(FOUR_LEVELS),
        since: FIRST_TABLE,
    },
    ModelEffort {
        model: "claude-opus-4-6",
        levels: Some(FOUR_LEVELS),
        since: FIRST_TABLE,
    },
    ModelEffort {
        model: "claude-opus-4-7",
        levels: Some(FIVE_LEVELS),
        since: FIRST_TABLE,
    },
    ModelEffort {
        model: "claude-opus-4-8",
        levels: Some(FIVE_LEVELS),
        since: FIRST_TABLE,
    },
    ModelEffort {
        model: "claude-sonnet-5",
        levels: Some(FIVE_LEVELS),
        since: [1, 24012, 0],
    },
    ModelEffort {
        model: "claude-opus-5",
        levels: Some(FIVE_LEVELS),
        since: [1, 24012, 9],
    },
];

/// The packaged baseline a scenario's `baseline:` names (absent means `latest`), or `None` for
/// an absolute path or a name the harness does not ship: their tables are unknown here, and
/// the harness itself reports a name it cannot load.
fn packaged_baseline(baseline: Option<&str>) -> Option<[u32; 3]> {
    let name = baseline.unwrap_or("latest");
    if name == "latest" {
        return PACKAGED_BASELINES.last().copied();
    }
    let version = name.strip_prefix("desktop-")?;
    let version = version.strip_suffix(".json").unwrap_or(version);
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    let parsed = [parts.next()??, parts.next()??, parts.next()??];
    if parts.next().is_some() {
        return None;
    }
    PACKAGED_BASELINES.contains(&parsed).then_some(parsed)
}

/// `true` for a model id of the fable/mythos family, which the baselines' regex default covers
/// (`^(?:claude-)?(?:fable|mythos)(?:-|$)`).
fn regex_default_family(model: &str) -> bool {
    let rest = model.strip_prefix("claude-").unwrap_or(model);
    ["fable", "mythos"].iter().any(|family| {
        rest.strip_prefix(family)
            .is_some_and(|tail| tail.is_empty() || tail.starts_with('-'))
    })
}

/// Why the harness refuses `effort` for `model` under `baseline`, in its words; `None` when it
/// accepts it (or cannot be judged here: no model, an unknown baseline).
pub fn effort_refusal(effort: &str, model: Option<&str>, baseline: Option<&str>) -> Option<String> {
    let model = model?;
    let baseline = packaged_baseline(baseline)?;
    if baseline < FIRST_TABLE {
        return None;
    }
    let effort = if effort == "extra" { "xhigh" } else { effort };
    let offered = |levels: &[&str]| -> Option<String> {
        (!levels.contains(&effort)).then(|| {
            format!(
                "effort \"{effort}\" is not offered by model \"{model}\" — supported levels: {}",
                levels.join(", ")
            )
        })
    };
    match MODELS
        .iter()
        .find(|entry| entry.model == model && entry.since <= baseline)
    {
        Some(ModelEffort {
            levels: Some(levels),
            ..
        }) => offered(levels),
        Some(ModelEffort { levels: None, .. }) => Some(format!(
            "model \"{model}\" has no effort selector — omit `effort:` (real Cowork always runs it at the \
             medium fallback, with no UI picker)"
        )),
        None if regex_default_family(model) => offered(FIVE_LEVELS),
        None => None,
    }
}

/// The harness's refusal of the `effort:` of a scenario's session under the model and baseline a
/// unit runs with (`model` and `baseline` override the session's and the scenario's, as a matrix
/// cell or an eval's `--model` does), located at the session's `effort:` key. `None` when the
/// session sets no effort, the session is `(inline)`, or the harness would accept it.
pub fn unit_effort_refusal(
    scenario: &PreparedScenario,
    model: Option<&str>,
    baseline: Option<&str>,
) -> Option<InputError> {
    let prepared = scenario.session.as_ref()?;
    let session = &prepared.session;
    let effort = session.effort.as_deref()?;
    let model = model.or(session.model.as_deref());
    let baseline = baseline.or(scenario.scenario.baseline.as_deref());
    let message = effort_refusal(effort, model, baseline)?;
    let position = session.locations.get("effort");
    Some(InputError {
        file: prepared.rel_path.clone().into(),
        line: position.map(|p| p.line),
        column: position.map(|p| p.column),
        key: Some("effort".to_owned()),
        message,
        hint: None,
    })
}

#[cfg(test)]
mod tests {
    use super::effort_refusal;

    #[test]
    fn a_model_without_a_selector_refuses_any_explicit_effort_in_the_harness_words() {
        assert_eq!(
            effort_refusal("high", Some("claude-sonnet-4-5"), Some("latest")).as_deref(),
            Some(
                "model \"claude-sonnet-4-5\" has no effort selector — omit `effort:` (real Cowork \
                 always runs it at the medium fallback, with no UI picker)"
            )
        );
        assert!(effort_refusal("low", Some("claude-haiku-4-5"), None).is_some());
    }

    #[test]
    fn a_model_with_levels_takes_only_those() {
        assert_eq!(effort_refusal("high", Some("claude-opus-4-8"), None), None);
        assert_eq!(
            effort_refusal("extra", Some("claude-opus-4-6"), None).as_deref(),
            Some(
                "effort \"xhigh\" is not offered by model \"claude-opus-4-6\" — supported levels: \
                 low, medium, high, max"
            )
        );
        assert_eq!(effort_refusal("extra", Some("claude-opus-4-8"), None), None);
        assert!(effort_refusal("xhigh", Some("claude-fable-1"), None).is_none());
        assert!(effort_refusal("xhigh", Some("mythos"), None).is_none());
    }

    #[test]
    fn older_baselines_unknown_models_and_unknown_baselines_take_anything() {
        let sonnet = Some("claude-sonnet-4-5");
        assert_eq!(
            effort_refusal("high", sonnet, Some("desktop-1.18286.2")),
            None
        );
        assert!(effort_refusal("high", sonnet, Some("desktop-1.19367.0")).is_some());
        assert!(effort_refusal("high", sonnet, Some("desktop-1.19367.0.json")).is_some());
        assert_eq!(effort_refusal("high", sonnet, Some("desktop-9.9.9")), None);
        assert_eq!(effort_refusal("high", sonnet, Some("/abs/b.json")), None);
        assert_eq!(effort_refusal("high", Some("claude-x-9"), None), None);
        assert_eq!(effort_refusal("high", None, None), None);
        // claude-opus-5 is listed from desktop-1.24012.9 on; before, it is an unknown model.
        let opus5 = Some("claude-opus-5");
        assert_eq!(
            effort_refusal("huge", opus5, Some("desktop-1.24012.1")),
            None
        );
        assert!(effort_refusal("huge", opus5, Some("desktop-1.24012.9")).is_some());
    }
}
