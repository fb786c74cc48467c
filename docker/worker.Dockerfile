# syntax=docker/dockerfile:1
# Image of `cowork worker` with the cowork-harness CLI and the Docker CLI the harness drives
# (its sandboxes run on the engine behind /var/run/docker.sock or DOCKER_HOST: the node's, or a
# DinD sidecar; see charts/cowork-fleet, docker.mode). Build from the repository root:
#
#   docker build -f docker/worker.Dockerfile --build-arg HARNESS_VERSION=4.4.0 \
#     -t cowork-fleet/worker:0.1.0-harness4.4.0 .
#
# Build args:
#   HARNESS_VERSION     required: the cowork-harness version installed at build time. Pin one
#                       version for the whole fleet (harness-behaviour.md#cli-version-pin): verdict logic, signal codes
#                       and `latest` change across versions. Put it in the image tag.
#   HARNESS_PACKAGE     npm package of the harness CLI (default cowork-harness).
#   NODE_VERSION        Node.js major version of the base image (the harness is a Node CLI).
#   DOCKER_CLI_VERSION  docker-ce-cli package version from Docker's Debian repository, e.g.
#                       5:28.5.2-1~debian.12~bookworm; empty installs the newest.
#   RUST_VERSION        toolchain of the build stage (>= the workspace's rust-version).
#
# Not built by CI: the build pulls base images, npm and Docker's apt repository, and the
# machines CI runs on reach no container registry. Build it where they are reachable and push
# it to your registry.

ARG RUST_VERSION=1.95
ARG NODE_VERSION=22

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p cowork-cli --bin cowork \
    && install -D -m 0755 target/release/cowork /out/cowork

FROM node:${NODE_VERSION}-bookworm-slim
ARG HARNESS_VERSION
ARG HARNESS_PACKAGE=cowork-harness
ARG DOCKER_CLI_VERSION=

# An unpinned harness would let two builds of "the same" image judge differently.
RUN test -n "${HARNESS_VERSION}" \
    || { echo "set --build-arg HARNESS_VERSION=<pinned cowork-harness version>" >&2; exit 1; }

# The Docker CLI only (no engine): from Docker's apt repository, signed by its key.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl gnupg git tini \
    && install -d -m 0755 /etc/apt/keyrings \
    && curl -fsSL https://download.docker.com/linux/debian/gpg \
       | gpg --dearmor -o /etc/apt/keyrings/docker.gpg \
    && echo "deb [arch=$(dpkg --print-architecture) signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/debian bookworm stable" \
       > /etc/apt/sources.list.d/docker.list \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
       "docker-ce-cli${DOCKER_CLI_VERSION:+=${DOCKER_CLI_VERSION}}" \
    && rm -rf /var/lib/apt/lists/*

RUN npm install --global --omit=dev "${HARNESS_PACKAGE}@${HARNESS_VERSION}" \
    && npm cache clean --force \
    && command -v cowork-harness

COPY --from=build /out/cowork /usr/local/bin/cowork
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/cowork cowork \
    && install -d -o 10001 -g 10001 /var/lib/cowork-fleet
# Recorded in the image so operators can check the pin (`docker inspect`).
LABEL org.opencontainers.image.title="cowork-fleet worker" \
      dev.cowork.harness.version="${HARNESS_VERSION}"
# Where the worker keeps bundles and job dirs; with the host's Docker socket this path must be
# the same on the host (sandboxes mount job dirs by path): the chart mounts it that way.
ENV COWORK_CACHE_DIR=/var/lib/cowork-fleet/cache \
    COWORK_WORK_DIR=/var/lib/cowork-fleet/work \
    COWORK_HARNESS_BIN=cowork-harness
USER 10001:10001
WORKDIR /home/cowork
# tini reaps the harness's orphans and forwards SIGTERM: the worker then drains.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/cowork"]
CMD ["worker"]
