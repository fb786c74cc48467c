//! What a harness job left in Docker, found and removed after the job.
//!
//! The CLI names what it starts for a container or hostloop run after one token `<tok>`: the
//! containers `cowork-proxy-<tok>` (the egress proxy, started detached), `cowork-ct-<tok>` (the
//! agent) or `cowork-hl-<tok>` (hostloop), and the networks `cowork-int-<tok>` and
//! `cowork-out-<tok>`. Its SIGINT/SIGTERM handler removes them; SIGKILL, a hung daemon past the
//! grace, or a crash leaves them, and each run leaves two networks of Docker's small address
//! pool. The proxy mounts `<run dir>/proxy`, inside the job's work dir, which ties a container
//! to its job: only containers with a mount below the job's work dir are removed, so the jobs
//! of other slots and other workers on the same engine are never touched.

use std::path::Path;

/// Name prefixes of the CLI's containers.
pub const CONTAINER_PREFIXES: &[&str] = &["cowork-proxy-", "cowork-ct-", "cowork-hl-"];

/// Name prefixes of the CLI's networks, followed by the run's token.
pub const NETWORK_PREFIXES: &[&str] = &["cowork-int-", "cowork-out-"];

/// What to remove for one job: container names and network names.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
}

/// The leftovers of the job whose work dir is `work_dir`, from `docker inspect` lines of the
/// form `<name> <mount source> <mount source> …` (a name starts with `/`).
pub fn select(inspect_lines: &str, work_dir: &Path) -> Leftovers {
    let mut leftovers = Leftovers::default();
    for line in inspect_lines.lines() {
        let mut fields = line.split_whitespace();
        let Some(name) = fields.next().map(|name| name.trim_start_matches('/')) else {
            continue;
        };
        let Some(token) = CONTAINER_PREFIXES
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix))
        else {
            continue;
        };
        if token.is_empty() || !fields.any(|source| Path::new(source).starts_with(work_dir)) {
            continue;
        }
        leftovers.containers.push(name.to_owned());
        for prefix in NETWORK_PREFIXES {
            let network = format!("{prefix}{token}");
            if !leftovers.networks.contains(&network) {
                leftovers.networks.push(network);
            }
        }
    }
    leftovers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_cli_containers_mounting_this_job_are_selected_with_their_networks() {
        let lines = "/cowork-proxy-rabc /w/job1/runs/s/local_1/proxy\n\
                     /cowork-ct-rabc /w/job1/runs/s/local_1/work /other\n\
                     /cowork-proxy-rxyz /w/job2/runs/s/local_2/proxy\n\
                     /unrelated /w/job1\n\
                     /cowork-hl-\n";
        let leftovers = select(lines, Path::new("/w/job1"));
        assert_eq!(
            leftovers.containers,
            ["cowork-proxy-rabc", "cowork-ct-rabc"]
        );
        assert_eq!(leftovers.networks, ["cowork-int-rabc", "cowork-out-rabc"]);
        assert_eq!(select(lines, Path::new("/w/job")), Leftovers::default());
    }
}
