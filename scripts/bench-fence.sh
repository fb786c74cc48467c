#!/usr/bin/env bash
# What the queue's fence costs admission (decisions.md#coordinator-lease), measured on real
# servers: `cowork bench pipeline` (per job exactly the fleet's durable work) run alternately
# as before, with unchecked publishes, and `--fenced`, as a leading coordinator's term publishes
# (each job checked by the server against its lane's marker), ROUNDS times each.
#
# Starts a nats-server and an s3s-fs server on loopback in a temp dir.
# Settings (environment): JOBS (5000), ROUNDS (3), WORKERS (2), SLOTS (8), WINDOW (512).
# Needs nats-server and s3s-fs on PATH (.ci/run installs them) and a build of cowork:
#   cargo build --release -p cowork-cli && scripts/bench-fence.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-5000}"
ROUNDS="${ROUNDS:-3}"
WORKERS="${WORKERS:-2}"
SLOTS="${SLOTS:-8}"
WINDOW="${WINDOW:-512}"
# shellcheck source=scripts/fleet-lib.sh
source scripts/fleet-lib.sh
bench_preamble

start_servers "$dir"
echo "load before: $(uptime)"
for round in $(seq 1 "$ROUNDS"); do
  for fenced in "" "--fenced"; do
    out=$("$BIN" bench pipeline --jobs "$JOBS" --workers "$WORKERS" --slots "$SLOTS" \
      --window "$WINDOW" --s3-create-bucket $fenced)
    echo "round $round: $(echo "$out" | head -n1 | sed -E 's/: publish.* = ([0-9]+ jobs\/s).*/: \1/')"
  done
done
echo "load after: $(uptime)"
