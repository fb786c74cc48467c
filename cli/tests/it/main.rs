//! End-to-end tests of the `cowork` binary: each test runs the real executable in its own temp
//! dir with its own `--store`, and judges only what a user sees — exit codes, stdout, stderr and
//! the files under the store.
//!
//! Modules, in reading order: `support` (sandbox, command runner, JSON helpers) and `fleet` (a
//! real nats-server, S3 server, coordinator and workers as processes); `run` (the demo batch,
//! plain repeats, matrix cell errors, accepted flag forms), `rollup` (re-judging a stored batch),
//! `bad_input` (usage errors: exit 2 and nothing written), `hostile` (malicious inputs and
//! archives refused by `run` and by the coordinator, nothing stored), `harness` (the harness
//! executor against the strict double `strict-harness`), `help`, `distributed` (the fleet end to
//! end, `cowork submit`), `disruption` (a worker whose sandboxes cannot start, a worker
//! stopped mid-job: handed back, counted apart, run elsewhere), `faults` (workers, coordinator, NATS and S3 broken mid-batch, jobs
//! delivered twice, a worker cut off in a network namespace), `recovery` (cancel
//! `--kill-running`, resume, retries), `interrupt` (Ctrl-C and `kill -9` of `cowork run`, and
//! `cowork resume` of the local store), `limits` (batch budget and model limits on three
//! workers), `notify` (signed notifications from `run`, the fleet and `notify-test`), `budget` (per-unit budget and speculation bound with parallel slots),
//! `capabilities` (workers serve only the tiers their host can), `conformance` (against the
//! real cowork-harness CLI: replay, run, record, staging, signals, the fleet), `strict_double` (every
//! transcript of the real CLI answered alike by the strict double `strict-harness`), `secrets` (a canary
//! secret reaches only the harness), `multihost` (the fleet as Docker containers on a test
//! network, a worker killed and one disconnected), `cluster` (the fleet on a three-node NATS
//! cluster on loopback: a node lost for good, a rolling restart, a lost quorum named in
//! `status`), `cluster_docker` (the same cluster in containers: a partition of one node and its
//! worker, the coordinator cut off from the leader), `eval` (A/B batches embedded and on the
//! fleet), `spend` (no run paid twice: slow stores and brokers, a failed upload after spawn,
//! a worker killed between upload and ack, plain cancel, unserved tiers, refused workers,
//! start-up checks), `stall` (a batch marked stalled for a tier no worker serves or a worker
//! killed mid-batch, and cancelled by `--on-stall cancel`), `report` (`cowork report` in every format), `browser` (headless Chromium
//! on a generated report and on the coordinator's pages), `live_browser` (Chromium driven over
//! the DevTools protocol by `cdp` on the live page of a fleet batch and of `cowork run --ui`:
//! pause, resume, cancel clicked), `live_page` (the live page's script in Chromium on a crafted
//! view: its words, controls and heatmap), `telemetry` (OTLP traces of a run
//! received by an in-test collector), `first_run` (a missing harness, piped stderr, the small
//! things a first run trips on), `first_fleet` (a first fleet of two sim workers: refusals at
//! submit, unserved tiers said in a pipe, a shared cache dir, a killed worker listed as lost),
//! `connect` (a `--coordinator` address read, refused or named as not a coordinator; which
//! batch `resume` resumes when a local store and a coordinator both could), `history` (`batches`, `latest`, `diff`, `trend`, `--dry-run`
//! and the rollup of an interrupted batch), `morning` (the short morning view of `diff` and
//! `trend` after two 1,000-cell sweeps, `--all`, and quarantine suggestions), `readme` (the
//! README's quick start, run from the README's own text), `priority` (a batch's `--priority` stored with it, and
//! `--token-policy` capping a token's class and naming its batches), `quarantine` (units that run but do
//! not gate: expiry, reports, rollup, a git ref's file, the fleet), `bounds` (what a client can make the coordinator hold: a flood of idle
//! connections, the store reads of many batch starts), `trust` (the trust boundaries:
//! forged events and jobs, NATS permissions, the sim executor's path confinement, control
//! characters in every output, secrets in log lines, read-only tokens), `whole_cost` (sandbox
//! minutes under a batch budget, unpriced tiers and models refused at submit, an eval's whole
//! cost per arm) and `writable_dirs` (a
//! worker, coordinator or `cowork run` refused at start-up for a directory it cannot write).

mod cdp;
mod fleet;
mod support;

mod bad_input;
mod bounds;
mod browser;
mod budget;
mod cancelled;
mod capabilities;
mod cluster;
mod cluster_docker;
mod conformance;
mod connect;
mod disruption;
mod distributed;
mod eval;
mod eval_arms;
mod eval_power;
mod eval_sequential;
mod faults;
mod first_fleet;
mod first_run;
mod fleet_watch;
mod harness;
mod help;
mod history;
mod hostile;
mod https;
mod interrupt;
mod leader;
mod limits;
mod live_browser;
mod live_page;
mod morning;
mod multihost;
mod notify;
mod priority;
mod quarantine;
mod readme;
mod recovery;
mod report;
mod rollup;
mod run;
mod secrets;
mod share;
mod spend;
mod stall;
mod steer;
mod strict_double;
mod telemetry;
mod trust;
mod trust_nats;
mod trust_nats_roles;
mod whole_cost;
mod writable_dirs;
