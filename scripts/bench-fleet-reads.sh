#!/usr/bin/env bash
# The morning after a big sweep on the fleet: what reading a decided batch costs the coordinator
# and the client. Runs one sweep of a 1,000-cell matrix (1,000 models x one skill dir) x
# --repeat N on a local fleet (nats-server, s3s-fs, a coordinator and two sim workers), then
# starts a fresh coordinator on the same servers, so its peak RSS is that of the reads alone,
# and measures each read in turn: the coordinator's peak RSS after it (VmHWM: a peak, so each
# step's figure includes the steps before), the client's wall time and peak RSS (GNU time),
# and the size of what came back.
#
#   scripts/bench-fleet-reads.sh [REPEAT] [WORK_DIR]
#
# REPEAT defaults to 100 (100,000 runs). WORK_DIR (default: a temp dir) is removed at the end
# unless KEEP=1. COWORK names the binary (default: the release build under CARGO_TARGET_DIR or
# ./target). READS_ONLY=1 measures the reads again on the sweep a KEEP=1 run left in WORK_DIR;
# LIST_ALL=1 also lists every key of the batch and downloads every file (`results --download`). Needs nats-server, s3s-fs, curl and GNU time.
set -euo pipefail

repeat="${1:-100}"
work="${2:-$(mktemp -d)}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cowork="$(realpath "${COWORK:-${CARGO_TARGET_DIR:-$repo/target}/release/cowork}")"
[ -x "$cowork" ] || { echo "no cowork binary at $cowork (cargo build --release -p cowork-cli)" >&2; exit 1; }
for tool in nats-server s3s-fs curl /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "$tool is needed on PATH" >&2; exit 1; }
done

mkdir -p "$work"
logs_dir="$work"
# shellcheck source=scripts/fleet-lib.sh
source "$repo/scripts/fleet-lib.sh"
cleanup() {
  stop_all
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

reads_only="${READS_ONLY:-0}"
if [ "$reads_only" = 1 ]; then
  # Measure the reads again on the sweep a KEEP=1 run left in WORK_DIR.
  [ -d "$work/s3" ] && [ -d "$work/js" ] || { echo "READS_ONLY=1 needs a kept WORK_DIR" >&2; exit 1; }
fi
[ "$reads_only" = 1 ] || rm -rf "$work/demo" "$work/s3" "$work/js"
[ "$reads_only" = 1 ] || cp -r "$repo/examples/demo" "$work/demo"
python3 - "$work/demo" <<'EOF'
import sys
models = ['m%04d' % i for i in range(1000)]
open(sys.argv[1] + '/matrix-1000.yaml', 'w').write(
    'models: [%s]\nskill_dirs:\n  - skills/v1/csv-report\n' % ', '.join(models))
rules = ''.join('  - model: %s\n    pass_rate: %s\n' % (models[i], round(0.3 + 0.02 * k, 2))
                for k, i in enumerate(range(5, 1000, 50)))
rules += '  - pass_rate: 1.0\n    cost_usd: 0.05\n    duration_ms: 40000\n'
open(sys.argv[1] + '/profile.yaml', 'w').write('rules:\n' + rules)
EOF

start_servers "$work"

start_coordinator() {
  api_port=$(free_port)
  "$cowork" coordinator --listen "127.0.0.1:$api_port" --allow-unauthenticated --s3-create-bucket \
    --scratch-dir "$work/coordinator" --window 512 >>"$work/coordinator.log" 2>&1 &
  coordinator_pid=$!
  fleet+=($coordinator_pid)
  wait_port "$api_port"
  api="http://127.0.0.1:$api_port"
}
peak_of() { awk '/^VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

if [ "$reads_only" = 1 ]; then
  start_coordinator
  batch=$(curl -fsS "$api/v1/batches" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["batchId"])')
  stop_fleet
else
start_coordinator
for i in 1 2; do
  "$cowork" worker --executor sim --tiers container --slots 8 --worker-id "reads-w$i" \
    --cache-dir "$work/w$i/cache" --work-dir "$work/w$i/work" >>"$work/worker-$i.log" 2>&1 &
  fleet+=($!)
done
cd "$work/demo"
/usr/bin/time -f "%e %M" -o "$work/time" "$cowork" submit scenarios/csv-report.yaml \
  --matrix matrix-1000.yaml --max-cells 1000 --repeat "$repeat" --executor sim \
  --sim-profile profile.yaml --min-pass-rate 0.8 --coordinator "$api" --watch --quiet \
  >"$work/submit.out" 2>"$work/submit.err" || submit_status=$?
# The sweep fails its bar by design (exit 1); anything else means no sweep to read.
if [ "${submit_status:-0}" -gt 1 ]; then
  echo "the sweep's submit failed (exit $submit_status):" >&2
  tail -n 5 "$work/submit.err" >&2
  exit 1
fi
read -r wall rss < <(tail -1 "$work/time")
echo "sweep: $((repeat * 1000)) runs on the fleet in $wall s; coordinator peak $(peak_of "$coordinator_pid") MiB"
batch=$(curl -fsS "$api/v1/batches" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["batchId"])')
stop_fleet
fi

start_coordinator
echo "batch $batch; a fresh coordinator: $(peak_of "$coordinator_pid") MiB"
echo
echo "| read, $((repeat * 1000)) runs | wall | client peak RSS | coordinator peak RSS after | size |"
echo "|---|---|---|---|---|"
measure() {
  local name="$1" out="$2"
  shift 2
  local status=0
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" >"$out" 2>"$work/stderr" || status=$?
  read -r wall rss < <(tail -1 "$work/time")
  printf '| %s | %s s | %s MiB | %s MiB | %s bytes%s |\n' "$name" "$wall" "$((rss / 1024))" \
    "$(peak_of "$coordinator_pid")" "$(stat -c %s "$out")" \
    "$([ "$status" = 0 ] || echo ", exit $status")"
}
measure "GET /v1/batches/{id}/report (envelope)" "$work/envelope.json" curl -fsS "$api/v1/batches/$batch/report"
measure "GET …/artifacts/envelope.json" "$work/artifact-envelope.json" curl -fsS "$api/v1/batches/$batch/artifacts/envelope.json"
# The whole key listing is left out unless LIST_ALL=1: s3s-fs walks the whole bucket for every
# page of a listing, so at 100,000 runs each page takes about a minute (benchmarks.md).
if [ "${LIST_ALL:-0}" = 1 ]; then
  measure "GET …/artifacts (every key)" "$work/keys.json" curl -fsS "$api/v1/batches/$batch/artifacts"
fi
measure "GET …/artifacts?prefix=jobs/c5/r0/ (one job's keys)" "$work/keys.json" \
  curl -fsS "$api/v1/batches/$batch/artifacts?prefix=jobs/c5/r0/"
for format in html markdown junit json; do
  measure "GET …/report?format=$format" "$work/report.$format" curl -fsS "$api/v1/batches/$batch/report?format=$format"
done
measure "cowork results" "$work/results.out" "$cowork" results "$batch" --coordinator "$api"
if [ "${LIST_ALL:-0}" = 1 ]; then
  rm -rf "$work/download"
  measure "cowork results --download (every file)" "$work/download.out" \
    "$cowork" results "$batch" --coordinator "$api" --download "$work/download"
  echo "downloaded $(find "$work/download" -type f | wc -l) files"
fi
measure "cowork status" "$work/status.out" "$cowork" status "$batch" --coordinator "$api"
cmp -s "$work/envelope.json" "$work/results.out" && echo "cowork results printed the stored envelope byte for byte"
# The client's own render of the coordinator's batch: every run read through the artifact route.
measure "cowork report --coordinator --format html" "$work/client-report.log" \
  "$cowork" report "$batch" --coordinator "$api" --format html -o "$work/client-report.html"
