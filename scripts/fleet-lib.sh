# Helpers the local-fleet benchmarks share (sourced, not run): free loopback ports, waiting for a
# listener, starting the two servers (`start_servers`), and stopping what a script started. The sourcing script sets `logs_dir` (named when
# a listener never comes up) and adds pids to `servers` (nats-server, s3s-fs: stopped at exit)
# and `fleet` (coordinators and workers: stopped by `stop_fleet`, and at exit).
servers=()
fleet=()
stop_fleet() {
  if ((${#fleet[@]})); then
    kill "${fleet[@]}" 2>/dev/null || true
    wait "${fleet[@]}" 2>/dev/null || true
  fi
  fleet=()
}
stop_all() {
  stop_fleet
  if ((${#servers[@]})); then kill "${servers[@]}" 2>/dev/null || true; fi
}
# The start of every local-fleet benchmark: `BIN`, the cowork to run (COWORK_BIN, else the
# release build), and a temp dir `dir` (also `logs_dir`), removed at exit after everything the
# script started is stopped.
bench_preamble() {
  BIN="$(realpath "${COWORK_BIN:-${CARGO_TARGET_DIR:-target}/release/cowork}")"
  dir="$(mktemp -d)"
  logs_dir="$dir"
  trap 'stop_all; rm -rf "$dir"' EXIT
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1 after 30 s; logs in ${logs_dir:-?}" >&2
  exit 2
}
# Starts a nats-server (JetStream, file storage) and an s3s-fs server on free loopback ports,
# their data and logs under the directory $1, waits for both and exports the COWORK_* settings
# that reach them (bucket `bench`).
start_servers() {
  local dir="$1" nats_port s3_port
  nats_port=$(free_port)
  s3_port=$(free_port)
  nats-server -a 127.0.0.1 -p "$nats_port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 &
  servers+=($!)
  mkdir -p "$dir/s3"
  s3s-fs --host 127.0.0.1 --port "$s3_port" --access-key bench --secret-key bench-secret "$dir/s3" >"$dir/s3.log" 2>&1 &
  servers+=($!)
  wait_port "$nats_port"
  wait_port "$s3_port"
  export COWORK_NATS_URL="nats://127.0.0.1:$nats_port" COWORK_S3_ENDPOINT="http://127.0.0.1:$s3_port" \
    COWORK_S3_BUCKET=bench COWORK_S3_ACCESS_KEY_ID=bench COWORK_S3_SECRET_ACCESS_KEY=bench-secret \
    COWORK_LOG="${COWORK_LOG:-warn}"
}
