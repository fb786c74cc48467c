# Image of `cowork worker` with the cowork-harness CLI and the Docker CLI the harness drives
# (its sandboxes run on the engine behind /var/run/docker.sock or DOCKER_HOST: the node's, or a
# DinD sidecar; see charts/cowork-fleet, docker.mode). Build from the repository root:
#
#   docker build -f docker/worker.Dockerfile -t cowork-fleet/worker:0.1.0-harness2.0.0 .
#
# Plain `docker build` is enough: BuildKit is not needed (the file uses no BuildKit feature, so
# the legacy builder of older engines builds it too). The role is the container's arguments:
# the entrypoint is `tini -- cowork`, and the default command `worker`; Compose
# (examples/ci/docker-compose.yml) and the Helm chart give `worker` the same way.
#
# Build args:
#   HARNESS_VERSION     the cowork-harness version (default 2.0.0, the version the project tests).
#                       The build fails unless `cowork-harness --version` prints exactly this.
#                       Pin one version for the whole fleet (docs/harness-behaviour.md#cli-version-pin):
#                       verdict logic, signal codes and `latest` change across versions. Put it
#                       in the image tag.
#   HARNESS_TARBALL     path inside the build context of a harness tarball to install instead of
#                       the npm registry's package. Two layouts are understood: an installed tree
#                       (node_modules/.bin/cowork-harness, node_modules/cowork-harness/…), unpacked
#                       to /opt/cowork-harness; and an `npm pack` tarball (package/…), installed
#                       with `npm install --global`. Empty: `npm install --global` of
#                       HARNESS_PACKAGE@HARNESS_VERSION from the registry.
#   HARNESS_PACKAGE     npm package of the harness CLI (default cowork-harness).
#   DOCKER_CLI          `apt` (default): the Docker CLI from Docker's apt repository, when the base
#                       has no `docker`; `none`: no Docker CLI (the replay and protocol tiers
#                       need none; the container tier does).
#   DOCKER_CLI_VERSION  docker-ce-cli package version, e.g. 5:28.5.2-1~debian.12~bookworm;
#                       empty installs the newest.
#   BUILDER_IMAGE       image of the build stage (default rust:1.95-bookworm). With
#                       COWORK_PREBUILT it only copies files, so any Debian-like image will do
#                       (the legacy builder builds every stage).
#   BASE_IMAGE          image the worker runs on (default node:22-bookworm-slim); it must have
#                       `node` (20 or newer) on PATH, and `npm` unless HARNESS_TARBALL is an
#                       installed tree.
#   COWORK_PREBUILT     path inside the build context of a `cowork` binary built beforehand (e.g.
#                       docker/dist/cowork, which git ignores); empty: `cargo build --release`.
#
# ca-certificates, git, curl and tini are installed with apt only when the base lacks them, so
# a base that carries them (and HARNESS_TARBALL, COWORK_PREBUILT, DOCKER_CLI=none) builds
# without a network.

ARG BUILDER_IMAGE=rust:1.95-bookworm
ARG BASE_IMAGE=node:22-bookworm-slim

FROM ${BUILDER_IMAGE} AS build
# Marks the build stage's image, which nothing tags: `docker image prune --filter
# label=dev.cowork.stage=build` removes the ones left over.
LABEL dev.cowork.stage=build
ARG COWORK_PREBUILT=
ARG HARNESS_TARBALL=
WORKDIR /src
COPY . .
RUN set -eu; \
    if [ -n "${COWORK_PREBUILT}" ]; then \
      test -f "${COWORK_PREBUILT}" \
        || { echo "COWORK_PREBUILT=${COWORK_PREBUILT}: no such file in the build context" >&2; exit 1; }; \
      install -D -m 0755 "${COWORK_PREBUILT}" /out/cowork; \
    else \
      cargo build --release --locked -p cowork-cli --bin cowork; \
      install -D -m 0755 target/release/cowork /out/cowork; \
    fi; \
    install -d /out/harness; \
    if [ -n "${HARNESS_TARBALL}" ]; then \
      test -f "${HARNESS_TARBALL}" \
        || { echo "HARNESS_TARBALL=${HARNESS_TARBALL}: no such file in the build context" >&2; exit 1; }; \
      cp "${HARNESS_TARBALL}" /out/harness/harness.tgz; \
    fi

FROM ${BASE_IMAGE}
ARG HARNESS_VERSION=2.0.0
ARG HARNESS_PACKAGE=cowork-harness
ARG DOCKER_CLI=apt
ARG DOCKER_CLI_VERSION=

# git: the worker stages each job's files through git; tini: PID 1 that reaps the harness's
# orphans and forwards SIGTERM (the worker then drains).
RUN set -eu; \
    command -v node >/dev/null \
      || { echo "BASE_IMAGE has no node on PATH: the harness is a Node CLI" >&2; exit 1; }; \
    missing=""; \
    [ -x /usr/bin/tini ] || missing="${missing} tini"; \
    [ -s /etc/ssl/certs/ca-certificates.crt ] || missing="${missing} ca-certificates"; \
    command -v git >/dev/null || missing="${missing} git"; \
    command -v curl >/dev/null || missing="${missing} curl"; \
    if [ -n "${missing}" ]; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing}; \
      rm -rf /var/lib/apt/lists/*; \
    fi

# The Docker CLI only (no engine): from Docker's apt repository, signed by its key.
RUN set -eu; \
    case "${DOCKER_CLI}" in \
      none) exit 0 ;; \
      apt) ;; \
      *) echo "DOCKER_CLI=${DOCKER_CLI}: expected apt or none" >&2; exit 1 ;; \
    esac; \
    if command -v docker >/dev/null; then exit 0; fi; \
    . /etc/os-release; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gnupg; \
    install -d -m 0755 /etc/apt/keyrings; \
    curl -fsSL https://download.docker.com/linux/debian/gpg \
      | gpg --dearmor -o /etc/apt/keyrings/docker.gpg; \
    echo "deb [arch=$(dpkg --print-architecture) signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/debian ${VERSION_CODENAME} stable" \
      > /etc/apt/sources.list.d/docker.list; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "docker-ce-cli${DOCKER_CLI_VERSION:+=${DOCKER_CLI_VERSION}}"; \
    rm -rf /var/lib/apt/lists/*

# An unpinned or mislabelled harness would let two builds of "the same" image judge differently:
# the installed CLI must report HARNESS_VERSION.
COPY --from=build /out/harness/ /tmp/cowork-harness-src/
RUN set -eu; \
    test -n "${HARNESS_VERSION}" \
      || { echo "set --build-arg HARNESS_VERSION=<pinned cowork-harness version>" >&2; exit 1; }; \
    tarball=/tmp/cowork-harness-src/harness.tgz; \
    if [ -f "${tarball}" ] && tar -tzf "${tarball}" | grep -Eq '^(\./)?node_modules/\.bin/cowork-harness$'; then \
      install -d /opt/cowork-harness; \
      tar -xzf "${tarball}" -C /opt/cowork-harness --no-same-owner; \
      ln -sf /opt/cowork-harness/node_modules/.bin/cowork-harness /usr/local/bin/cowork-harness; \
    elif [ -f "${tarball}" ] && tar -tzf "${tarball}" | grep -Eq '^(\./)?package/package\.json$'; then \
      npm install --global --omit=dev "${tarball}"; \
      npm cache clean --force; \
    elif [ -f "${tarball}" ]; then \
      echo "HARNESS_TARBALL holds neither node_modules/.bin/cowork-harness nor package/package.json" >&2; \
      exit 1; \
    else \
      npm install --global --omit=dev "${HARNESS_PACKAGE}@${HARNESS_VERSION}"; \
      npm cache clean --force; \
    fi; \
    rm -rf /tmp/cowork-harness-src; \
    installed="$(cowork-harness --version)"; \
    [ "${installed}" = "${HARNESS_VERSION}" ] \
      || { echo "cowork-harness --version prints '${installed}', HARNESS_VERSION is ${HARNESS_VERSION}" >&2; exit 1; }

COPY --from=build /out/cowork /usr/local/bin/cowork
# Fails the build when the binary does not run on this base (a glibc older than the builder's).
RUN cowork --version
# Every directory the worker writes is owned by uid 10001: its cache and work dirs below,
# its home, and /tmp (TMPDIR, the harness runs' temp dirs), which is writable by everyone.
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/cowork cowork \
    && install -d -o 10001 -g 10001 /var/lib/cowork-fleet /var/lib/cowork-fleet/cache /var/lib/cowork-fleet/work
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
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/cowork"]
CMD ["worker"]
