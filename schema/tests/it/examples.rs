//! Every example scenario, session and matrix shipped with the CLI loads.

use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::{Fidelity, Scenario, SessionRef};
use cowork_schema::session::Session;

use crate::support::{fixture, read, yaml_files};

#[test]
fn every_example_scenario_loads() {
    let root = fixture("upstream-examples/scenarios");
    let mut files = yaml_files(&root);
    files.extend(yaml_files(&root.join("trigger-accuracy-sweep")));
    assert_eq!(files.len(), 8, "{files:?}");
    for file in &files {
        let scenario = Scenario::from_yaml(&read(file), file)
            .unwrap_or_else(|errors| panic!("{}: {errors:?}", file.display()));
        assert!(!scenario.prompt.is_empty(), "{}", file.display());
        assert!(
            matches!(scenario.session_ref(), SessionRef::Path(_)),
            "{}",
            file.display()
        );
    }
}

#[test]
fn example_scenario_fields_are_typed() {
    let file = fixture("upstream-examples/scenarios/csv-metrics.yaml");
    let scenario = Scenario::from_yaml(&read(&file), &file).expect("csv-metrics loads");
    assert_eq!(scenario.effective_name(&file), "csv-metrics");
    assert_eq!(scenario.baseline.as_deref(), Some("latest"));
    assert_eq!(
        scenario.session.as_deref(),
        Some("../sessions/csv-metrics.yaml")
    );
    assert_eq!(scenario.fidelity, Some(Fidelity::Container));
    assert_eq!(scenario.answers.len(), 4);
    assert_eq!(scenario.answers[3].else_decision.as_deref(), Some("deny"));
    let first_keys: Vec<&str> = scenario
        .assert
        .iter()
        .map(|entry| entry.keys().next().map_or("", String::as_str))
        .collect();
    assert_eq!(
        first_keys,
        [
            "result",
            "tool_called",
            "tool_called",
            "user_visible_artifact",
            "user_visible_artifact",
            "transcript_matches",
            "no_delete_in_outputs"
        ]
    );
    assert_eq!(
        scenario.raw["assert"][5]["transcript_matches"],
        r"metrics\.json"
    );
}

#[test]
fn every_example_session_loads() {
    let files = yaml_files(&fixture("upstream-examples/sessions"));
    assert_eq!(files.len(), 6, "{files:?}");
    for file in &files {
        Session::from_yaml(&read(file), file)
            .unwrap_or_else(|errors| panic!("{}: {errors:?}", file.display()));
    }
    let file = fixture("upstream-examples/sessions/default.yaml");
    let session = Session::from_yaml(&read(&file), &file).expect("default session loads");
    assert_eq!(session.plugins.local_plugins, ["../skills/my-pdf-skill"]);
    assert_eq!(session.plugins.config_dir, None);
    assert_eq!(session.folders[0].mode.as_deref(), Some("rwd"));
    assert_eq!(session.debug.max_thinking_tokens, Some(8000));
    let keys: Vec<String> = session.path_fields().into_iter().map(|f| f.key).collect();
    // The git URL marketplace is not a local path and is left out.
    assert_eq!(
        keys,
        [
            "uploads[0]",
            "trusted_folders[0]",
            "folders[0].from",
            "plugins.local_plugins[0]"
        ]
    );
}

#[test]
fn example_matrix_loads() {
    let file = fixture("upstream-examples/matrices/csv-metrics-matrix.yaml");
    let matrix = MatrixFile::from_yaml(&read(&file), &file).expect("example matrix loads");
    assert_eq!(
        matrix.baselines,
        Some(vec![
            "desktop-1.17377.2".to_owned(),
            "desktop-1.18286.0".to_owned()
        ])
    );
    assert_eq!(matrix.models, None);
    assert_eq!(matrix.skill_dirs, None);
}
