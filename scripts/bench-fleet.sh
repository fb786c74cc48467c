#!/usr/bin/env bash
# The fleet benchmark, in one run on this machine: the raw baselines and real `cowork
# coordinator` / `cowork worker` processes on the same servers.
#
# Starts a nats-server (JetStream on disk) and an s3s-fs server on loopback ports in a temp dir,
# then runs:
#   1. `cowork bench jetstream` (the broker alone) and `cowork bench pipeline` (per job exactly the
#      fleet's durable work, through the same clients, WORKERS x SLOTS jobs in flight);
#   2. for each tier set of TIER_SETS: a coordinator process and WORKERS worker processes (sim
#      executor, SLOTS slots each) serving that set, and `cowork bench fleet --coordinator`, which
#      submits the batch (always on tier container) and times it from submit to decided;
# and prints every rate, fleet / pipeline, each tier set against the first, and the peak RSS of
# the coordinator and worker processes.
#
# Settings (environment): JOBS (20000, also the most: the demo's two scenarios × --repeat),
# WORKERS (2), SLOTS (8), WINDOW (512, the coordinator's admission window and the pipeline's),
# DURATION_MS (0 = zero-duration jobs), LIVE_PAGES (0; N opens N live pages on each fleet batch:
# the page, its script and its live stream to the verdict), BASELINES (1; 0 skips the raw
# baselines), TIER_SETS
# ("container container,hostloop,microvm,protocol,replay"). With DURATION_MS > 0 the jobs sleep
# exactly that long and the fleet runs print their scaling efficiency; the raw baselines are skipped:
#   WORKERS=4 SLOTS=16 JOBS=640 DURATION_MS=2000 scripts/bench-fleet.sh
#
# Needs nats-server and s3s-fs on PATH (.ci/run installs them) and a release build:
#   cargo build --release -p cowork-cli
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-20000}"
WORKERS="${WORKERS:-2}"
SLOTS="${SLOTS:-8}"
WINDOW="${WINDOW:-512}"
DURATION_MS="${DURATION_MS:-0}"
LIVE_PAGES="${LIVE_PAGES:-0}"
TIER_SETS="${TIER_SETS:-container container,hostloop,microvm,protocol,replay}"
# shellcheck source=scripts/fleet-lib.sh
source scripts/fleet-lib.sh
bench_preamble
rate_of() { sed -nE 's/.* = ([0-9]+) (jobs|msg)\/s.*/\1/p' | head -n1; }

start_servers "$dir"
echo "load before: $(uptime)"

pipeline_rate=""
if [ "$DURATION_MS" = 0 ] && [ "${BASELINES:-1}" = 1 ]; then
  raw=$("$BIN" bench jetstream --messages "$JOBS")
  echo "$raw"
  pipeline=$("$BIN" bench pipeline --jobs "$JOBS" --workers "$WORKERS" --slots "$SLOTS" --window "$WINDOW" --s3-create-bucket)
  echo "$pipeline"
  pipeline_rate=$(echo "$pipeline" | rate_of)
fi

rates=()
for tiers in $TIER_SETS; do
  api_port=$(free_port)
  "$BIN" coordinator --listen "127.0.0.1:$api_port" --allow-unauthenticated --s3-create-bucket \
    --scratch-dir "$dir/coordinator" --window "$WINDOW" >>"$dir/coordinator.log" 2>&1 &
  fleet+=($!)
  wait_port "$api_port"
  for i in $(seq "$WORKERS"); do
    "$BIN" worker --executor sim --tiers "$tiers" --slots "$SLOTS" --worker-id "bench-w$i" \
      --cache-dir "$dir/w$i/cache" --work-dir "$dir/w$i/work" >>"$dir/worker-$i.log" 2>&1 &
    fleet+=($!)
  done
  run=$("$BIN" bench fleet --coordinator "http://127.0.0.1:$api_port" --jobs "$JOBS" \
    --workers "$WORKERS" --slots "$SLOTS" --duration-ms "$DURATION_MS" --live-pages "$LIVE_PAGES")
  echo "tiers $tiers: $run"
  # Peak resident memory of the coordinator (the first process started) and of the workers.
  peaks=""
  for pid in "${fleet[@]}"; do
    peaks+=" $(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status" 2>/dev/null || echo "?")"
  done
  read -r coordinator_peak worker_peaks <<<"$peaks"
  echo "peak RSS: coordinator $coordinator_peak MiB; workers $worker_peaks MiB"
  rates+=("$(echo "$run" | rate_of)")
  stop_fleet
done
echo "load after: $(uptime)"

python3 - "$pipeline_rate" "$TIER_SETS" "${rates[@]}" <<'PY'
import sys
pipeline, tier_sets, rates = sys.argv[1], sys.argv[2].split(), [float(r) for r in sys.argv[3:]]
for index, (tiers, rate) in enumerate(zip(tier_sets, rates)):
    line = f"fleet ({tiers}) {rate:.0f} jobs/s"
    if pipeline:
        line += f"; fleet / pipeline = {rate:.0f}/{float(pipeline):.0f} = {rate / float(pipeline):.3f}"
    if index > 0:
        line += f"; against the first tier set = {rate / rates[0]:.3f}"
    print(line)
PY
