#!/usr/bin/env bash
# The coordinator takeover, measured on real processes (decisions.md#coordinator-lease).
#
# Starts a nats-server and an s3s-fs server on loopback in a temp dir, two coordinators (`a`,
# `b`) on them and one sim worker with 4 slots, submits a batch of 1-s jobs to the leader and,
# ROUNDS times, takes the leader away while the batch runs:
#   kill -9   the leader is killed; the time until the standby's /readyz says it leads: it holds
#             the lease and has resumed every unfinished batch (their supervision started);
#   SIGTERM   the leader stops cleanly and releases the lease; the same time;
#   SIGSTOP   the leader is stopped (as if cut off from NATS); the same time, then it is
#             continued and stands by by itself.
# The killed or stopped coordinator is started again and stands by for the next round. The batch
# must then end with every job once (its status is printed).
#
# Settings (environment): LEASE_TTL (6s, the default of `--lease-ttl`), ROUNDS (3).
# Needs nats-server, s3s-fs, curl and a build of cowork:
#   cargo build --release -p cowork-cli && scripts/bench-takeover.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LEASE_TTL="${LEASE_TTL:-6s}"
ROUNDS="${ROUNDS:-3}"
# shellcheck source=scripts/fleet-lib.sh
source scripts/fleet-lib.sh
bench_preamble

start_servers "$dir"
export COWORK_API_TOKEN=bench-token COWORK_LEASE_TTL="$LEASE_TTL"
declare -A port pid
port[a]=$(free_port)
port[b]=$(free_port)
start_coordinator() {
  "$BIN" coordinator --listen "127.0.0.1:${port[$1]}" --coordinator-id "$1" --s3-create-bucket \
    --scratch-dir "$dir/$1" >>"$dir/coordinator-$1.log" 2>&1 &
  pid[$1]=$!
  fleet+=($!)
  wait_port "${port[$1]}"
}
# A standby's /readyz is 200 as well (it forwards); the leader's body says it leads.
ready() { curl -sf "http://127.0.0.1:${port[$1]}/readyz" | grep -q '^ready: leading'; }
now() { date +%s.%N; }
start_coordinator a
until ready a; do sleep 0.05; done
start_coordinator b
"$BIN" worker --executor sim --tiers container --slots 4 --worker-id bench-w1 \
  --cache-dir "$dir/w1/cache" --work-dir "$dir/w1/work" >>"$dir/worker.log" 2>&1 &
fleet+=($!)
printf 'rules:\n  - pass_rate: 0.9\n    cost_usd: 0.01\n    duration_ms: 1000\n    time_scale: 1.0\n    duration_spread: 0\n' >"$dir/profile.yaml"
batch=$("$BIN" submit examples/demo/scenarios/csv-report.yaml --repeat $((ROUNDS * 3 * 40 + 40)) \
  --executor sim --sim-profile "$dir/profile.yaml" --coordinator "http://127.0.0.1:${port[a]}" 2>/dev/null)
echo "batch $batch, lease ttl $LEASE_TTL, load $(cut -d' ' -f1-3 /proc/loadavg)"
leader=a standby=b
for round in $(seq "$ROUNDS"); do
  for how in KILL TERM STOP; do
    until ready "$leader"; do sleep 0.05; done
    # Let the batch run a moment under this leader, so the takeover is mid-batch.
    sleep 2
    t0=$(now)
    kill -"$how" "${pid[$leader]}"
    if [ "$how" != STOP ]; then wait "${pid[$leader]}" 2>/dev/null || true; fi
    until ready "$standby"; do sleep 0.02; done
    t_ready=$(now)
    python3 -c 'import sys; print(f"round {sys.argv[1]}, {sys.argv[2]} of leader {sys.argv[3]}: standby ready after {float(sys.argv[5]) - float(sys.argv[4]):.2f} s")' \
      "$round" "$how" "$leader" "$t0" "$t_ready"
    if [ "$how" = STOP ]; then
      # Continued, it finds its term over and stands by by itself.
      kill -CONT "${pid[$leader]}"
    else
      start_coordinator "$leader"
    fi
    tmp=$leader leader=$standby standby=$tmp
  done
done
"$BIN" watch "$batch" --quiet --coordinator "http://127.0.0.1:${port[$leader]}" >/dev/null 2>&1 || true
"$BIN" status "$batch" --coordinator "http://127.0.0.1:${port[$leader]}" | head -6
