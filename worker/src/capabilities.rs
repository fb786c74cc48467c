//! The capability probe: which tiers this host can serve (decisions.md#executors,
//! harness-behaviour.md#tier-prerequisites).
//!
//! At start-up the worker asks the host once — OS, arch, Lima's `limactl`, a Docker engine
//! through the `docker` CLI, and `<harness-bin> --version` — with [`probe`]. The decision is the
//! pure [`servable_tiers`]: it maps the requested tiers, the probe and the executor to the tiers
//! served and, for every other tier, the reason and the fix. A worker pulls only the served
//! tiers and advertises only them, so a job is never handed to a worker that cannot run it.
//!
//! Prerequisites per executor:
//! - `harness`: `microvm` needs `limactl` on a macOS host (the override lets Lima run it
//!   elsewhere); `container` and `hostloop` need a Docker engine the harness can reach;
//!   `replay` needs nothing the probe models; `protocol` needs the agent binary `claude` on the
//!   `PATH` the harness gets, because the CLI spawns it from there and, when it is missing,
//!   kills its own process group instead of reporting it.
//! - `container`: every tier needs the Docker engine the executor creates its containers in;
//!   `microvm` is never served, because a Lima VM does not run inside a job container.
//! - `sim`: every tier is served, because the simulator runs nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cowork_schema::batch::ExecutorKind;
use cowork_schema::job::Tier;

/// A program the worker or its harness needs, as the probe found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tool {
    /// The program ran and printed this version (the first line of its stdout).
    Ready { version: String },
    /// The program is missing, failed or did not answer; `reason` says which.
    Unavailable { reason: String },
    /// The probe did not look for it, because the executor does not need it.
    NotProbed,
}

impl Tool {
    /// The version, when the program answered.
    pub fn version(&self) -> Option<&str> {
        match self {
            Tool::Ready { version } => Some(version),
            Tool::Unavailable { .. } | Tool::NotProbed => None,
        }
    }

    /// `true` when the program answered.
    pub fn is_ready(&self) -> bool {
        matches!(self, Tool::Ready { .. })
    }

    /// A short description for logs: the version, or why it is missing.
    pub fn describe(&self) -> String {
        match self {
            Tool::Ready { version } => version.clone(),
            Tool::Unavailable { reason } => format!("unavailable ({reason})"),
            Tool::NotProbed => "not probed".to_owned(),
        }
    }

    fn reason(&self) -> &str {
        match self {
            Tool::Ready { .. } => "it answered",
            Tool::Unavailable { reason } => reason,
            Tool::NotProbed => "it was not probed",
        }
    }
}

/// What the capability probe found on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostProbe {
    /// The operating system as Rust names it (`std::env::consts::OS`): `macos`, `linux`, …
    pub os: String,
    /// The CPU architecture (`std::env::consts::ARCH`): `aarch64`, `x86_64`, …
    pub arch: String,
    /// `limactl --version`: the harness runs its `microvm` tier in a Lima VM.
    pub limactl: Tool,
    /// `docker version --format {{.Server.Version}}`: the engine's version when it answers.
    pub docker: Tool,
    /// `<harness-bin> --version`: the harness CLI this worker spawns
    /// (harness-behaviour.md#cli-version-pin).
    pub harness: Tool,
    /// [`AGENT_BINARY`] on the `PATH` the harness gets: its path when found.
    pub agent: Tool,
}

/// The agent binary the CLI spawns from `PATH` at fidelity protocol.
pub const AGENT_BINARY: &str = "claude";

/// The first executable file `name` in the directories of `path` (a `PATH` value).
pub fn find_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// Looks for [`AGENT_BINARY`] on `path` (the `PATH` the harness gets) without running it.
pub fn probe_agent(path: Option<&std::ffi::OsStr>) -> Tool {
    match find_on_path(AGENT_BINARY, path) {
        Some(found) => Tool::Ready {
            version: found.display().to_string(),
        },
        None => Tool::Unavailable {
            reason: format!("`{AGENT_BINARY}` is not on the PATH the harness gets"),
        },
    }
}

/// Which programs [`probe`] runs. Plain data, so an operator or a test can point at others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Lima's CLI, looked up on PATH when bare; `None` skips it.
    pub limactl_bin: Option<PathBuf>,
    /// The Docker CLI, looked up on PATH when bare; `None` skips it.
    pub docker_bin: Option<PathBuf>,
    /// The harness CLI; `None` skips it.
    pub harness_bin: Option<PathBuf>,
    /// How long each program may take to answer before it counts as unavailable.
    pub timeout: Duration,
}

impl ProbeConfig {
    /// The programs `executor` depends on: the harness executor needs `limactl`, `docker` and
    /// the harness; the container executor needs `docker` (the harness is inside its image);
    /// the simulator needs nothing.
    pub fn for_executor(executor: ExecutorKind, harness_bin: &Path) -> ProbeConfig {
        let (limactl, docker, harness) = match executor {
            ExecutorKind::Harness => (true, true, true),
            ExecutorKind::Container => (false, true, false),
            ExecutorKind::Sim => (false, false, false),
        };
        ProbeConfig {
            limactl_bin: limactl.then(|| PathBuf::from("limactl")),
            docker_bin: docker.then(|| PathBuf::from("docker")),
            harness_bin: harness.then(|| harness_bin.to_path_buf()),
            // A hung program must not keep the worker from starting; 10 s is far above the
            // start-up time of any of these CLIs, including a Docker engine under load.
            timeout: Duration::from_secs(10),
        }
    }
}

/// Probes this host: OS and arch, then each configured program, all three at once.
pub async fn probe(config: &ProbeConfig) -> HostProbe {
    let (limactl, docker, harness) = tokio::join!(
        probe_tool(
            config.limactl_bin.as_deref(),
            &["--version"],
            config.timeout
        ),
        probe_tool(
            config.docker_bin.as_deref(),
            &["version", "--format", "{{.Server.Version}}"],
            config.timeout
        ),
        probe_tool(
            config.harness_bin.as_deref(),
            &["--version"],
            config.timeout
        ),
    );
    HostProbe {
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        limactl,
        docker,
        harness,
        agent: if config.harness_bin.is_some() {
            probe_agent(std::env::var_os("PATH").as_deref())
        } else {
            Tool::NotProbed
        },
    }
}

/// The harness inside the container executor's image: `docker run --rm --pull never
/// --entrypoint <program> <image> --version`, through the `docker` CLI. The image is never
/// pulled, as the executor never pulls it either.
pub async fn probe_image_harness(
    docker_bin: &Path,
    image: &str,
    program: &str,
    timeout: Duration,
) -> Tool {
    let args = [
        "run",
        "--rm",
        "--pull",
        "never",
        "--entrypoint",
        program,
        image,
        "--version",
    ];
    probe_tool(Some(docker_bin), &args, timeout).await
}

/// Runs `program args…` and reads the first line of its stdout as the version. A program that
/// exits non-zero is unavailable even if it printed something: `docker version` prints the
/// client's part before it fails to reach the engine.
async fn probe_tool(program: Option<&Path>, args: &[&str], timeout: Duration) -> Tool {
    let Some(program) = program else {
        return Tool::NotProbed;
    };
    let name = program.display();
    let run = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            return Tool::Unavailable {
                reason: format!("`{name}` did not answer within {} s", timeout.as_secs()),
            };
        }
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            return Tool::Unavailable {
                reason: format!("`{name}` is not on PATH"),
            };
        }
        Ok(Err(error)) => {
            return Tool::Unavailable {
                reason: format!("`{name}` could not be started: {error}"),
            };
        }
        Ok(Ok(output)) => output,
    };
    let first_line = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(str::to_owned)
    };
    if !output.status.success() {
        let detail = first_line(&output.stderr).unwrap_or_default();
        return Tool::Unavailable {
            reason: format!(
                "`{name} {}` failed ({}): {detail}",
                args.join(" "),
                output.status
            )
            .trim_end_matches([':', ' '])
            .to_owned(),
        };
    }
    match first_line(&output.stdout) {
        Some(version) => Tool::Ready { version },
        None => Tool::Unavailable {
            reason: format!("`{name} {}` printed nothing", args.join(" ")),
        },
    }
}

/// Operator overrides of the probe's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierOverrides {
    /// Tiers served without checking their prerequisites (`--assume-tiers`), e.g. when the
    /// engine is reached in a way the probe cannot see.
    pub assume: Vec<Tier>,
    /// Serve `microvm` with the harness executor on a host that is not macOS, as long as
    /// `limactl` answers (`--allow-microvm-off-macos`; Lima also runs on Linux).
    pub microvm_off_macos: bool,
}

/// A requested tier this worker does not serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedTier {
    pub tier: Tier,
    /// What is missing, e.g. "microvm needs limactl on a macOS host: `limactl` is not on PATH".
    pub reason: String,
    /// What the operator can do about it.
    pub fix: String,
}

/// The outcome of [`servable_tiers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierDecision {
    /// The requested tiers this worker serves, in the order requested.
    pub served: Vec<Tier>,
    /// The requested tiers it refuses, in the order requested, each with reason and fix.
    pub refused: Vec<RefusedTier>,
}

/// Splits the requested tiers into the ones `executor` can serve on the probed host and the
/// ones it cannot, with the reason and the fix for each refusal.
pub fn servable_tiers(
    requested: &[Tier],
    probe: &HostProbe,
    executor: ExecutorKind,
    overrides: &TierOverrides,
) -> TierDecision {
    let mut served = Vec::new();
    let mut refused = Vec::new();
    for &tier in requested {
        if overrides.assume.contains(&tier) {
            served.push(tier);
            continue;
        }
        match refusal(tier, probe, executor, overrides) {
            None => served.push(tier),
            Some((reason, fix)) => refused.push(RefusedTier { tier, reason, fix }),
        }
    }
    TierDecision { served, refused }
}

/// Why `executor` cannot serve `tier` on the probed host, and the fix; `None` when it can.
fn refusal(
    tier: Tier,
    probe: &HostProbe,
    executor: ExecutorKind,
    overrides: &TierOverrides,
) -> Option<(String, String)> {
    let name = tier.as_str();
    let assume_fix =
        format!("or pass --assume-tiers {name} if it is served in a way the probe cannot see");
    let docker_refusal = |needed_by: &str| {
        (
            format!(
                "{name} needs a Docker engine for {needed_by}: {}",
                probe.docker.reason()
            ),
            format!(
                "start Docker (or set DOCKER_HOST) so that `docker version` reaches the engine, {assume_fix}"
            ),
        )
    };
    match executor {
        // The simulator runs nothing, so no tier has a prerequisite.
        ExecutorKind::Sim => None,
        ExecutorKind::Container => match tier {
            Tier::Microvm => Some((
                "microvm is not served by the container executor: a Lima VM does not run inside a job container".to_owned(),
                "serve microvm from a macOS worker with --executor harness and limactl installed".to_owned(),
            )),
            Tier::Container | Tier::Hostloop | Tier::Protocol | Tier::Replay => {
                (!probe.docker.is_ready()).then(|| docker_refusal("the container executor"))
            }
        },
        ExecutorKind::Harness => match tier {
            Tier::Microvm => {
                let mut missing = Vec::new();
                if !probe.limactl.is_ready() {
                    missing.push(probe.limactl.reason().to_owned());
                }
                let on_macos = probe.os == "macos";
                if !on_macos && !overrides.microvm_off_macos {
                    missing.push(format!("this host runs {}, not macOS", probe.os));
                }
                if missing.is_empty() {
                    return None;
                }
                let fix = if probe.limactl.is_ready() {
                    format!(
                        "serve microvm from a macOS worker, or pass --allow-microvm-off-macos to let Lima run it on {}",
                        probe.os
                    )
                } else if on_macos || overrides.microvm_off_macos {
                    format!(
                        "install Lima (`brew install lima`) so that `limactl` is on PATH, then run `cowork-harness vm init`, {assume_fix}"
                    )
                } else {
                    "serve microvm from a macOS worker with Lima installed (`brew install lima`, then `cowork-harness vm init`)".to_owned()
                };
                Some((
                    format!(
                        "microvm needs limactl on a macOS host: {}",
                        missing.join("; ")
                    ),
                    fix,
                ))
            }
            Tier::Container | Tier::Hostloop => {
                (!probe.docker.is_ready()).then(|| docker_refusal("the harness"))
            }
            // Replay reads a cassette and starts no sandbox.
            Tier::Replay => None,
            // Protocol needs only the host agent; the CLI does not report a missing one, it
            // kills its own process group, so it is checked here before any job is taken.
            Tier::Protocol => match &probe.agent {
                Tool::Unavailable { reason } => Some((
                    format!("protocol needs the agent binary `{AGENT_BINARY}`: {reason}"),
                    format!(
                        "install Claude Code so that `{AGENT_BINARY}` is on the worker's PATH, {assume_fix}"
                    ),
                )),
                Tool::Ready { .. } | Tool::NotProbed => None,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMA: &str = "limactl version 1.0.3";
    const DOCKER: &str = "27.3.1";

    /// A probed host: `os`, with `limactl` and the Docker engine answering or not.
    fn host(os: &str, limactl: bool, docker: bool) -> HostProbe {
        let tool = |ready: bool, version: &str, program: &str| {
            if ready {
                Tool::Ready {
                    version: version.to_owned(),
                }
            } else {
                Tool::Unavailable {
                    reason: format!("`{program}` is not on PATH"),
                }
            }
        };
        HostProbe {
            os: os.to_owned(),
            arch: "aarch64".to_owned(),
            limactl: tool(limactl, LIMA, "limactl"),
            docker: tool(docker, DOCKER, "docker"),
            harness: Tool::Ready {
                version: "2.0.0".to_owned(),
            },
            agent: Tool::Ready {
                version: "/usr/bin/claude".to_owned(),
            },
        }
    }

    fn tiers(names: &str) -> Vec<Tier> {
        names
            .split(',')
            .filter(|name| !name.is_empty())
            .map(|name| Tier::parse(name).expect("a tier name in the table"))
            .collect()
    }

    /// The decision for `requested` (comma-separated tier names).
    fn decide(
        requested: &str,
        probe: &HostProbe,
        executor: ExecutorKind,
        overrides: &TierOverrides,
    ) -> TierDecision {
        servable_tiers(&tiers(requested), probe, executor, overrides)
    }

    /// Checks which tiers are served, which are refused, and that each refusal's reason
    /// contains its expected fragment and comes with a fix.
    fn check(decision: &TierDecision, expect_served: &str, expect_refused: &[(&str, &str)]) {
        assert_eq!(
            decision.served,
            tiers(expect_served),
            "served: {decision:?}"
        );
        let refused: Vec<Tier> = decision.refused.iter().map(|r| r.tier).collect();
        let expected: Vec<Tier> = expect_refused
            .iter()
            .map(|(name, _)| Tier::parse(name).expect("a tier name in the table"))
            .collect();
        assert_eq!(refused, expected, "refused: {decision:?}");
        for (refusal, (_, fragment)) in decision.refused.iter().zip(expect_refused) {
            assert!(
                refusal.reason.contains(fragment),
                "reason {:?} lacks {fragment:?}",
                refusal.reason
            );
            assert!(!refusal.fix.is_empty(), "{refusal:?} has no fix");
        }
    }

    const ALL: &str = "container,hostloop,microvm,protocol,replay";

    #[test]
    fn harness_on_a_mac_with_lima_and_docker_serves_every_tier() {
        let mac = host("macos", true, true);
        check(
            &decide(ALL, &mac, ExecutorKind::Harness, &TierOverrides::default()),
            ALL,
            &[],
        );
    }

    #[test]
    fn harness_on_linux_without_lima_refuses_microvm_naming_limactl_and_the_os() {
        let linux = host("linux", false, true);
        check(
            &decide(
                "container,microvm",
                &linux,
                ExecutorKind::Harness,
                &TierOverrides::default(),
            ),
            "container",
            &[(
                "microvm",
                "`limactl` is not on PATH; this host runs linux, not macOS",
            )],
        );
    }

    #[test]
    fn harness_microvm_needs_macos_even_with_lima_unless_overridden() {
        let linux_with_lima = host("linux", true, true);
        check(
            &decide(
                "microvm",
                &linux_with_lima,
                ExecutorKind::Harness,
                &TierOverrides::default(),
            ),
            "",
            &[("microvm", "this host runs linux, not macOS")],
        );
        let off_macos = TierOverrides {
            microvm_off_macos: true,
            ..TierOverrides::default()
        };
        check(
            &decide(
                "microvm",
                &linux_with_lima,
                ExecutorKind::Harness,
                &off_macos,
            ),
            "microvm",
            &[],
        );
        // The override lifts only the OS condition: limactl is still required.
        check(
            &decide(
                "microvm",
                &host("linux", false, true),
                ExecutorKind::Harness,
                &off_macos,
            ),
            "",
            &[("microvm", "limactl")],
        );
    }

    #[test]
    fn harness_on_a_mac_without_lima_refuses_microvm() {
        check(
            &decide(
                "microvm,replay",
                &host("macos", false, true),
                ExecutorKind::Harness,
                &TierOverrides::default(),
            ),
            "replay",
            &[("microvm", "`limactl` is not on PATH")],
        );
    }

    #[test]
    fn harness_without_docker_refuses_container_and_hostloop_only() {
        check(
            &decide(
                ALL,
                &host("macos", true, false),
                ExecutorKind::Harness,
                &TierOverrides::default(),
            ),
            "microvm,protocol,replay",
            &[
                (
                    "container",
                    "needs a Docker engine for the harness: `docker` is not on PATH",
                ),
                ("hostloop", "needs a Docker engine"),
            ],
        );
    }

    #[test]
    fn assumed_tiers_skip_the_probe() {
        let assume = TierOverrides {
            assume: tiers("microvm,container"),
            ..TierOverrides::default()
        };
        check(
            &decide(
                "container,hostloop,microvm",
                &host("linux", false, false),
                ExecutorKind::Harness,
                &assume,
            ),
            "container,microvm",
            &[("hostloop", "Docker")],
        );
    }

    #[test]
    fn protocol_needs_the_agent_binary_on_the_harness_path() {
        let mut no_agent = host("linux", false, true);
        no_agent.agent = Tool::Unavailable {
            reason: "`claude` is not on the PATH the harness gets".to_owned(),
        };
        check(
            &decide(
                "protocol,replay",
                &no_agent,
                ExecutorKind::Harness,
                &TierOverrides::default(),
            ),
            "replay",
            &[("protocol", "protocol needs the agent binary `claude`")],
        );
        let assumed = TierOverrides {
            assume: tiers("protocol"),
            ..TierOverrides::default()
        };
        check(
            &decide("protocol", &no_agent, ExecutorKind::Harness, &assumed),
            "protocol",
            &[],
        );
    }

    #[test]
    fn sim_serves_every_tier_on_a_bare_host() {
        let bare = HostProbe {
            os: "linux".to_owned(),
            arch: "x86_64".to_owned(),
            limactl: Tool::NotProbed,
            docker: Tool::NotProbed,
            harness: Tool::NotProbed,
            agent: Tool::NotProbed,
        };
        check(
            &decide(ALL, &bare, ExecutorKind::Sim, &TierOverrides::default()),
            ALL,
            &[],
        );
    }

    #[test]
    fn container_executor_needs_docker_for_every_tier_and_never_serves_microvm() {
        check(
            &decide(
                ALL,
                &host("macos", true, true),
                ExecutorKind::Container,
                &TierOverrides::default(),
            ),
            "container,hostloop,protocol,replay",
            &[("microvm", "a Lima VM does not run inside a job container")],
        );
        check(
            &decide(
                "replay,microvm",
                &host("linux", false, false),
                ExecutorKind::Container,
                &TierOverrides::default(),
            ),
            "",
            &[
                ("replay", "needs a Docker engine for the container executor"),
                ("microvm", "container executor"),
            ],
        );
    }

    #[test]
    fn served_and_refused_keep_the_requested_order() {
        check(
            &decide(
                "replay,microvm,hostloop,container",
                &host("linux", false, true),
                ExecutorKind::Harness,
                &TierOverrides::default(),
            ),
            "replay,hostloop,container",
            &[("microvm", "limactl")],
        );
    }

    #[test]
    fn probe_config_asks_only_for_what_the_executor_needs() {
        let harness = Path::new("/opt/cowork-harness");
        let config = ProbeConfig::for_executor(ExecutorKind::Harness, harness);
        assert_eq!(config.limactl_bin.as_deref(), Some(Path::new("limactl")));
        assert_eq!(config.docker_bin.as_deref(), Some(Path::new("docker")));
        assert_eq!(config.harness_bin.as_deref(), Some(harness));
        let config = ProbeConfig::for_executor(ExecutorKind::Container, harness);
        assert_eq!(
            (
                config.limactl_bin,
                config.docker_bin.is_some(),
                config.harness_bin
            ),
            (None, true, None)
        );
        let config = ProbeConfig::for_executor(ExecutorKind::Sim, harness);
        assert_eq!(
            (config.limactl_bin, config.docker_bin, config.harness_bin),
            (None, None, None)
        );
    }
}
