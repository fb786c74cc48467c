#!/usr/bin/env bash
# Replay corpus benchmark: N copies of the real CLI's 3 example cassettes, laid beside
# examples/replays/ so their session paths resolve, replayed side by side in one run by
#   1. the CLI's own `replay <dir>`, two processes over halves of the corpus (the baseline),
#   2. `cowork run --replay <corpus> --slots 2`,
#   3. a fleet on this machine: nats-server, s3s-fs, a coordinator and 2 workers × 1 slot
#      (2 slots in all, as the baseline has 2 processes), `cowork submit --replay --watch`.
# Usage: scripts/bench-replay.sh CLI [COPIES=100] [ROUNDS=3]
# COWORK (default: target/release/cowork) is the binary measured.
set -euo pipefail
cli=$(realpath "$1"); copies=${2:-100}; rounds=${3:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
cowork=$(realpath "${COWORK:-$repo/target/release/cowork}")
work=$(mktemp -d /tmp/cowork-bench-replay-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cp -r "$repo/cli/tests/fixtures/upstream" "$work/up"
ex="$work/up/examples"; mkdir -p "$ex/corpus" "$ex/h1" "$ex/h2" "$work/tmp"
for i in $(seq -w 0 $((copies - 1))); do
  for f in "$ex"/replays/*.cassette.json; do cp "$f" "$ex/corpus/c$i-$(basename "$f")"; done
done
n=$(ls "$ex/corpus" | wc -l); half=$((n / 2))
# An array, not `ls | head`: under pipefail, head closing the pipe early fails the script.
mapfile -t cassettes < <(ls "$ex/corpus")
for f in "${cassettes[@]:0:half}"; do ln -s "../corpus/$f" "$ex/h1/$f"; done
for f in "${cassettes[@]:half}"; do ln -s "../corpus/$f" "$ex/h2/$f"; done
export TMPDIR="$work/tmp"

# The fleet, started once: servers on free ports, a coordinator, two workers.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
np=$(port); sp=$(port); ap=$(port)
nats-server -a 127.0.0.1 -p "$np" -js -sd "$work/nats" >"$work/nats.log" 2>&1 &
mkdir -p "$work/s3"; s3s-fs --host 127.0.0.1 --port "$sp" --access-key k --secret-key secretsecret "$work/s3" >"$work/s3.log" 2>&1 &
export COWORK_NATS_URL="nats://127.0.0.1:$np" COWORK_S3_ENDPOINT="http://127.0.0.1:$sp" \
  COWORK_S3_BUCKET=bench COWORK_S3_ACCESS_KEY_ID=k COWORK_S3_SECRET_ACCESS_KEY=secretsecret \
  COWORK_API_TOKEN=bench-token COWORK_LOG=warn
until (echo >/dev/tcp/127.0.0.1/$np) 2>/dev/null && (echo >/dev/tcp/127.0.0.1/$sp) 2>/dev/null; do sleep 0.1; done
cd "$work"
"$cowork" coordinator --listen "127.0.0.1:$ap" --s3-create-bucket --scratch-dir scratch >"$work/coordinator.log" 2>&1 &
until (echo >/dev/tcp/127.0.0.1/$ap) 2>/dev/null; do sleep 0.1; done
for w in w1 w2; do
  "$cowork" worker --executor harness --harness-bin "$cli" --tiers replay --slots 1 \
    --worker-id $w --cache-dir $w/cache --work-dir $w/work >"$work/$w.log" 2>&1 &
done

now() { date +%s.%N; }
echo "corpus: $n cassettes; machine: $(nproc) cores (shared if other jobs run)"
for round in $(seq "$rounds"); do
  t0=$(now)
  "$cli" --run-dir "$work/runs" replay "$ex/h1" --output-format json >/dev/null 2>&1 &
  first=$!
  "$cli" --run-dir "$work/runs" replay "$ex/h2" --output-format json >/dev/null 2>&1 || true
  wait "$first" || true
  t1=$(now)
  (cd "$work/up" && "$cowork" run --replay examples/corpus --slots 2 --harness-bin "$cli" --store "$work/store" >/dev/null 2>&1)
  t2=$(now)
  (cd "$work/up" && "$cowork" submit --replay examples/corpus --coordinator "http://127.0.0.1:$ap" --watch >/dev/null 2>&1)
  t3=$(now)
  python3 - "$n" "$t0" "$t1" "$t2" "$t3" "$round" <<'PY'
import sys
n, t0, t1, t2, t3, r = int(sys.argv[1]), *map(float, sys.argv[2:6]), sys.argv[6]
cli, run, fleet = t1 - t0, t2 - t1, t3 - t2
print(f"round {r}: cli 2 halves {cli:.2f} s ({n/cli:.0f}/s) | cowork run --slots 2 {run:.2f} s ({n/run:.0f}/s, {cli/run:.2f}x) | fleet 2 workers {fleet:.2f} s ({n/fleet:.0f}/s, {cli/fleet:.2f}x)")
PY
done
