//! `cowork bench replay`: a replay corpus through `cowork run --replay` against the CLI's own
//! dir replay on the same cores, side by side in each round (harness-behaviour.md#replay-packs).
//!
//! The baseline is what a person would do by hand to use every core: one `cowork-harness
//! replay <dir>` per slot, each over an even slice of the corpus. A slice is a dir of symlinks
//! laid beside the corpus dir, so a session path relative to a cassette's dir resolves as it
//! does from the corpus. The slices are removed at the end, also on an error.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use cowork_schema::layout::StoreRoot;
use cowork_schema::layout::names::CASSETTE_SUFFIX;

use crate::exit::CliError;

/// What `cowork bench replay` measures.
pub struct ReplayBench {
    pub cassettes: PathBuf,
    pub harness_bin: PathBuf,
    pub slots: u16,
    pub rounds: u32,
}

pub async fn run(bench: &ReplayBench) -> Result<i32, CliError> {
    let corpus = std::path::absolute(&bench.cassettes)
        .with_context(|| format!("resolving {}", bench.cassettes.display()))?;
    let mut names: Vec<String> = std::fs::read_dir(&corpus)
        .with_context(|| format!("reading the corpus {}", corpus.display()))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(CASSETTE_SUFFIX))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(CliError::usage(format!(
            "{}: no *{CASSETTE_SUFFIX} files (give --cassettes a dir of cassettes)",
            corpus.display()
        )));
    }
    let parent = corpus
        .parent()
        .context("the corpus dir has no parent to lay its slices beside")?;
    let slices = lay_slices(parent, &corpus, &names, usize::from(bench.slots))?;
    let cowork = std::env::current_exe().context("finding the cowork executable")?;
    let scratch =
        Scratch(std::env::temp_dir().join(format!("cowork-bench-replay-{}", std::process::id())));
    std::fs::create_dir_all(scratch.path())
        .with_context(|| format!("creating {}", scratch.path().display()))?;
    let n_cassettes = names.len();
    println!(
        "corpus: {n_cassettes} cassettes in {}; {} CLI processes over slices vs `cowork run --replay --slots {}`; {} cores",
        corpus.display(),
        slices.len(),
        bench.slots,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    for round in 1..=bench.rounds {
        let started = Instant::now();
        let mut children = Vec::with_capacity(slices.len());
        for slice in &slices {
            let child = tokio::process::Command::new(&bench.harness_bin)
                .arg("--run-dir")
                .arg(scratch.path().join("cli-runs"))
                .arg("replay")
                .arg(slice.path())
                .args(["--output-format", "json"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", bench.harness_bin.display()))?;
            children.push(child);
        }
        for mut child in children {
            // The exit code is the corpus's verdict (2 with a corrupt cassette); only the
            // time is measured here.
            child
                .wait()
                .await
                .with_context(|| format!("waiting for {}", bench.harness_bin.display()))?;
        }
        let cli_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let store = scratch.path().join(format!("store-{round}"));
        // From this process's dir, as the user would run it: the bundle root is found from
        // there (the corpus's sessions and skills must lie inside it).
        let status = tokio::process::Command::new(&cowork)
            .arg("run")
            .arg("--replay")
            .arg(&corpus)
            .arg("--slots")
            .arg(bench.slots.to_string())
            .arg("--harness-bin")
            .arg(&bench.harness_bin)
            .arg("--store")
            .arg(&store)
            .arg("--quiet")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .context("running cowork run --replay")?;
        // Exit 2 is also a corpus with a corrupt cassette; a refused one wrote no batch and
        // says why on stderr.
        if status.status.code() == Some(2) && !StoreRoot::new(&store).batches_dir().exists() {
            return Err(CliError::usage(format!(
                "cowork run --replay {} refused the corpus:\n{}",
                corpus.display(),
                String::from_utf8_lossy(&status.stderr).trim_end()
            )));
        }
        let status = status.status;
        let ours_s = started.elapsed().as_secs_f64();
        let n = n_cassettes as f64;
        println!(
            "round {round}: CLI {cli_s:.2} s ({:.0}/s) | cowork run {ours_s:.2} s ({:.0}/s, exit {}) | {:.2}x the CLI",
            n / cli_s,
            n / ours_s,
            status.code().unwrap_or(-1),
            cli_s / ours_s
        );
    }
    Ok(0)
}

/// A dir of the bench's own, removed when dropped (on an error too).
struct Scratch(PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a dir that cannot be removed is left for the user to see.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Lays `names` out as up to `n_slices` even slices of symlinks, each a dir beside `corpus`.
fn lay_slices(
    parent: &Path,
    corpus: &Path,
    names: &[String],
    n_slices: usize,
) -> Result<Vec<Scratch>, CliError> {
    let n_slices = n_slices.clamp(1, names.len());
    let per_slice = names.len().div_ceil(n_slices);
    let mut slices = Vec::with_capacity(n_slices);
    for (slice_idx, chunk) in names.chunks(per_slice).enumerate() {
        let slice = Scratch(parent.join(format!(
            ".cowork-bench-replay-{}-{slice_idx}",
            std::process::id()
        )));
        std::fs::create_dir(slice.path())
            .with_context(|| format!("creating the slice dir {}", slice.path().display()))?;
        for name in chunk {
            std::os::unix::fs::symlink(corpus.join(name), slice.path().join(name))
                .with_context(|| format!("linking {name} into {}", slice.path().display()))?;
        }
        slices.push(slice);
    }
    Ok(slices)
}
