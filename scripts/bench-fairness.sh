#!/usr/bin/env bash
# The fairness benchmark in one run on this machine: how a fleet of real processes shares its
# slots between batches.
#
# Starts a nats-server (JetStream on disk) and an s3s-fs server on loopback ports in a temp dir,
# one `cowork coordinator` (default admission window unless WINDOW is set) and WORKERS `cowork
# worker --executor sim` processes of SLOTS slots each, then runs `cowork bench fairness`
# against them (every job exactly DURATION_MS): a 4-job batch idle, beside a running SWEEP_JOBS
# sweep and beside a BIG_SWEEP_JOBS sweep; two SWEEP_JOBS sweeps together; an urgent 8-job
# batch beside two running sweeps of class batch. Prints its table and stops everything.
#
# Settings (environment): WORKERS (2), SLOTS (4), DURATION_MS (1000), SWEEP_JOBS (320),
# BIG_SWEEP_JOBS (3200), WINDOW (unset: the coordinator's default), CHECK (0; 1 passes --check,
# so a missed target exits 1).
#
# Needs nats-server and s3s-fs on PATH (.ci/run installs them) and a release build:
#   cargo build --release -p cowork-cli
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS="${WORKERS:-2}"
SLOTS="${SLOTS:-4}"
DURATION_MS="${DURATION_MS:-1000}"
SWEEP_JOBS="${SWEEP_JOBS:-320}"
BIG_SWEEP_JOBS="${BIG_SWEEP_JOBS:-3200}"
# shellcheck source=scripts/fleet-lib.sh
source scripts/fleet-lib.sh
bench_preamble

start_servers "$dir"
api_port=$(free_port)
echo "load before: $(uptime)"

window_args=()
if [ -n "${WINDOW:-}" ]; then window_args=(--window "$WINDOW"); fi
"$BIN" coordinator --listen "127.0.0.1:$api_port" --allow-unauthenticated --s3-create-bucket \
  --scratch-dir "$dir/coordinator" "${window_args[@]}" >>"$dir/coordinator.log" 2>&1 &
fleet+=($!)
wait_port "$api_port"
for i in $(seq "$WORKERS"); do
  "$BIN" worker --executor sim --tiers container --slots "$SLOTS" --worker-id "bench-w$i" \
    --cache-dir "$dir/w$i/cache" --work-dir "$dir/w$i/work" >>"$dir/worker-$i.log" 2>&1 &
  fleet+=($!)
done

check_args=()
if [ "${CHECK:-0}" = 1 ]; then check_args=(--check); fi
status=0
"$BIN" bench fairness --coordinator "http://127.0.0.1:$api_port" --workers "$WORKERS" \
  --slots "$SLOTS" --duration-ms "$DURATION_MS" --sweep-jobs "$SWEEP_JOBS" \
  --big-sweep-jobs "$BIG_SWEEP_JOBS" "${check_args[@]}" || status=$?
echo "load after: $(uptime)"
if [ "$status" != 0 ]; then
  echo "--- coordinator log (tail)" >&2
  tail -n 20 "$dir/coordinator.log" >&2
fi
exit "$status"
