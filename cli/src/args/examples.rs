//! The examples printed after a subcommand's help, one command per line.

/// The examples of a subcommand. They are printed after its help exactly as written, one
/// command per line: clap wraps help text to the terminal's width, and a wrapped command line
/// no longer works when it is copied and pasted.
pub fn examples(subcommand: &str) -> Option<&'static str> {
    Some(match subcommand {
        "run" => {
            "cowork run examples/demo/scenarios --repeat 5 --executor sim
cowork run examples/demo/scenarios/csv-report.yaml --repeat 5 --matrix examples/demo/matrix.yaml --executor sim --sim-profile examples/demo/sim-profile.yaml
cowork run examples/demo/scenarios --repeat 3 --min-pass-rate 0.66 --executor sim --output-format json > envelope.json
cowork run examples/demo/scenarios --repeat 10 --job-timeout 45m --dry-run
cowork run examples/demo/scenarios/csv-report.yaml --repeat 50 --matrix examples/demo/matrix.yaml --executor sim --sim-profile examples/demo/live-sim-profile.yaml --ui"
        }
        "eval" => {
            "cowork eval --a examples/demo/skills/v1/csv-report --b examples/demo/eval/skills/csv-report-worse/csv-report examples/demo/scenarios --executor sim --sim-profile examples/demo/eval/sim-profile.yaml
cowork eval --a examples/demo/skills/v1/csv-report --b examples/demo/skills/v2/csv-report examples/demo/scenarios --runs 20 --executor sim --output-format json -o eval.json"
        }
        "rollup" => {
            "cowork rollup latest --min-pass-rate 0.8
cowork rollup 20261130-101500-a1b2c3 --store .cowork
cowork rollup .cowork/batches/20261130-101500-a1b2c3 --rollup-out rollup.json
cowork rollup .cowork/batches/20261130-101500-a1b2c3/jobs/c0/r0/result.json .cowork/batches/20261130-101500-a1b2c3/jobs/c0/r1/result.json"
        }
        "submit" => {
            "cowork submit examples/demo/scenarios/csv-report.yaml --matrix examples/demo/matrix.yaml --repeat 5 --executor sim --coordinator http://coordinator:8700 --watch
cowork submit --replay examples/demo/cassettes --coordinator http://coordinator:8700 --watch --output-format json
cowork submit examples/demo/scenarios --repeat 10 --coordinator http://coordinator:8700 --dry-run"
        }
        "cancel" => {
            "cowork cancel 20261130-101500-a1b2c3
cowork cancel latest --kill-running"
        }
        "pause" => {
            "cowork pause 20261130-101500-a1b2c3
cowork pause latest --coordinator http://coordinator:8700 --by ann"
        }
        "resume-dispatch" => {
            "cowork resume-dispatch 20261130-101500-a1b2c3
cowork resume-dispatch latest --coordinator http://coordinator:8700"
        }
        "adjust" => {
            "cowork adjust 20261130-101500-a1b2c3 --max-budget-usd 40
cowork adjust latest --max-running 8
cowork adjust latest --max-budget-usd 25.5 --max-running 16 --by ann"
        }
        "resume" => {
            "cowork resume 20261130-101500-a1b2c3 --watch
cowork resume latest --store .cowork --slots 8"
        }
        "report" => {
            "cowork report latest -o report.html
cowork report .cowork/batches/20261130-101500-a1b2c3 -o report.html
cowork report 20261130-101500-a1b2c3 --format junit -o junit.xml
cowork report latest --format markdown >> \"$GITHUB_STEP_SUMMARY\"
cowork report 20261130-101500-a1b2c3 --coordinator http://coordinator:8700 -o report.html
cowork report --compare latest~1 latest"
        }
        "batches" => {
            "cowork batches
cowork batches --store .cowork --limit 50
cowork batches --coordinator http://coordinator:8700 --format json"
        }
        "diff" => {
            "cowork diff latest~1 latest
cowork diff 20261130-101500-a1b2c3 20261201-101500-d4e5f6 --format markdown >> \"$GITHUB_STEP_SUMMARY\""
        }
        "trend" => {
            "cowork trend examples/demo/scenarios/csv-report.yaml --last 7
cowork trend examples/demo/scenarios --last 30 --coordinator http://coordinator:8700
cowork trend csv-report --format json
cowork trend examples/demo/scenarios --last 7 --suggest-quarantine"
        }
        "coordinator" => {
            "COWORK_NATS_URL=nats://nats:4222 COWORK_S3_ENDPOINT=http://minio:9000 COWORK_S3_BUCKET=cowork COWORK_S3_ACCESS_KEY_ID=… COWORK_S3_SECRET_ACCESS_KEY=… COWORK_API_TOKEN=… cowork coordinator --listen 0.0.0.0:8700"
        }
        "worker" => {
            "COWORK_NATS_URL=nats://nats:4222 COWORK_S3_ENDPOINT=http://minio:9000 COWORK_S3_BUCKET=cowork COWORK_S3_ACCESS_KEY_ID=… COWORK_S3_SECRET_ACCESS_KEY=… cowork worker --tiers container,replay --slots 4"
        }
        _ => return None,
    })
}
