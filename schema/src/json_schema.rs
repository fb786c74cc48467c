//! JSON Schemas of the wire and file formats, generated from the Rust types.
//!
//! The committed copies live in `schema/json/`; a test regenerates them and fails on any
//! difference (run it with `UPDATE_EXPECT=1` to accept a change, then review the diff).

use schemars::JsonSchema;

/// Every generated document: (file name under `schema/json/`, pretty JSON text).
pub fn documents() -> Vec<(&'static str, String)> {
    vec![
        (
            "batch-spec.schema.json",
            render::<crate::batch::StoredBatch>(),
        ),
        ("job.schema.json", render::<crate::job::JobSpec>()),
        ("job-event.schema.json", render::<crate::event::JobEvent>()),
        (
            "job-record.schema.json",
            render::<crate::event::JobRecord>(),
        ),
        ("rollup.schema.json", render::<crate::rollup::RollupDoc>()),
        (
            "batch-stats.schema.json",
            render::<crate::history::BatchStats>(),
        ),
        (
            "envelope.schema.json",
            render::<crate::envelope::Envelope>(),
        ),
        (
            "eval-document.schema.json",
            render::<crate::eval::EvalDocument>(),
        ),
        (
            "fleet-meta.schema.json",
            render::<crate::fleet::FleetMeta>(),
        ),
        (
            "batch-record.schema.json",
            render::<crate::registry::BatchRecord>(),
        ),
        (
            "worker.schema.json",
            render::<crate::registry::WorkerInfo>(),
        ),
        (
            "api-submit-response.schema.json",
            render::<crate::api::SubmitResponse>(),
        ),
        (
            "api-batch-status.schema.json",
            render::<crate::api::BatchStatus>(),
        ),
        (
            "notify-body.schema.json",
            render::<crate::notify::NotifyBody>(),
        ),
        (
            "api-batch-end.schema.json",
            render::<crate::api::BatchEnd>(),
        ),
        (
            "api-progress.schema.json",
            render::<crate::api::ProgressSnapshot>(),
        ),
        ("api-error.schema.json", render::<crate::api::ApiError>()),
        (
            "api-worker-status.schema.json",
            render::<crate::api::WorkerStatus>(),
        ),
        (
            "api-fabric-status.schema.json",
            render::<crate::api::FabricStatus>(),
        ),
        (
            "api-control-request.schema.json",
            render::<crate::api::ControlRequest>(),
        ),
        (
            "api-live-snapshot.schema.json",
            render::<crate::live::LiveSnapshot>(),
        ),
        (
            "api-live-delta.schema.json",
            render::<crate::live::LiveDelta>(),
        ),
        (
            "api-live-unit-runs.schema.json",
            render::<crate::live::LiveUnitRuns>(),
        ),
    ]
}

fn render<T: JsonSchema>() -> String {
    let schema = schemars::schema_for!(T);
    let mut text =
        serde_json::to_string_pretty(&schema).expect("a generated schema always serializes");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn committed_json_schemas_match_the_types() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("json");
        let update = std::env::var_os("UPDATE_EXPECT").is_some();
        let mut stale = Vec::new();
        for (name, text) in super::documents() {
            let path = dir.join(name);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if committed == text {
                continue;
            }
            if update {
                std::fs::create_dir_all(&dir).expect("creating schema/json");
                std::fs::write(&path, &text).expect("writing a schema file");
            } else {
                stale.push(name);
            }
        }
        assert!(
            stale.is_empty(),
            "schema/json is out of date for {stale:?}; run `UPDATE_EXPECT=1 cargo test -p cowork-schema json_schema` and review the diff"
        );
    }
}
