#!/usr/bin/env bash
# Issue 3 benchmark: raw JetStream vs the fleet end to end, in one run on this machine.
# Starts a nats-server (JetStream on disk) and an s3s-fs server on loopback ports in a temp
# dir, runs `cowork bench jetstream` and `cowork bench fleet`, prints both rates and the ratio,
# and stops the servers. Needs nats-server and s3s-fs on PATH (.ci/run installs them) and a
# release build: cargo build --release -p cowork-cli
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-20000}"
BIN="${COWORK_BIN:-${CARGO_TARGET_DIR:-target}/release/cowork}"
dir="$(mktemp -d)"
cleanup() { kill "${nats_pid:-}" "${s3_pid:-}" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
nats_port=$((20000 + RANDOM % 10000)); s3_port=$((30000 + RANDOM % 10000))
nats-server -a 127.0.0.1 -p "$nats_port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 & nats_pid=$!
mkdir -p "$dir/s3"
s3s-fs --host 127.0.0.1 --port "$s3_port" --access-key bench --secret-key bench-secret "$dir/s3" >"$dir/s3.log" 2>&1 & s3_pid=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/$nats_port) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$s3_port) 2>/dev/null && break
  sleep 0.1
done
export COWORK_NATS_URL="nats://127.0.0.1:$nats_port" COWORK_S3_ENDPOINT="http://127.0.0.1:$s3_port" \
  COWORK_S3_BUCKET=bench COWORK_S3_ACCESS_KEY_ID=bench COWORK_S3_SECRET_ACCESS_KEY=bench-secret
raw=$("$BIN" bench jetstream --messages "$JOBS")
echo "$raw"
fleet=$("$BIN" bench fleet --jobs "$JOBS" --s3-create-bucket "$@")
echo "$fleet"
raw_rate=$(echo "$raw" | sed -E 's/.*whole cycle ([0-9]+) msg\/s.*/\1/')
fleet_rate=$(echo "$fleet" | sed -E 's/.* = ([0-9]+) jobs\/s.*/\1/')
python3 -c "print(f'ratio fleet/raw = {$fleet_rate}/{$raw_rate} = {$fleet_rate/$raw_rate:.3f}')"
