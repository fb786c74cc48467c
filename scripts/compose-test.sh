#!/usr/bin/env bash
# The container images and the Compose stack, tested together for real (docs/ci.md):
#  1. a Debian base image made with debootstrap (once per machine: kept as cowork-test/base),
#     and a Node base (that image plus this machine's `node`);
#  2. the coordinator and worker images, built with plain `docker build` from the shipped
#     docker/*.Dockerfile: the `cowork` built here and the real harness CLI's tarball, both
#     copied into docker/dist/ (ignored by git), no Rust compiled inside a container;
#  3. NATS and S3 images from the local nats-server and s3s-fs binaries, which
#     examples/ci/docker-compose.local.yml puts in place of the registry's NATS and MinIO;
#  4. `docker-compose up` of examples/ci/docker-compose.yml with that override, then from this
#     machine: a replay batch of real cassettes, watched to its verdict and read back with
#     `cowork results`; a second batch cancelled while no worker serves it. Everything the
#     project started is removed (`down -v`) whatever happens.
# No registry is needed. Docker, docker-compose (or `docker compose`) and root (debootstrap) are:
# the test fails, it never skips, without them.
#
#   scripts/compose-test.sh               # the whole test
#   scripts/compose-test.sh --build-only  # steps 1-3, then print the variables that point
#                                         # examples/ci/docker-compose*.yml at the images
#
# Settings (environment): COWORK_HARNESS_TARBALL, the real CLI's tarball (default
# ../shared/upstream/real-cli/cowork-harness-2.0.0.tar.gz beside the clone); COWORK_BIN, a
# `cowork` to put in the images (default: `cargo build` of cowork-cli, debug, in
# $CARGO_TARGET_DIR); COWORK_COMPOSE_TIMEOUT, seconds to wait for the stack (default 180).
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root="$PWD"

build_only=false
case "${1:-}" in
  "") ;;
  --build-only) build_only=true ;;
  *)
    echo "usage: $0 [--build-only]" >&2
    exit 2
    ;;
esac

say() { printf '\n== compose-test: %s (%ss)\n' "$*" "$SECONDS" >&2; }
die() {
  printf 'compose-test: %s\n' "$*" >&2
  exit 1
}

harness_version=2.0.0
harness_tarball="${COWORK_HARNESS_TARBALL:-$(cd .. && pwd)/shared/upstream/real-cli/cowork-harness-$harness_version.tar.gz}"
timeout_s="${COWORK_COMPOSE_TIMEOUT:-180}"
base_image=cowork-test/base:bookworm
# The images built on the base are tagged `local` (kept: the next run builds from their cache)
# and, for the test, with the Compose project's name too, so that a test running beside this
# one cannot swap an image under it; that second tag is removed at the end.
project="cowork-test-$$-$RANDOM"
tag=local
$build_only || tag="$project"
node_image=cowork-test/node
nats_image=cowork-test/nats
s3_image=cowork-test/s3s-fs
coordinator_image=cowork-test/coordinator
worker_image=cowork-test/worker
# Plain `docker build` (the legacy builder): what the Dockerfiles promise to need.
export DOCKER_BUILDKIT=0

command -v docker >/dev/null 2>&1 || die "docker is missing: this test needs a Docker engine and the docker CLI"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (docker info): start it, or run as a user allowed to use it"
if command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  die "neither docker-compose nor the docker compose plugin is installed"
fi
[ -f "$harness_tarball" ] || die "the real CLI's tarball is missing: $harness_tarball (set COWORK_HARNESS_TARBALL)"
command -v node >/dev/null 2>&1 || die "node is missing: the worker image's Node comes from this machine"

# shellcheck source=scripts/test-servers.sh
. scripts/test-servers.sh >&2
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HOME}/.cache/cowork-fleet/target}"

# Temp dirs of this run, removed at exit; the Compose project is added once it exists.
temp_dirs=()
compose_project=()
cleanup() {
  local code=$?
  if [ "${#compose_project[@]}" -gt 0 ]; then
    if [ "$code" -ne 0 ]; then
      echo "compose-test: failed; the stack's logs:" >&2
      "${compose_project[@]}" logs --no-color --tail 60 >&2 || true
    fi
    "${compose_project[@]}" down -v --remove-orphans >&2 || true
  fi
  if [ "$tag" != local ]; then
    docker rmi "$node_image:$tag" "$nats_image:$tag" "$s3_image:$tag" "$coordinator_image:$tag" "$worker_image:$tag" \
      >/dev/null 2>&1 || true
  fi
  if [ "${#temp_dirs[@]}" -gt 0 ]; then
    rm -rf "${temp_dirs[@]}"
  fi
  exit "$code"
}
trap cleanup EXIT
new_temp_dir() {
  local dir
  dir="$(mktemp -d)"
  temp_dirs+=("$dir")
  printf '%s' "$dir"
}

# `docker build -t IMAGE:local -t IMAGE:$tag ARGS…`; the image that was IMAGE:local before is
# removed once nothing tags it (each changed `cowork` would otherwise leave one behind).
build_image() {
  local image="$1" before
  shift
  before="$(docker image inspect -f '{{.Id}}' "$image:local" 2>/dev/null || true)"
  docker build -q --force-rm -t "$image:local" -t "$image:$tag" "$@" >/dev/null
  if [ -n "$before" ] && [ "$before" != "$(docker image inspect -f '{{.Id}}' "$image:local")" ]; then
    docker rmi "$before" >/dev/null 2>&1 || true
  fi
}

# An image of `binary` on the base, checked to run there (`ldd` finds every library).
build_binary_image() {
  local image="$1" binary="$2" check="$3"
  local context
  context="$(new_temp_dir)"
  cp "$binary" "$context/$(basename "$binary")"
  cat >"$context/Dockerfile" <<EOF
FROM $base_image
COPY $(basename "$binary") /usr/local/bin/$(basename "$binary")
RUN if ldd /usr/local/bin/$(basename "$binary") 2>&1 | grep 'not found'; then exit 1; fi; $check
EOF
  build_image "$image" "$context"
}

say "1. base images"
if docker image inspect "$base_image" >/dev/null 2>&1; then
  echo "$base_image exists: kept (docker rmi it to rebuild)" >&2
else
  [ "$(id -u)" -eq 0 ] || die "building $base_image with debootstrap needs root"
  if ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  rootfs="$(new_temp_dir)"
  debootstrap --variant=minbase --include=ca-certificates,curl,git,tini \
    bookworm "$rootfs" http://deb.debian.org/debian >&2
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - "$base_image" >/dev/null
  rm -rf "$rootfs"
fi
node_version="$(node --version)"
build_binary_image "$node_image" "$(command -v node)" \
  "test \"\$(node --version)\" = $node_version"
echo "$node_image:$tag: node $node_version" >&2

say "2. coordinator and worker images (docker/*.Dockerfile, prebuilt cowork, real harness $harness_version)"
mkdir -p docker/dist
if [ -n "${COWORK_BIN:-}" ]; then
  cowork_bin="$COWORK_BIN"
else
  cargo build --locked -q -p cowork-cli --bin cowork
  cowork_bin="$CARGO_TARGET_DIR/debug/cowork"
fi
# Debug info is most of a debug build's size and nothing a container needs.
objcopy --strip-debug "$cowork_bin" docker/dist/cowork 2>/dev/null || cp "$cowork_bin" docker/dist/cowork
install -m 0644 "$harness_tarball" "docker/dist/cowork-harness-$harness_version.tar.gz"
build_image "$coordinator_image" -f docker/coordinator.Dockerfile \
  --build-arg BUILDER_IMAGE="$base_image" --build-arg BASE_IMAGE="$base_image" \
  --build-arg COWORK_PREBUILT=docker/dist/cowork \
  .
build_image "$worker_image" -f docker/worker.Dockerfile \
  --build-arg BUILDER_IMAGE="$base_image" --build-arg BASE_IMAGE="$node_image:$tag" \
  --build-arg COWORK_PREBUILT=docker/dist/cowork \
  --build-arg HARNESS_TARBALL="docker/dist/cowork-harness-$harness_version.tar.gz" \
  --build-arg HARNESS_VERSION="$harness_version" --build-arg DOCKER_CLI=none \
  .
# The build stages' images are tagged by nothing and rebuilt in seconds: not kept.
docker image prune -f --filter label=dev.cowork.stage=build >/dev/null
# One role convention: `tini -- cowork` as the entrypoint, run as uid 10001.
for image in "$coordinator_image:$tag" "$worker_image:$tag"; do
  shape="$(docker image inspect -f '{{json .Config.Entrypoint}} {{.Config.User}}' "$image")"
  [ "$shape" = '["/usr/bin/tini","--","/usr/local/bin/cowork"] 10001:10001' ] \
    || die "$image: entrypoint and user are $shape (expected tini -- cowork, 10001:10001)"
done
docker run --rm "$worker_image:$tag" --version >&2
[ "$(docker run --rm --entrypoint cowork-harness "$worker_image:$tag" --version)" = "$harness_version" ] \
  || die "$worker_image:$tag does not run cowork-harness $harness_version"

say "3. NATS and S3 images from the local nats-server and s3s-fs"
build_binary_image "$nats_image" "$(command -v nats-server)" "nats-server --version"
build_binary_image "$s3_image" "$(command -v s3s-fs)" "s3s-fs --help >/dev/null"

export COWORK_COORDINATOR_IMAGE="$coordinator_image:$tag" COWORK_WORKER_IMAGE="$worker_image:$tag" \
  COWORK_NATS_IMAGE="$nats_image:$tag" COWORK_S3_IMAGE="$s3_image:$tag"
if $build_only; then
  printf 'export COWORK_COORDINATOR_IMAGE=%q COWORK_WORKER_IMAGE=%q COWORK_NATS_IMAGE=%q COWORK_S3_IMAGE=%q\n' \
    "$COWORK_COORDINATOR_IMAGE" "$COWORK_WORKER_IMAGE" "$COWORK_NATS_IMAGE" "$COWORK_S3_IMAGE"
  exit 0
fi

say "4. the Compose stack: up, a replay batch, a cancelled batch, down"
# A project name and a port of this run's own: nothing clashes with another stack.
compose_project=("${compose[@]}" -p "$project"
  -f examples/ci/docker-compose.yml -f examples/ci/docker-compose.local.yml)
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
secret() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }
# Only this run's settings reach Compose and the host's `cowork`.
unset COWORK_COORDINATOR COWORK_API_TOKEN_FILE COWORK_S3_BUCKET COWORK_LOG COWORK_SLOTS \
  COWORK_HARNESS_BIN ANTHROPIC_API_KEY CLAUDE_CODE_OAUTH_TOKEN
export COWORK_COORDINATOR_PORT="$port" COWORK_S3_ACCESS_KEY_ID=cowork \
  COWORK_S3_SECRET_ACCESS_KEY="$(secret)" COWORK_API_TOKEN="$(secret)" \
  COWORK_TIERS=replay COWORK_EXECUTOR=harness
cowork() { "$cowork_bin" "$@"; }

# Both fleet services build from the shipped Dockerfiles, with the repository as the context.
config="$("${compose_project[@]}" config)"
for role in coordinator worker; do
  grep -q "dockerfile: docker/$role.Dockerfile" <<<"$config" \
    || die "docker-compose.yml does not build docker/$role.Dockerfile"
done
[ "$(grep -c "context: $repo_root\$" <<<"$config")" -eq 3 ] \
  || die "docker-compose.yml's build contexts are not the repository root ($repo_root)"

"${compose_project[@]}" up -d --no-build >&2

# Fails at once, with its logs, when a service's container exited or restarted.
check_services() {
  local service id state
  for service in nats minio coordinator worker-1 worker-2; do
    id="$("${compose_project[@]}" ps -q "$service")"
    [ -n "$id" ] || die "service $service has no container"
    state="$(docker inspect -f '{{.State.Status}} {{.RestartCount}}' "$id")"
    if [ "$state" != "running 0" ]; then
      "${compose_project[@]}" logs --no-color --tail 40 "$service" >&2 || true
      die "service $service is not running steadily (status, restarts: $state)"
    fi
  done
}
# Polls `command` once a second until it succeeds, while every service keeps running.
wait_for() {
  local what="$1" deadline=$((SECONDS + timeout_s))
  shift
  until "$@" >/dev/null 2>&1; do
    check_services
    ((SECONDS < deadline)) || die "$what: not after ${timeout_s}s"
    sleep 1
  done
  echo "$what: yes (${SECONDS}s)" >&2
}
workers_registered() {
  cowork workers --coordinator "$url" --output-format json \
    | python3 -c 'import json, sys; sys.exit(0 if len(json.load(sys.stdin)) >= 2 else 1)'
}
wait_for "the coordinator is ready ($url/readyz)" curl -fsS -o /dev/null "$url/readyz"
wait_for "two workers are registered" workers_registered

# Real cassettes of the real CLI, in a git work tree (the bundle root) with the sessions and
# skills at the places they were recorded from.
work="$(new_temp_dir)"
corpus="$work/corpus"
mkdir -p "$corpus"
cp -R cli/tests/fixtures/upstream/examples cli/tests/fixtures/upstream/e2e "$corpus/"
git -C "$corpus" init -q
git -C "$corpus" add -A
git -C "$corpus" -c user.name=compose-test -c user.email=compose-test@localhost commit -qm cassettes

set +e
(cd "$corpus" && cowork submit --coordinator "$url" --replay examples/replays/ --watch \
  --quiet --output-format json) >"$work/envelope.json"
code=$?
set -e
[ "$code" -eq 0 ] || die "the replay batch exited $code (expected 0: every cassette replays PASS)"
batch="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["fleet"]["batchId"])' "$work/envelope.json")"
cowork results "$batch" --coordinator "$url" >"$work/results.json" 2>"$work/results.txt"
python3 - "$work/results.json" "$batch" <<'PY'
import json, sys
envelope, batch = json.load(open(sys.argv[1])), sys.argv[2]
results, fleet = envelope["results"], envelope["fleet"]
assert envelope["ok"] is True, f"the stored envelope is not ok: {envelope.get('error')}"
assert fleet["batchId"] == batch, fleet["batchId"]
assert len(results) == 3, f"3 cassettes, {len(results)} results"
failed = [r["scenario"] for r in results if r["verdict"]["pass"] is not True]
assert not failed, f"replays that did not pass: {failed}"
# The jobs ran on the Compose stack's workers.
ran_on = set(fleet["workers"])
assert ran_on and ran_on <= {"worker-1", "worker-2"}, f"jobs ran on {sorted(ran_on)}"
print(f"batch {batch}: ok, {len(results)} replays passed on {', '.join(sorted(ran_on))}", file=sys.stderr)
PY

# A batch no worker serves, cancelled: the workers drain on SIGTERM and exit 0 first.
"${compose_project[@]}" stop -t "$timeout_s" worker-1 worker-2 >&2
for service in worker-1 worker-2; do
  exit_code="$(docker inspect -f '{{.State.ExitCode}}' "$("${compose_project[@]}" ps -a -q "$service")")"
  [ "$exit_code" -eq 0 ] || die "$service exited $exit_code on SIGTERM (expected 0: drained)"
done
second="$(cd "$corpus" && cowork submit --coordinator "$url" --replay examples/replays/example-pdf-skill.cassette.json)"
cowork cancel "$second" --coordinator "$url" >&2
set +e
cowork watch "$second" --coordinator "$url" --quiet 2>"$work/watch.txt"
code=$?
set -e
[ "$code" -eq 1 ] && grep -q cancelled "$work/watch.txt" \
  || die "cowork watch of the cancelled batch exited $code: $(cat "$work/watch.txt")"
state="$(cowork status "$second" --coordinator "$url" --output-format json \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["record"]["state"])')"
[ "$state" = cancelled ] || die "batch $second is $state after cowork cancel (expected cancelled)"
echo "batch $second: cancelled" >&2
say "passed"
