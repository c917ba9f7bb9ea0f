# syntax=docker/dockerfile:1
# One image, three programs: baton-ensemble (the StatefulSet members), baton-sidecar (injected
# into app pods) and baton-operator (the Deployment). Build from the repository root:
#   docker build -t baton:dev .
# Manifests choose the program with `command`; the default runs the operator.

# --- build: the workspace's three binaries, release profile, the committed Cargo.lock --------------
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Caches keep the registry and target dir between builds; the binaries are copied out of the
# cached target dir inside the same step (a cache mount is not part of the image).
# -p for each program, never --workspace: cargo unifies features over the packages selected, and
# the test crates turn on baton-ensemble's `testing` (test-only flags, deliberate bugs). Each
# program gets its own default features (S3 backups, Kubernetes TokenReview, pod labels and
# Leases, the sidecar's TLS). tests/e2e/tests/product_build.rs checks this selection.
# Stripped of debug info (the release profile's line tables), symbols kept: a panic still prints
# its message and file:line (those are constants in the binary, not debug info), and a
# RUST_BACKTRACE backtrace still names its functions (without file:line). The line tables were
# four fifths of each binary: baton-ensemble 133 MB -> 23 MB (README, "First contact").
# operator/tests/image_programs.rs checks this stage builds every program and flag the chart and
# the operator's objects run.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release --locked \
        -p baton-ensemble -p baton-sidecar -p baton-operator \
        --bin baton-ensemble --bin baton-sidecar --bin baton-operator \
 && mkdir -p /out \
 && cp target/release/baton-ensemble target/release/baton-sidecar target/release/baton-operator /out/

# --- run: Debian slim (glibc like the builder, and /bin/sh for the members' start script) ----------
FROM debian:bookworm-slim
# ca-certificates: the system's CA bundle (/etc/ssl/certs/ca-certificates.crt), which
# baton-ensemble's S3 client trusts for backups over HTTPS; without it no public endpoint is
# trusted. SSL_CERT_FILE (or SSL_CERT_DIR) in a container's environment replaces the bundle with
# another, e.g. a private CA's (README, "Operations").
# uid/gid 65532 ("nonroot"), as the chart's and the StatefulSet's securityContext expect; no
# home, no login shell.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /out/ /usr/local/bin/
# What the image holds, for registries and `docker inspect`: the release (the workspace version)
# and the ensemble feature levels its baton-ensemble supports (MIN-MAX, as `--version` prints
# them; README, "Upgrades"). tests/e2e/tests/upgrade.rs checks both against the build. The
# licence is the workspace's (Cargo.toml, LICENSE).
LABEL org.opencontainers.image.title="baton" \
      org.opencontainers.image.description="Leader election and distributed locks for Kubernetes: a ZooKeeper-compatible, Raft-replicated ensemble (baton-ensemble), its operator (baton-operator) and the app sidecar (baton-sidecar)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0" \
      baton.dev/feature-levels="1-2"
USER 65532:65532
# Client, peer and admin ports of baton-ensemble; the operator's metrics port is also 8080.
EXPOSE 2181 2888 8080
CMD ["baton-operator", "run"]
