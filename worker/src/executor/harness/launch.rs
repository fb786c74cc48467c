//! What a harness process is started with: its arguments, its work, bundle and temp dirs, and a
//! `record` job's own copy of the bundle; a job that cannot get them never starts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cowork_schema::event::{ErrorCategory, InfraClass};
use cowork_schema::job::{JobCommand, JobSpec};
use cowork_schema::layout::JobWorkDir;
use tokio_util::sync::CancellationToken;

use crate::executor::job_temp::{JobTemp, cassette_in_copy, copy_tree, ignore_new_cassettes};
use crate::executor::{Classified, ExecOutput, JobContext, ScenarioPathError, scenario_in_bundle};

/// Builds the CLI's arguments for `job` (harness-behaviour.md#job-invocation,
/// harness-behaviour.md#recording).
///
/// `--run-dir` is a global flag and comes before the subcommand; `record` writes its cassette to
/// `cassette`; `replay` takes the cassette as its file argument.
pub fn harness_args(
    job: &JobSpec,
    bundle_dir: &Path,
    work_dir: &Path,
    cassette: &Path,
) -> Result<Vec<OsString>, ScenarioPathError> {
    let scenario = scenario_in_bundle(job, bundle_dir)?;
    let mut args: Vec<OsString> = vec![
        "--run-dir".into(),
        // The per-job runs root inside the work dir.
        JobWorkDir::new(work_dir).runs_dir().into(),
        job.command.as_str().into(),
        scenario.into(),
    ];
    if job.command == JobCommand::Record {
        args.push("--out".into());
        args.push(cassette.into());
    }
    args.push("--output-format".into());
    args.push("json".into());
    args.extend(job.forwarded_flags.iter().map(OsString::from));
    Ok(args)
}

/// An output for a job whose CLI never started: nothing was spent.
pub(crate) fn not_started(classified: Classified) -> ExecOutput {
    ExecOutput {
        classified,
        exit_code: None,
        harness_version: None,
        spawned: false,
        artifacts: Vec::new(),
        run_ms: 0,
    }
}

/// The directories a harness process is started with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChildDirs<'a> {
    /// Its cwd.
    pub(crate) work_dir: &'a Path,
    /// The bundle it reads (decides its git mode).
    pub(crate) bundle_dir: &'a Path,
    /// Its `TMPDIR`.
    pub(crate) tmpdir: &'a Path,
}

/// A job's own inputs, when they are not the shared bundle: a `record` job's copy of the
/// bundle and where its cassette goes inside it (see `job_temp`).
#[derive(Debug)]
pub(crate) struct Staged {
    pub(crate) bundle_dir: PathBuf,
    pub(crate) cassette: PathBuf,
}

/// A `record` job's own copy of its bundle in `temp` (`None` for every other command), or the
/// output of a job that never started because the copy failed.
pub(super) async fn stage_record_bundle(
    ctx: &JobContext,
    temp: &JobTemp,
) -> Result<Option<Staged>, Box<ExecOutput>> {
    if ctx.job.command != JobCommand::Record {
        return Ok(None);
    }
    let (from, to) = (ctx.bundle_dir.clone(), temp.bundle_copy());
    let copied = tokio::task::spawn_blocking(move || {
        copy_tree(&from, &to)?;
        ignore_new_cassettes(&to)
    })
    .await;
    if let Err(err) = copied
        .map_err(|err| err.to_string())
        .and_then(|copied| copied.map_err(|err| err.to_string()))
    {
        return Err(Box::new(not_started(Classified::Infra {
            class: InfraClass::SandboxStart,
            message: format!(
                "cannot copy bundle {} for the record job: {err}",
                ctx.bundle_dir.display()
            ),
        })));
    }
    let bundle_dir = temp.bundle_copy();
    Ok(Some(Staged {
        cassette: cassette_in_copy(&bundle_dir, &ctx.job.scenario_file),
        bundle_dir,
    }))
}

/// What both process executors need before they start the harness: the job's work and bundle
/// dirs as absolute paths (the child runs in the work dir, a container mounts them at the same
/// paths, and the CLI's `outDir` is checked against the runs root) and the harness's
/// arguments; the runs root is created.
pub(crate) struct Launch {
    pub(crate) work_dir: PathBuf,
    pub(crate) bundle_dir: PathBuf,
    pub(crate) args: Vec<std::ffi::OsString>,
}

impl Launch {
    /// The launch of `ctx`'s job; the output of a job that did not start when it was cancelled
    /// first (`what` names what never started), when a dir cannot be resolved or created (a
    /// spawn failure: nothing spent, retried), or when the job's arguments are refused.
    pub(crate) async fn prepare(
        ctx: &JobContext,
        cancel: &CancellationToken,
        what: &str,
        staged: Option<&Staged>,
    ) -> Result<Launch, Box<ExecOutput>> {
        let refuse = |classified| Err(Box::new(not_started(classified)));
        if cancel.is_cancelled() {
            return refuse(Classified::error(
                ErrorCategory::Cancelled,
                format!("job was cancelled before {what} started"),
            ));
        }
        let source_bundle = staged.map_or(&ctx.bundle_dir, |staged| &staged.bundle_dir);
        let (work_dir, bundle_dir) = match (
            std::path::absolute(&ctx.work_dir),
            std::path::absolute(source_bundle),
        ) {
            (Ok(work_dir), Ok(bundle_dir)) => (work_dir, bundle_dir),
            (Err(err), _) | (_, Err(err)) => {
                return refuse(Classified::Infra {
                    class: InfraClass::SandboxStart,
                    message: format!(
                        "cannot resolve work dir {} or bundle dir {}: {err}",
                        ctx.work_dir.display(),
                        ctx.bundle_dir.display()
                    ),
                });
            }
        };
        let cassette = staged.map_or_else(
            // The cassette a `record` job writes inside the work dir (passed as `--out`).
            || JobWorkDir::new(&work_dir).cassette(),
            |staged| staged.cassette.clone(),
        );
        let args = match harness_args(&ctx.job, &bundle_dir, &work_dir, &cassette) {
            Ok(args) => args,
            Err(err) => return refuse(Classified::error(ErrorCategory::Usage, err.to_string())),
        };
        let runs_root = JobWorkDir::new(&work_dir).runs_dir();
        if let Err(err) = tokio::fs::create_dir_all(&runs_root).await {
            return refuse(Classified::Infra {
                class: InfraClass::SandboxStart,
                message: format!("cannot create runs root {}: {err}", runs_root.display()),
            });
        }
        Ok(Launch {
            work_dir,
            bundle_dir,
            args,
        })
    }
}

#[cfg(test)]
mod tests {
    use cowork_schema::batch::ExecutorKind;
    use cowork_schema::ids::{BatchId, JobId, UnitRef};
    use cowork_schema::job::Tier;

    use super::*;

    fn job(command: JobCommand, scenario_file: &str, flags: &[&str]) -> JobSpec {
        let batch_id = BatchId::new("b1").expect("valid literal");
        JobSpec {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
            job_id: JobId::new(&batch_id, UnitRef::File(0), None),
            batch_id,
            command,
            tier: Tier::Protocol,
            unit: UnitRef::File(0),
            repeat_index: None,
            scenario_file: scenario_file.to_owned(),
            scenario_name: "s".to_owned(),
            axes: None,
            arm: None,
            forwarded_flags: flags.iter().map(|flag| (*flag).to_owned()).collect(),
            bundle_sha256: "0".repeat(64),
            timeout_ms: 1000,
            executor: ExecutorKind::Harness,
            sim: None,
            generation: 0,
            traceparent: None,
            republished: 0,
            dispatch_epoch: 0,
            leader_term: 0,
        }
    }

    fn check_args(command: JobCommand, scenario: &str, flags: &[&str], expect: Option<&str>) {
        let got = harness_args(
            &job(command, scenario, flags),
            Path::new("/bundle"),
            Path::new("/work"),
            Path::new("/work/cassette.json"),
        );
        let got = got.ok().map(|args| {
            args.iter()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        });
        assert_eq!(got.as_deref(), expect, "{command:?} {scenario}");
    }

    #[test]
    fn command_line_follows_the_cli_contract() {
        check_args(
            JobCommand::Run,
            "scenarios/a.yaml",
            &["--on-unanswered", "first", "--label", "x y"],
            Some(
                "--run-dir /work/runs run /bundle/scenarios/a.yaml --output-format json \
                 --on-unanswered first --label x y",
            ),
        );
        check_args(
            JobCommand::Record,
            "a.yaml",
            &[],
            Some(
                "--run-dir /work/runs record /bundle/a.yaml --out /work/cassette.json --output-format json",
            ),
        );
        check_args(
            JobCommand::Replay,
            "./cassettes/a.json",
            &[],
            Some("--run-dir /work/runs replay /bundle/./cassettes/a.json --output-format json"),
        );
        check_args(JobCommand::Run, "../escape.yaml", &[], None);
        check_args(JobCommand::Run, "a/../../escape.yaml", &[], None);
        check_args(JobCommand::Run, "/etc/passwd", &[], None);
        check_args(JobCommand::Run, "", &[], None);
        check_args(JobCommand::Run, ".", &[], None);
    }

    #[test]
    fn scenario_path_error_names_job_and_path() {
        let err = harness_args(
            &job(JobCommand::Run, "../x.yaml", &[]),
            Path::new("/b"),
            Path::new("/w"),
            Path::new("/w/cassette.json"),
        )
        .expect_err("a parent path escapes the bundle");
        assert_eq!(
            err.to_string(),
            "scenario file \"../x.yaml\" of job b1/f0 must be a relative path inside the bundle"
        );
    }
}
