# Image of `cowork coordinator` (HTTP API, admission, judging). Build from the repository root:
#
#   docker build -f docker/coordinator.Dockerfile -t cowork-fleet/coordinator:0.1.0 .
#
# Plain `docker build` is enough: BuildKit is not needed (the file uses no BuildKit feature, so
# the legacy builder of older engines builds it too). The role is the container's arguments:
# the entrypoint is `tini -- cowork`, and the default command `coordinator --listen 0.0.0.0:8700`;
# Compose (examples/ci/docker-compose.yml) and the Helm chart give `coordinator …` the same way.
#
# Build args:
#   BUILDER_IMAGE    image of the build stage (default rust:1.95-bookworm, at least the
#                    workspace's rust-version). With COWORK_PREBUILT it only copies a file, so
#                    any Debian-like image will do (the legacy builder builds every stage).
#   BASE_IMAGE       image the coordinator runs on (default debian:bookworm-slim).
#   COWORK_PREBUILT  path inside the build context of a `cowork` binary built beforehand (e.g.
#                    docker/dist/cowork, which git ignores); empty: `cargo build --release` here.
#
# tini and ca-certificates are installed with apt only when the base image lacks them, so a
# base that carries them builds without a network.

ARG BUILDER_IMAGE=rust:1.95-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BUILDER_IMAGE} AS build
# Marks the build stage's image, which nothing tags: `docker image prune --filter
# label=dev.cowork.stage=build` removes the ones left over.
LABEL dev.cowork.stage=build
ARG COWORK_PREBUILT=
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
    fi

FROM ${BASE_IMAGE}
# ca-certificates: https S3 endpoints and TLS NATS; tini: PID 1 that forwards SIGTERM.
RUN set -eu; \
    missing=""; \
    [ -x /usr/bin/tini ] || missing="${missing} tini"; \
    [ -s /etc/ssl/certs/ca-certificates.crt ] || missing="${missing} ca-certificates"; \
    if [ -n "${missing}" ]; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing}; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    useradd --uid 10001 --user-group --create-home --home-dir /home/cowork cowork; \
    install -d -o 10001 -g 10001 /var/lib/cowork /var/lib/cowork/scratch
COPY --from=build /out/cowork /usr/local/bin/cowork
# Fails the build when the binary does not run on this base (a glibc older than the builder's).
RUN cowork --version
USER 10001:10001
WORKDIR /var/lib/cowork
# Every directory the coordinator writes is owned by uid 10001: the scratch dir here, and /tmp
# (TMPDIR, spool files), which is writable by everyone.
ENV COWORK_SCRATCH_DIR=/var/lib/cowork/scratch
EXPOSE 8700
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/cowork"]
CMD ["coordinator", "--listen", "0.0.0.0:8700"]
