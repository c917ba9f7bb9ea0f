#!/usr/bin/env bash
# The test command (README, CI): lint, build every binary, then run every test, including the
# end-to-end suite in tests/ against both Baton and Apache ZooKeeper 3.8 (the reference).
# Installs the reference server and clients from Debian when missing (needs root, as in CI).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for package in zookeeper python3-kazoo python3-pytest; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The end-to-end tests start target/<profile>/baton-ensemble: build the binaries first.
cargo build --workspace --bins
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
