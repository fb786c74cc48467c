#!/usr/bin/env bash
# A throwaway Cowork Fleet for one CI job (docs/ci.md): nats-server with JetStream, one
# coordinator and N workers on this machine, against an S3 endpoint that already runs (the
# job's MinIO service container, or s3s-fs / MinIO started by hand).
#
#   examples/ci/fleet.sh start   # start everything and wait until it is ready
#   examples/ci/fleet.sh stop    # drain the workers, stop what `start` started, keep the logs
#
# `start` prints `export COWORK_COORDINATOR=… COWORK_API_TOKEN_FILE=…` on stdout (for
# `eval "$(examples/ci/fleet.sh start)"`) and, inside GitHub Actions, also appends both to
# $GITHUB_ENV so the later steps (`cowork submit`, `cowork report`) reach the fleet.
#
# Settings (environment):
#   COWORK_S3_ENDPOINT, COWORK_S3_ACCESS_KEY_ID, COWORK_S3_SECRET_ACCESS_KEY   required
#   COWORK_S3_BUCKET       bucket, created if missing (default cowork-ci)
#   COWORK_FLEET_WORKERS   number of workers (default 2)
#   COWORK_FLEET_TIERS     tiers the workers serve (default replay)
#   COWORK_FLEET_DIR       state dir: pids, logs, NATS data, caches (default $RUNNER_TEMP/cowork-fleet)
#   COWORK_FLEET_TIMEOUT   seconds to wait for readiness and, on stop, for a drain (default 120)
# Read by the workers themselves: COWORK_EXECUTOR, COWORK_SLOTS, COWORK_HARNESS_BIN, and the
# harness credentials (ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN): those are removed from the
# environment of nats-server and the coordinator, which never need them.
#
# The API token is generated per run and only ever written to a 0600 file: nothing outside this
# machine can submit to the throwaway coordinator, and no repository secret is needed for it.
set -euo pipefail

state_dir="${COWORK_FLEET_DIR:-${RUNNER_TEMP:-${TMPDIR:-/tmp}}/cowork-fleet}"
timeout_s="${COWORK_FLEET_TIMEOUT:-120}"
pids_file="$state_dir/pids"

say() { printf 'fleet.sh: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}

# A TCP port that was free a moment ago on 127.0.0.1 (a clash with another process is possible
# but unlikely, and shows up as a start-up failure, never as a wrong result).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Fails with the tail of the process's log when it has exited.
check_alive() {
  local name="$1" pid="$2"
  if ! kill -0 "$pid" 2>/dev/null; then
    say "$name (pid $pid) exited during start-up; last lines of $state_dir/logs/$name.log:"
    tail -n 40 "$state_dir/logs/$name.log" >&2 || true
    exit 1
  fi
}

# Polls `probe` (a command) once a second until it succeeds, while `name` stays alive.
wait_ready() {
  local name="$1" pid="$2"
  shift 2
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    check_alive "$name" "$pid"
    if ((SECONDS >= deadline)); then
      say "$name not ready after ${timeout_s}s; last lines of its log:"
      tail -n 40 "$state_dir/logs/$name.log" >&2 || true
      exit 1
    fi
    sleep 1
  done
}

nats_ready() { grep -q 'Server is ready' "$state_dir/logs/nats.log"; }

workers_registered() {
  local want="$1" count
  count="$(cowork workers --output-format json | jq 'length')"
  [ "$count" -ge "$want" ]
}

start() {
  local tool
  for tool in cowork nats-server curl jq python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (see docs/ci.md, runner prerequisites)"
  done
  : "${COWORK_S3_ENDPOINT:?set COWORK_S3_ENDPOINT, e.g. http://127.0.0.1:9000}"
  : "${COWORK_S3_ACCESS_KEY_ID:?set COWORK_S3_ACCESS_KEY_ID}"
  : "${COWORK_S3_SECRET_ACCESS_KEY:?set COWORK_S3_SECRET_ACCESS_KEY}"
  export COWORK_S3_BUCKET="${COWORK_S3_BUCKET:-cowork-ci}"
  local n_workers="${COWORK_FLEET_WORKERS:-2}"
  local tiers="${COWORK_FLEET_TIERS:-replay}"
  [[ "$n_workers" =~ ^[1-9][0-9]*$ ]] || die "COWORK_FLEET_WORKERS must be a positive integer, got '$n_workers'"
  if [ -s "$pids_file" ]; then
    die "$pids_file exists: a fleet from an earlier start may still run; run '$0 stop' first"
  fi

  mkdir -p "$state_dir/logs" "$state_dir/nats"
  : >"$pids_file"
  local token_file="$state_dir/api-token"
  (
    umask 077
    python3 -c 'import secrets; print(secrets.token_hex(32))' >"$token_file"
  )

  # The S3 service may still be starting (a service container is not waited for unless its
  # image has a health check): any HTTP answer, even 403, means it listens.
  local s3_deadline=$((SECONDS + timeout_s))
  until curl -s -o /dev/null "$COWORK_S3_ENDPOINT"; do
    ((SECONDS < s3_deadline)) || die "no HTTP answer from $COWORK_S3_ENDPOINT after ${timeout_s}s"
    sleep 1
  done

  local nats_port api_port
  nats_port="$(free_port)"
  api_port="$(free_port)"
  export COWORK_NATS_URL="nats://127.0.0.1:$nats_port"
  export COWORK_COORDINATOR="http://127.0.0.1:$api_port"
  export COWORK_API_TOKEN_FILE="$token_file"

  # nats-server gets no credentials of any kind: a clean environment.
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    nats-server -a 127.0.0.1 -p "$nats_port" -js -sd "$state_dir/nats" \
    >"$state_dir/logs/nats.log" 2>&1 &
  local nats_pid=$!
  echo "nats $nats_pid" >>"$pids_file"
  wait_ready nats "$nats_pid" nats_ready
  say "nats-server ready at $COWORK_NATS_URL"

  env -u ANTHROPIC_API_KEY -u CLAUDE_CODE_OAUTH_TOKEN -u COWORK_API_TOKEN \
    cowork coordinator --listen "127.0.0.1:$api_port" --api-token-file "$token_file" \
    --s3-create-bucket --scratch-dir "$state_dir/coordinator-scratch" \
    --coordinator-id "ci-${GITHUB_RUN_ID:-local}" \
    >"$state_dir/logs/coordinator.log" 2>&1 &
  local coordinator_pid=$!
  echo "coordinator $coordinator_pid" >>"$pids_file"
  wait_ready coordinator "$coordinator_pid" curl -fsS "$COWORK_COORDINATOR/readyz"
  say "coordinator ready at $COWORK_COORDINATOR (bucket $COWORK_S3_BUCKET)"

  local i worker_pid
  for ((i = 1; i <= n_workers; i++)); do
    # Workers never talk to the API: they get no API token.
    env -u COWORK_API_TOKEN -u COWORK_API_TOKEN_FILE \
      cowork worker --tiers "$tiers" --worker-id "ci-${GITHUB_RUN_ID:-local}-$i" \
      --cache-dir "$state_dir/worker-$i/cache" --work-dir "$state_dir/worker-$i/work" \
      >"$state_dir/logs/worker-$i.log" 2>&1 &
    worker_pid=$!
    echo "worker-$i $worker_pid" >>"$pids_file"
  done
  # Jobs would wait in the queue for a late worker anyway; waiting here turns a worker that
  # cannot start (bad harness, bad S3 keys) into a clear start-up error instead of a hang.
  local deadline=$((SECONDS + timeout_s)) name pid
  until workers_registered "$n_workers" 2>/dev/null; do
    while read -r name pid; do
      [[ "$name" == worker-* ]] && check_alive "$name" "$pid"
    done <"$pids_file"
    if ((SECONDS >= deadline)); then
      die "fewer than $n_workers worker(s) registered after ${timeout_s}s (logs in $state_dir/logs)"
    fi
    sleep 1
  done
  say "$n_workers worker(s) serving $tiers (executor ${COWORK_EXECUTOR:-harness})"

  if [ -n "${GITHUB_ENV:-}" ]; then
    {
      echo "COWORK_COORDINATOR=$COWORK_COORDINATOR"
      echo "COWORK_API_TOKEN_FILE=$token_file"
    } >>"$GITHUB_ENV"
  fi
  printf 'export COWORK_COORDINATOR=%q COWORK_API_TOKEN_FILE=%q\n' "$COWORK_COORDINATOR" "$token_file"
}

# Sends SIGTERM and waits for the exit; SIGKILL after the timeout. Only pids from our own file.
stop_one() {
  local name="$1" pid="$2"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + timeout_s))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      say "$name (pid $pid) still running after ${timeout_s}s: killing it"
      kill -KILL "$pid" 2>/dev/null || true
      return 0
    fi
    sleep 1
  done
}

stop() {
  [ -f "$pids_file" ] || {
    say "nothing to stop ($pids_file is missing)"
    return 0
  }
  # Workers first (SIGTERM drains them: running jobs finish and are stored), then the
  # coordinator, then NATS: the reverse of the start order.
  local name pid
  tac "$pids_file" | while read -r name pid; do
    stop_one "$name" "$pid"
  done
  rm -f "$pids_file" "$state_dir/api-token"
  rm -rf "$state_dir/nats" "$state_dir/coordinator-scratch" "$state_dir"/worker-*
  say "stopped; logs are in $state_dir/logs"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac
