# syntax=docker/dockerfile:1
# Image of `cowork coordinator` (HTTP API, admission, judging). Build from the repository root:
#
#   docker build -f docker/coordinator.Dockerfile -t cowork-fleet/coordinator:0.1.0 .
#
# Not built by CI: the build pulls rust and debian base images and crates from crates.io, and
# the machines CI runs on reach no container registry. Build it where a registry is reachable
# and push it to yours; charts/cowork-fleet (coordinatorImage) and examples/ci use it.

# Must be at least the workspace's rust-version (Cargo.toml).
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p cowork-cli --bin cowork \
    && install -D -m 0755 target/release/cowork /out/cowork

FROM debian:${DEBIAN_RELEASE}-slim
# ca-certificates: https S3 endpoints and TLS NATS; tini: PID 1 that forwards SIGTERM.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --create-home --home-dir /home/cowork cowork \
    && install -d -o 10001 -g 10001 /var/lib/cowork
COPY --from=build /out/cowork /usr/local/bin/cowork
USER 10001:10001
WORKDIR /var/lib/cowork
ENV COWORK_SCRATCH_DIR=/var/lib/cowork/scratch
EXPOSE 8700
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/cowork"]
CMD ["coordinator", "--listen", "0.0.0.0:8700"]
