//! Replay packs: many replay jobs through one `cowork-harness` process, split back into one
//! output per job (harness-behaviour.md#replay-packs).
//!
//! Starting node and loading the CLI costs far more than replaying one cassette, so the
//! harness executor replays the cassettes of one slot's replay jobs with one `replay <dir>`
//! call. The CLI takes one target only, and a dir replay takes every `*.cassette.json` of the
//! dir, so the pack gets a dir of its own: a *view* of the bundle under the pack's temp root,
//! in which the cassette's dir and its ancestors are real dirs whose other entries are
//! symlinks into the bundle (so a session path relative to the cassette's dir resolves as it
//! does for the cassette alone), and the cassette dir holds only the pack's cassettes, each
//! followed by an empty *marker* file. The CLI reports every cassette in file-name order, and
//! an empty cassette gives one stub result and exactly one stderr line
//! `replay: <path>: unreadable / invalid cassette JSON: …`, so each marker both checks the
//! result order and cuts stderr into the lines of each cassette.
//!
//! Every job's output is then built as the job alone would have had it: its result with the
//! view's paths put back to the bundle's, an envelope of that one result, the exit code the CLI
//! gives that one cassette (0 pass, 1 verdict fail, 2 for a corrupt or tampered cassette, whose
//! stub result has an empty `outDir`), and its own stderr lines. When the process does not give
//! a result for every cassette — it died, timed out, printed no envelope or an envelope that
//! does not match the markers — each job is replayed again alone: a replay spends nothing.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cowork_schema::event::InfraClass;
use cowork_schema::job::{JobCommand, JobSpec};
use cowork_schema::layout::{JobWorkDir, names};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::HarnessExecutor;
use super::capture::{Captured, Finished};
use super::launch::{ChildDirs, Launch, not_started};
use super::notes::note_removed;
use super::outcome::guard_spawn_failure;
use crate::executor::classify::{ProcessEnd, find_envelope};
use crate::executor::job_temp::{JobTemp, Removed};
use crate::executor::{Classified, ExecOutput, Executor, JobContext, bundle_path};

/// Default most replay jobs one harness process gets (`--replay-pack`): the CLI replays a
/// cassette in about 6 ms and starts in about 0.4 s, so a pack of 256 spends four fifths of
/// its time replaying and still ends within about two seconds. Packs are cut smaller than this
/// to share the queue evenly across the fleet's slots (`pack::pack_share`).
pub const DEFAULT_REPLAY_PACK: usize = 256;

/// Forwarded flags the CLI accepts for a dir replay exactly as for one file. Any other flag
/// (`--session` is refused for a dir; `--write`, `--mutate`, `--assert-from` act per file)
/// makes the job run alone.
const PACKABLE_FLAGS: &[&str] = &[
    "--strict",
    "--fail-on-skill-drift",
    "--best-effort-future-cassette",
    "--quiet",
    "-q",
    "--verbose",
];

/// What jobs must share to be replayed by one process: batch, generation, bundle, cassette
/// dir, flags and timeout.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PackKey {
    batch_id: String,
    generation: u32,
    bundle_sha256: String,
    cassette_dir: String,
    flags: Vec<String>,
    timeout_ms: u64,
}

/// The pack a job may join, or `None` when it must run alone.
pub fn pack_key(job: &JobSpec) -> Option<PackKey> {
    if job.command != JobCommand::Replay || !job.scenario_file.ends_with(names::CASSETTE_SUFFIX) {
        return None;
    }
    if !job
        .forwarded_flags
        .iter()
        .all(|flag| PACKABLE_FLAGS.contains(&flag.as_str()))
    {
        return None;
    }
    let (cassette_dir, _) = job
        .scenario_file
        .rsplit_once('/')
        .unwrap_or(("", &job.scenario_file));
    Some(PackKey {
        batch_id: job.batch_id.to_string(),
        generation: job.generation,
        bundle_sha256: job.bundle_sha256.clone(),
        cassette_dir: cassette_dir.to_owned(),
        flags: job.forwarded_flags.clone(),
        timeout_ms: job.timeout_ms,
    })
}

/// Splits jobs into the groups one process runs: jobs of one key, no cassette twice (a dir
/// holds a name once). Singletons run alone.
fn packs(jobs: &[(JobContext, CancellationToken)]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Option<PackKey>, HashSet<String>, Vec<usize>)> = Vec::new();
    for (job_idx, (ctx, _)) in jobs.iter().enumerate() {
        let key = pack_key(&ctx.job);
        let open = key.as_ref().and_then(|key| {
            groups.iter_mut().find(|(group_key, cassettes, _)| {
                group_key.as_ref() == Some(key) && !cassettes.contains(&ctx.job.scenario_file)
            })
        });
        match open {
            Some((_, cassettes, members)) => {
                cassettes.insert(ctx.job.scenario_file.clone());
                members.push(job_idx);
            }
            None => {
                let cassettes = HashSet::from([ctx.job.scenario_file.clone()]);
                groups.push((key, cassettes, vec![job_idx]));
            }
        }
    }
    groups.into_iter().map(|(_, _, members)| members).collect()
}

/// Runs one slot's jobs: every pack of two or more replays with one process, the others alone.
/// A pack's jobs share batch and generation, so the first one's token is the whole pack's.
pub(crate) async fn execute_many(
    executor: &HarnessExecutor,
    jobs: &[(JobContext, CancellationToken)],
) -> Vec<ExecOutput> {
    let mut outputs: Vec<Option<ExecOutput>> = vec![None; jobs.len()];
    for members in packs(jobs) {
        if members.len() == 1 {
            let (ctx, cancel) = &jobs[members[0]];
            outputs[members[0]] = Some(executor.execute(ctx, cancel.clone()).await);
            continue;
        }
        let contexts: Vec<&JobContext> = members.iter().map(|&job_idx| &jobs[job_idx].0).collect();
        let cancel = &jobs[members[0]].1;
        let ran = run_pack(executor, &contexts, cancel).await;
        for (job_idx, output) in members.into_iter().zip(ran) {
            outputs[job_idx] = Some(output);
        }
    }
    outputs
        .into_iter()
        .map(|output| output.expect("every job belongs to exactly one pack"))
        .collect()
}

/// A member that is ready to run: its launch and its cassette's paths.
struct Member<'a> {
    ctx: &'a JobContext,
    launch: Launch,
    /// The cassette as the job alone gives it to the CLI.
    solo_path: PathBuf,
    /// Its name in the view, and its marker's.
    link: PathBuf,
    marker: PathBuf,
}

async fn run_pack(
    executor: &HarnessExecutor,
    jobs: &[&JobContext],
    cancel: &CancellationToken,
) -> Vec<ExecOutput> {
    let started = Instant::now();
    let (mut outputs, ready) = prepare_all(jobs, cancel).await;
    if ready.len() < 2 {
        for (job_idx, _) in ready {
            outputs[job_idx] = Some(executor.execute(jobs[job_idx], cancel.clone()).await);
        }
        return collect_outputs(outputs);
    }
    let parent = std::env::temp_dir();
    let temp = match JobTemp::create(&parent).await {
        Ok(temp) => temp,
        Err(err) => {
            let message = format!(
                "cannot create the job's temp dir in {}: {err}",
                parent.display()
            );
            let job_idxs = ready.iter().map(|(job_idx, _)| *job_idx);
            fail_to_spawn(&mut outputs, job_idxs, &message);
            return collect_outputs(outputs);
        }
    };
    let scenario_file = jobs[ready[0].0].job.scenario_file.clone();
    let cassette_dir = scenario_file
        .rsplit_once('/')
        .map_or("", |(dir, _)| dir)
        .to_owned();
    let view_root = temp.pack_view();
    let (members, view) = lay_out(jobs, ready, &view_root, &cassette_dir);
    let built = tokio::task::spawn_blocking(move || view.build()).await;
    if let Err(message) = built
        .map_err(|err| err.to_string())
        .and_then(|built| built.map_err(|err| err.to_string()))
    {
        let message = format!("cannot lay out the replay pack's cassettes: {message}");
        let job_idxs = members.iter().map(|(job_idx, _)| *job_idx);
        fail_to_spawn(&mut outputs, job_idxs, &message);
        let _ = temp.remove().await;
        return collect_outputs(outputs);
    }
    let ran = run_view(
        executor,
        &members,
        &view_root.join(&cassette_dir),
        &temp,
        cancel,
    )
    .await;
    let removed = temp.remove().await;
    let ran = PackRan {
        run: ran,
        started,
        removed: &removed,
    };
    place_outputs(executor, members, ran, &mut outputs, cancel).await;
    collect_outputs(outputs)
}

/// Prepares every job's launch: the outputs of those that cannot start, and the others ready
/// to run, by their place in `jobs`.
async fn prepare_all(
    jobs: &[&JobContext],
    cancel: &CancellationToken,
) -> (Vec<Option<ExecOutput>>, Vec<(usize, Launch)>) {
    let mut outputs: Vec<Option<ExecOutput>> = vec![None; jobs.len()];
    let mut ready: Vec<(usize, Launch)> = Vec::new();
    for (job_idx, ctx) in jobs.iter().enumerate() {
        match Launch::prepare(ctx, cancel, "the harness", None).await {
            Ok(launch) => ready.push((job_idx, launch)),
            Err(not_run) => outputs[job_idx] = Some(*not_run),
        }
    }
    (outputs, ready)
}

/// Gives each of the jobs at `job_idxs` a spawn failure: nothing was spent, so each is retried.
fn fail_to_spawn(
    outputs: &mut [Option<ExecOutput>],
    job_idxs: impl Iterator<Item = usize>,
    message: &str,
) {
    for job_idx in job_idxs {
        outputs[job_idx] = Some(not_started(Classified::Infra {
            class: InfraClass::Spawn,
            message: message.to_owned(),
        }));
    }
}

/// The pack's members, each with its cassette's link and marker in the view, and the view of
/// the bundle that holds them (see the module doc).
fn lay_out<'a>(
    jobs: &[&'a JobContext],
    ready: Vec<(usize, Launch)>,
    view_root: &Path,
    cassette_dir: &str,
) -> (Vec<(usize, Member<'a>)>, View) {
    let bundle_dir = ready[0].1.bundle_dir.clone();
    let mut members = Vec::with_capacity(ready.len());
    for (member_idx, (job_idx, launch)) in ready.into_iter().enumerate() {
        let ctx = jobs[job_idx];
        let solo_path = bundle_path(&launch.bundle_dir, &ctx.job.scenario_file)
            .expect("Launch::prepare refuses a scenario path outside the bundle");
        let view_dir = view_root.join(cassette_dir);
        members.push((
            job_idx,
            Member {
                ctx,
                launch,
                solo_path,
                link: view_dir.join(names::cassette_file_name(&format!("m{member_idx:06}-0"))),
                marker: view_dir.join(names::cassette_file_name(&format!("m{member_idx:06}-1"))),
            },
        ));
    }
    let view = View {
        root: view_root.to_path_buf(),
        bundle_dir,
        cassette_dir: PathBuf::from(cassette_dir),
        links: members
            .iter()
            .map(|(_, member)| {
                (
                    member.solo_path.clone(),
                    member.link.clone(),
                    member.marker.clone(),
                )
            })
            .collect(),
    };
    (members, view)
}

/// How a pack's process went, with what its outputs are finished with.
struct PackRan<'a> {
    run: PackRun,
    /// When the pack began: its time is shared among the members.
    started: Instant,
    /// What was removed with the pack's temp root.
    removed: &'a Removed,
}

/// Puts each member's output at its job's place: split from the pack's process, given per
/// member, or from a replay of the member alone.
async fn place_outputs(
    executor: &HarnessExecutor,
    members: Vec<(usize, Member<'_>)>,
    ran: PackRan<'_>,
    outputs: &mut [Option<ExecOutput>],
    cancel: &CancellationToken,
) {
    match ran.run {
        PackRun::Split(mut split) => {
            let per_job_ms = ran.started.elapsed().as_millis() / split.len().max(1) as u128;
            for ((_, member), output) in members.iter().zip(split.iter_mut()) {
                // The process's time, shared: what history and estimates read per job.
                output.run_ms = u64::try_from(per_job_ms).unwrap_or(u64::MAX);
                // What the CLI left in the pack's TMPDIR belongs to its failed cassettes (a
                // tampered one leaks its `cwh-replay-*` dir).
                if output.exit_code == Some(2) {
                    note_removed(output, &member.ctx.job, ran.removed);
                }
            }
            for ((job_idx, _), output) in members.into_iter().zip(split) {
                outputs[job_idx] = Some(output);
            }
        }
        PackRun::Each(each) => {
            for ((job_idx, _), output) in members.into_iter().zip(each) {
                outputs[job_idx] = Some(output);
            }
        }
        PackRun::Alone(reason) => {
            tracing::warn!(n_jobs = members.len(), reason = %reason, "the replay pack gave no result per cassette; replaying each alone");
            for (job_idx, member) in members {
                outputs[job_idx] = Some(executor.execute(member.ctx, cancel.clone()).await);
            }
        }
    }
}

fn collect_outputs(outputs: Vec<Option<ExecOutput>>) -> Vec<ExecOutput> {
    outputs
        .into_iter()
        .map(|output| output.expect("every member got an output"))
        .collect()
}

/// How a pack's process went.
enum PackRun {
    /// One output per member, split from the process's envelope and stderr.
    Split(Vec<ExecOutput>),
    /// One output per member that needs no second run (never started, or cancelled).
    Each(Vec<ExecOutput>),
    /// No usable output: each member is replayed alone.
    Alone(String),
}

async fn run_view(
    executor: &HarnessExecutor,
    members: &[(usize, Member<'_>)],
    view_dir: &Path,
    temp: &JobTemp,
    cancel: &CancellationToken,
) -> PackRun {
    let first = &members[0].1;
    let args = pack_args(first, view_dir);
    let tmpdir = temp.tmpdir();
    let dirs = ChildDirs {
        work_dir: &first.launch.work_dir,
        bundle_dir: &first.launch.bundle_dir,
        tmpdir: &tmpdir,
    };
    let mut child = match executor.command(&args, &dirs).spawn() {
        Ok(child) => child,
        Err(err) => {
            let message = format!(
                "cannot start harness program {}: {err}",
                executor.config().program.display()
            );
            return none_started(members.len(), &message);
        }
    };
    tracing::debug!(
        n_jobs = members.len(),
        pid = child.id(),
        "replay pack started"
    );
    // Held until the pack is over: dropping it tells the guard to kill the process group.
    let _guard_pipe = child.stdin.take();
    let finished = match executor
        .supervise_and_capture(&mut child, &first.ctx.job, cancel)
        .await
    {
        Ok(finished) => finished,
        Err((err, _)) => return PackRun::Alone(format!("cannot wait for the harness: {err}")),
    };
    if executor.config().guard.is_some()
        && let Some(message) = guard_spawn_failure(&finished)
    {
        return none_started(members.len(), &message);
    }
    if finished.end == ProcessEnd::Cancelled {
        return PackRun::Each(each_cancelled(executor, members).await);
    }
    let markers: Vec<String> = members
        .iter()
        .map(|(_, member)| member.marker.to_string_lossy().into_owned())
        .collect();
    let links: Vec<String> = members
        .iter()
        .map(|(_, member)| member.link.to_string_lossy().into_owned())
        .collect();
    let shares = match split(&finished, &markers, &links) {
        Ok(shares) => shares,
        Err(reason) => return PackRun::Alone(reason),
    };
    let view_root = temp.pack_view().to_string_lossy().into_owned();
    PackRun::Split(finish_shares(executor, members, shares, &view_root).await)
}

/// The CLI's arguments for a dir replay of the view's cassette dir, with the pack's flags.
fn pack_args(first: &Member<'_>, view_dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--run-dir".into(),
        JobWorkDir::new(&first.launch.work_dir).runs_dir().into(),
        "replay".into(),
        view_dir.into(),
        "--output-format".into(),
        "json".into(),
    ];
    args.extend(first.ctx.job.forwarded_flags.iter().map(OsString::from));
    args
}

/// One spawn failure per member: the pack's process never ran.
fn none_started(n_members: usize, message: &str) -> PackRun {
    PackRun::Each(
        (0..n_members)
            .map(|_| {
                not_started(Classified::Infra {
                    class: InfraClass::Spawn,
                    message: message.to_owned(),
                })
            })
            .collect(),
    )
}

/// Each member's output as a cancelled job's, with whatever its own work dir holds.
async fn each_cancelled(
    executor: &HarnessExecutor,
    members: &[(usize, Member<'_>)],
) -> Vec<ExecOutput> {
    let mut each = Vec::with_capacity(members.len());
    for (_, member) in members {
        let alone = Finished {
            end: ProcessEnd::Cancelled,
            stdout: Default::default(),
            stderr: Default::default(),
        };
        each.push(
            executor
                .finish(&member.ctx.job, &member.launch.work_dir, alone)
                .await,
        );
    }
    each
}

/// Each member's output from its share, with the view's paths put back to the bundle's.
async fn finish_shares(
    executor: &HarnessExecutor,
    members: &[(usize, Member<'_>)],
    shares: Vec<Share>,
    view_root: &str,
) -> Vec<ExecOutput> {
    let mut outputs = Vec::with_capacity(members.len());
    for ((_, member), share) in members.iter().zip(shares) {
        let rewrites = [
            (
                member.link.to_string_lossy().into_owned(),
                member.solo_path.to_string_lossy().into_owned(),
            ),
            (
                view_root.to_owned(),
                member.launch.bundle_dir.to_string_lossy().into_owned(),
            ),
        ];
        let alone = share.alone(&rewrites);
        outputs.push(
            executor
                .finish(&member.ctx.job, &member.launch.work_dir, alone)
                .await,
        );
    }
    outputs
}

/// One cassette's part of a pack's output.
#[derive(Debug, PartialEq)]
struct Share {
    /// The pack's envelope with this cassette's result only.
    envelope: Value,
    stderr: Vec<u8>,
    /// The exit code of a replay of this cassette alone.
    exit_code: i32,
}

impl Share {
    /// The process end this cassette would have had alone, with `rewrites` (view path →
    /// bundle path) applied to every string of the result and to stderr.
    fn alone(self, rewrites: &[(String, String)]) -> Finished {
        let mut envelope = self.envelope;
        rewrite_strings(&mut envelope, rewrites);
        let mut line = cowork_schema::json_number::to_vec(&envelope)
            .expect("serializing a json value to memory cannot fail");
        line.push(b'\n');
        let stderr = rewrite_text(&String::from_utf8_lossy(&self.stderr), rewrites);
        Finished {
            end: ProcessEnd::Exited(self.exit_code),
            stdout: Captured {
                bytes: line,
                ..Default::default()
            },
            stderr: Captured {
                bytes: stderr.into_bytes(),
                ..Default::default()
            },
        }
    }
}

/// Cuts a dir replay's output into one [`Share`] per member; `Err` says why it cannot.
/// The envelope and its results are the CLI's documents, read by key (their shape is the CLI's,
/// open across CLI versions) and passed on with their key order kept.
fn split(finished: &Finished, markers: &[String], links: &[String]) -> Result<Vec<Share>, String> {
    match finished.end {
        ProcessEnd::Exited(0..=2) => {}
        end => return Err(format!("the process ended {end:?}")),
    }
    if finished.stdout.dropped_bytes > 0 || finished.stderr.dropped_bytes > 0 {
        return Err("its output exceeded the capture limit".to_owned());
    }
    let envelope = find_envelope(&finished.stdout.bytes).ok_or("it printed no envelope")?;
    if !envelope.value.get("error").is_some_and(Value::is_null) {
        return Err("its envelope is an error envelope".to_owned());
    }
    let results = envelope
        .value
        .get("results")
        .and_then(Value::as_array)
        .ok_or("its envelope has no results")?;
    if results.len() != 2 * markers.len() {
        return Err(format!(
            "{} results for {} cassettes and their markers",
            results.len(),
            markers.len()
        ));
    }
    let stderr = String::from_utf8_lossy(&finished.stderr.bytes);
    let mut stderr_shares: Vec<String> = vec![String::new(); markers.len()];
    let mut member_idx = 0;
    for line in stderr.split_inclusive('\n') {
        if member_idx < markers.len() && is_marker_line(line, &markers[member_idx]) {
            member_idx += 1;
            continue;
        }
        match stderr_shares.get_mut(member_idx) {
            Some(share) => share.push_str(line),
            None => return Err("stderr continues after the last marker".to_owned()),
        }
    }
    if member_idx != markers.len() {
        return Err(format!(
            "{member_idx} of {} marker lines on stderr",
            markers.len()
        ));
    }
    let mut shares = Vec::with_capacity(markers.len());
    for (member_idx, stderr) in stderr_shares.into_iter().enumerate() {
        let result = &results[2 * member_idx];
        let marker = &results[2 * member_idx + 1];
        if !is_stub_for(marker, &markers[member_idx]) {
            return Err(format!("result {} is not its marker's", 2 * member_idx + 1));
        }
        let stub = result.get("outDir").and_then(Value::as_str) == Some("");
        if stub && !is_stub_for(result, &links[member_idx]) {
            return Err(format!("result {} is not its cassette's", 2 * member_idx));
        }
        let pass = cowork_schema::run_result::verdict_pass(result).unwrap_or(false);
        let exit_code = if stub {
            2
        } else {
            match result
                .get("verdict")
                .and_then(|verdict| verdict.get("exitCode"))
                .and_then(Value::as_i64)
            {
                Some(0) => 0,
                Some(1) => 1,
                _ if pass => 0,
                _ => 1,
            }
        };
        // The pack's envelope, key order kept, with this cassette's result alone; built key
        // by key, as cloning the whole envelope per cassette would copy every other result.
        let mut alone = serde_json::Map::new();
        for (key, value) in envelope.value.as_object().into_iter().flatten() {
            let value = match key.as_str() {
                "ok" => Value::Bool(exit_code == 0 && pass),
                "results" => Value::Array(vec![result.clone()]),
                _ => value.clone(),
            };
            alone.insert(key.clone(), value);
        }
        let alone = Value::Object(alone);
        shares.push(Share {
            envelope: alone,
            stderr: stderr.into_bytes(),
            exit_code,
        });
    }
    Ok(shares)
}

/// `true` for the one stderr line the CLI prints for the empty marker file `marker`.
fn is_marker_line(line: &str, marker: &str) -> bool {
    line.strip_prefix("replay: ")
        .and_then(|rest| rest.strip_prefix(marker))
        .is_some_and(|rest| rest.starts_with(": "))
}

/// `true` for the CLI's stub result of the corrupt cassette at `path`.
fn is_stub_for(result: &Value, path: &str) -> bool {
    result.get("outDir").and_then(Value::as_str) == Some("")
        && result.get("scenario").and_then(Value::as_str) == Some(path)
}

fn rewrite_text(text: &str, rewrites: &[(String, String)]) -> String {
    let mut text = text.to_owned();
    for (from, to) in rewrites {
        if text.contains(from.as_str()) {
            text = text.replace(from.as_str(), to);
        }
    }
    text
}

fn rewrite_strings(value: &mut Value, rewrites: &[(String, String)]) {
    match value {
        Value::String(text) => {
            if rewrites
                .iter()
                .any(|(from, _)| text.contains(from.as_str()))
            {
                *text = rewrite_text(text, rewrites);
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rewrite_strings(item, rewrites)),
        Value::Object(object) => object
            .values_mut()
            .for_each(|item| rewrite_strings(item, rewrites)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The view of the bundle a pack replays (see the module doc).
struct View {
    root: PathBuf,
    bundle_dir: PathBuf,
    /// The cassettes' dir, relative to the bundle.
    cassette_dir: PathBuf,
    /// Per member: the cassette in the bundle, its link in the view, its marker.
    links: Vec<(PathBuf, PathBuf, PathBuf)>,
}

impl View {
    fn build(&self) -> std::io::Result<()> {
        let mut real = self.root.clone();
        let mut source = self.bundle_dir.clone();
        std::fs::create_dir_all(&real)?;
        let components: Vec<&std::ffi::OsStr> = self
            .cassette_dir
            .components()
            .filter_map(|component| match component {
                std::path::Component::Normal(name) => Some(name),
                _ => None,
            })
            .collect();
        for name in &components {
            link_entries(&source, &real, |entry| entry == *name)?;
            real.push(name);
            source.push(name);
            std::fs::create_dir(&real)?;
        }
        // The cassette dir: everything but cassettes, so only the pack's are replayed.
        link_entries(&source, &real, |entry| {
            entry
                .to_str()
                // The file names the CLI's dir replay takes.
                .is_some_and(|entry| entry.ends_with(names::CASSETTE_SUFFIX))
        })?;
        for (cassette, link, marker) in &self.links {
            std::os::unix::fs::symlink(cassette, link)?;
            std::fs::File::create(marker)?;
        }
        Ok(())
    }
}

/// Symlinks every entry of `source` into `into`, except `.git` (which would make the view a
/// work tree of its own) and the entries `skip` names.
fn link_entries(
    source: &Path,
    into: &Path,
    skip: impl Fn(&std::ffi::OsStr) -> bool,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(source)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == ".git" || skip(&name) {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), into.join(&name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fair_share_queues_a_whole_default_pack_per_replay_slot() {
        assert_eq!(
            DEFAULT_REPLAY_PACK as u64,
            cowork_core::share::REPLAY_JOBS_PER_SLOT
        );
    }

    fn finished(code: i32, results: &[Value], stderr: &str) -> Finished {
        let envelope = serde_json::json!({
            "tool": "cowork-harness", "version": "2.0.0", "command": "replay",
            "ok": false, "results": results, "error": null,
        });
        Finished {
            end: ProcessEnd::Exited(code),
            stdout: Captured {
                bytes: format!("{envelope}\n").into_bytes(),
                ..Default::default()
            },
            stderr: Captured {
                bytes: stderr.as_bytes().to_vec(),
                ..Default::default()
            },
        }
    }

    fn stub(path: &str) -> Value {
        serde_json::json!({"scenario": path, "outDir": "", "verdict": {"pass": false, "exitCode": 1}})
    }

    fn replayed(name: &str, pass: bool) -> Value {
        serde_json::json!({"scenario": name, "outDir": "(replay)", "verdict": {"pass": pass, "exitCode": i32::from(!pass)}})
    }

    #[test]
    fn a_dir_replay_is_cut_into_each_cassettes_share() {
        let markers = [
            "/v/m0-1.cassette.json".to_owned(),
            "/v/m1-1.cassette.json".to_owned(),
        ];
        let links = [
            "/v/m0-0.cassette.json".to_owned(),
            "/v/m1-0.cassette.json".to_owned(),
        ];
        let stderr = "warn a\nreplay: /v/m0-0.cassette.json: tampered\n\
                      replay: /v/m0-1.cassette.json: unreadable / invalid cassette JSON: end\n\
                      warn b\nreplay: /v/m1-1.cassette.json: unreadable / invalid cassette JSON: end\n";
        let results = [
            stub(&links[0]),
            stub(&markers[0]),
            replayed("b", true),
            stub(&markers[1]),
        ];
        let shares = split(&finished(2, &results, stderr), &markers, &links).expect("split");
        assert_eq!(shares.len(), 2);
        assert_eq!(shares[0].exit_code, 2);
        assert_eq!(
            String::from_utf8_lossy(&shares[0].stderr),
            "warn a\nreplay: /v/m0-0.cassette.json: tampered\n"
        );
        assert_eq!(shares[0].envelope["results"][0]["scenario"], links[0]);
        assert_eq!(shares[0].envelope["ok"], false);
        assert_eq!(shares[1].exit_code, 0);
        assert_eq!(shares[1].envelope["ok"], true);
        assert_eq!(
            shares[1].envelope["results"],
            serde_json::json!([replayed("b", true)])
        );
        assert_eq!(String::from_utf8_lossy(&shares[1].stderr), "warn b\n");
        let failing = [
            replayed("a", false),
            stub(&markers[0]),
            replayed("b", true),
            stub(&markers[1]),
        ];
        let stderr = format!("replay: {}: x\nreplay: {}: x\n", markers[0], markers[1]);
        let shares = split(&finished(1, &failing, &stderr), &markers, &links).expect("split");
        assert_eq!(shares[0].exit_code, 1);
    }

    #[test]
    fn output_that_does_not_match_the_markers_is_refused() {
        let markers = ["/v/m0-1.cassette.json".to_owned()];
        let links = ["/v/m0-0.cassette.json".to_owned()];
        let line = format!("replay: {}: x\n", markers[0]);
        let good = [replayed("a", true), stub(&markers[0])];
        assert!(split(&finished(0, &good, &line), &markers, &links).is_ok());
        // No marker line, a result missing, results swapped, a signal, lines after the last
        // marker: each means the shares cannot be trusted.
        assert!(split(&finished(0, &good, ""), &markers, &links).is_err());
        assert!(split(&finished(0, &good[..1], &line), &markers, &links).is_err());
        let swapped = [stub(&markers[0]), replayed("a", true)];
        assert!(split(&finished(0, &swapped, &line), &markers, &links).is_err());
        let mut killed = finished(0, &good, &line);
        killed.end = ProcessEnd::Signaled(9);
        assert!(split(&killed, &markers, &links).is_err());
        let trailing = format!("{line}late\n");
        assert!(split(&finished(0, &good, &trailing), &markers, &links).is_err());
    }

    #[test]
    fn paths_of_the_view_are_put_back() {
        let rewrites = [
            (
                "/t/view/c/m0-0.cassette.json".to_owned(),
                "/b/c/x.cassette.json".to_owned(),
            ),
            ("/t/view".to_owned(), "/b".to_owned()),
        ];
        let mut value = serde_json::json!({"a": ["replay: /t/view/c/m0-0.cassette.json: x", "/t/view/sessions/s.yaml", 1]});
        rewrite_strings(&mut value, &rewrites);
        assert_eq!(
            value,
            serde_json::json!({"a": ["replay: /b/c/x.cassette.json: x", "/b/sessions/s.yaml", 1]})
        );
    }
}
