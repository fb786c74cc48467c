//! The README's quick start, copied and pasted: the commands of its fenced `sh` blocks are read
//! from README.md itself and run, in order, in a fresh copy of `examples/` (no store, no git work
//! tree), with the `cowork` under test first on `PATH`.
//!
//! Each command must end as the README says. A `# ends with "TEXT"` line right after a command
//! names text its output (stdout or stderr) holds, and, when the text says `(exit N)`, its exit
//! code; any other command must exit 0. A command that writes `-o FILE` must leave the file.
//! `cargo install` is checked, not run (it would build the workspace again): it must install
//! the `cowork` binary of `cli/`. `scripts/test.sh` is what runs this test, so it is only
//! checked to exist.

use std::path::Path;
use std::process::Command;

use crate::support::{Output, Sandbox, copy_dir, workspace_root};

/// One command of the quick start, with what the README says it ends with.
#[derive(Debug)]
struct Step {
    command: String,
    ends_with: Option<String>,
}

/// The commands of the fenced `sh` blocks of the `## Quick start` section, in order.
fn quick_start(readme: &str) -> Vec<Step> {
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Quick start"))
        .expect("README.md has a `## Quick start` section");
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        let line = line.trim_end();
        if line.starts_with("```") {
            in_block = !in_block && line == "```sh";
            continue;
        }
        if !in_block || line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(text) = comment.trim().strip_prefix("ends with ") {
                let step = steps
                    .last_mut()
                    .expect("an `# ends with` line follows a command");
                step.ends_with = Some(text.trim_matches('"').to_owned());
            }
            continue;
        }
        steps.push(Step {
            command: line.to_owned(),
            ends_with: None,
        });
    }
    steps
}

/// The exit code `text` announces with `(exit N)`, else 0.
fn announced_exit(text: Option<&str>) -> i32 {
    text.and_then(|text| text.split("(exit ").nth(1))
        .and_then(|rest| rest.split(')').next())
        .and_then(|code| code.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `command` with `sh -c` in `cwd`, `cowork` found on `PATH` first and no `COWORK_*`
/// setting of the test's own environment.
fn shell(cwd: &Path, command: &str) -> Output {
    let cowork = Path::new(env!("CARGO_BIN_EXE_cowork"));
    let bin_dir = cowork.parent().expect("the binary lives in a directory");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(
            std::env::var_os("PATH")
                .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
    )
    .expect("PATH entries join");
    let mut shell = Command::new("sh");
    shell
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env("PATH", path);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("COWORK_") {
            shell.env_remove(name);
        }
    }
    let output = shell
        .output()
        .unwrap_or_else(|e| panic!("spawning sh -c {command:?}: {e}"));
    Output::new(format!("sh -c {command:?}"), cwd.to_path_buf(), output)
}

#[test]
fn the_readme_quick_start_ends_as_the_readme_says() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md reads");
    let steps = quick_start(&readme);
    assert!(
        steps
            .iter()
            .any(|step| step.command.starts_with("cowork run")),
        "the quick start runs a batch: {steps:#?}"
    );
    let sandbox = Sandbox::empty();
    copy_dir(&root.join("examples"), &sandbox.path().join("examples"));
    let mut ran = 0;
    for step in &steps {
        let command = step.command.as_str();
        if command.starts_with("cargo install") {
            assert_eq!(command, "cargo install --locked --path cli");
            let manifest =
                std::fs::read_to_string(root.join("cli/Cargo.toml")).expect("cli/Cargo.toml reads");
            assert!(
                manifest.contains("[[bin]]\nname = \"cowork\""),
                "`cargo install --path cli` must install the `cowork` binary"
            );
            continue;
        }
        if command == "scripts/test.sh" {
            assert!(root.join(command).is_file(), "{command} exists");
            continue;
        }
        assert!(
            command.starts_with("cowork "),
            "the README test does not know how to check {command:?}"
        );
        let out = shell(sandbox.path(), command);
        out.expect_code(announced_exit(step.ends_with.as_deref()));
        if let Some(text) = &step.ends_with
            && !out.stdout.contains(text.as_str())
            && !out.stderr.contains(text.as_str())
        {
            out.fail(&format!("the README says this ends with {text:?}"));
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        if let Some(position) = words.iter().position(|word| *word == "-o")
            && let Some(file) = words.get(position + 1)
            && !sandbox.path().join(file).is_file()
        {
            out.fail(&format!("{file} was not written"));
        }
        if out.stderr.contains('\x1b') || out.stdout.contains('\x1b') {
            out.fail("escape bytes in piped output");
        }
        ran += 1;
    }
    assert!(
        ran >= 3,
        "the quick start's cowork commands ran: {steps:#?}"
    );
}

#[test]
fn quick_start_steps_are_read_with_their_endings() {
    let readme = "intro\n## Quick start\n\n```sh\ncargo install x\n```\n\ntext\n\n```sh\ncowork run a\n\
                  # ends with \"verdict: FAIL (exit 1)\"\ncowork batches\n```\n\n```text\nnot me\n```\n\
                  ## Next\n```sh\ncowork never\n```\n";
    let steps = quick_start(readme);
    let got: Vec<(&str, Option<&str>)> = steps
        .iter()
        .map(|step| (step.command.as_str(), step.ends_with.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("cargo install x", None),
            ("cowork run a", Some("verdict: FAIL (exit 1)")),
            ("cowork batches", None),
        ]
    );
    assert_eq!(announced_exit(Some("verdict: FAIL (exit 1)")), 1);
    assert_eq!(announced_exit(Some("nothing was run")), 0);
    assert_eq!(announced_exit(None), 0);
}
