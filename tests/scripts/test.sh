#!/usr/bin/env bash
# The test command (README, CI): lint, build every binary, then run every test, including the
# end-to-end suite in tests/ against both Baton and Apache ZooKeeper 3.8 (the reference).
# Installs the reference server and clients from Debian when missing (needs root, as in CI).
set -euo pipefail
cd "$(dirname "$0")/../.."

# The real Kubernetes control plane for tests/kube (tests/control-plane/README.md): its first
# build compiles Kubernetes from Go modules (many minutes), so it starts now, in the background
# and at the lowest priority, while cargo builds; the kube tests wait for it below.
cp_log=$(mktemp)
cp_dir=
nice -n 19 tests/scripts/control-plane.sh build >"$cp_log" 2>&1 &
cp_build_pid=$!
# cargo-nextest runs each test in a process of its own (the kube tests' fixture relies on it for
# a namespace per test and a clean exit). A fresh machine lacks it: build it from the crate
# registry in the background too (about 5 min of CPU), and fall back to `cargo test` if that fails.
nextest_log=$(mktemp)
nextest_pid=
if ! cargo nextest --version >/dev/null 2>&1; then
  nice -n 19 cargo install cargo-nextest --locked >"$nextest_log" 2>&1 &
  nextest_pid=$!
fi
small=
node_dir=
cleanup() {
  if [ -n "$node_dir" ]; then
    local t=$SECONDS
    tests/scripts/control-plane.sh down "$node_dir" 2>/dev/null || true
    echo "node: stopped in $((SECONDS - t))s" >&2
    rm -rf "$node_dir"
  fi
  if [ -n "$cp_dir" ]; then
    local t=$SECONDS
    tests/scripts/control-plane.sh down "$cp_dir" 2>/dev/null || true
    echo "control plane: stopped in $((SECONDS - t))s" >&2
    rm -rf "$cp_dir"
  fi
  # A build still running (an earlier step failed) is left to finish into the cache: the next
  # run's build waits for it on its lock instead of starting over.
  rm -f "$cp_log"
  if [ -n "$small" ]; then
    umount "$small" 2>/dev/null || true
    rmdir "$small" || true
  fi
}
trap cleanup EXIT

missing=()
# iptables and iproute2: the node agent's pods (tests/node-agent) get network namespaces, veths
# and a bridge (ip) and reach Services through NAT rules (iptables).
for package in zookeeper python3-kazoo python3-pytest iptables iproute2; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
# The ZooKeeper clients (kazoo, Java, Curator, C, Node, Go) tests/e2e/tests/refusals.rs runs.
tests/clients/install.sh

# The project's image (tests/scripts/image.sh: a release build of the three programs, assembled
# from the Dockerfile) for the real node's tests at the end, built in the background at the
# lowest priority while the debug build and the tests run. Their packages first, here: apt
# takes one caller at a time.
tests/scripts/image.sh packages
tests/scripts/control-plane.sh packages node
image_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}/image")
image_log=$(mktemp)
nice -n 19 tests/scripts/image.sh build "$image_dir" >"$image_log" 2>&1 &
image_pid=$!
image_started=$SECONDS

# moto_server, a real S3-compatible server for the backup tests (tests/e2e/tests/backup.rs), in the
# tools' virtualenv that validate-chart.sh uses too (Debian's python refuses `pip install` into the
# system); the tests look for it there, or at $BATON_MOTO_SERVER.
tools=${BATON_TOOLS:-$HOME/.cache/baton-tools}
if [ -z "${BATON_MOTO_SERVER:-}" ] && [ ! -x "$tools/venv/bin/moto_server" ]; then
  if [ ! -x "$tools/venv/bin/pip" ]; then
    mkdir -p "$tools"
    if ! python3 -m venv "$tools/venv" >/dev/null 2>&1; then
      echo "installing python3-venv" >&2
      apt-get update
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv python3-pip
      rm -rf "$tools/venv"
      python3 -m venv "$tools/venv"
    fi
  fi
  echo "installing moto[server] into $tools/venv" >&2
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]>=5,<6'
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The end-to-end tests start target/<profile>/baton-ensemble: build the binaries first.
cargo build --workspace --bins
# Every command of the docs' pages that need no cluster (the playground, "Run the processes
# yourself", a backup outside Kubernetes), on these binaries, each page in namespaces of its own
# (tests/scripts/docs-run.py; the Kubernetes pages run on the node at the end).
t=$SECONDS
tests/scripts/docs-run.py local --bin-dir "${CARGO_TARGET_DIR:-target}/debug"
echo "docs pages without a cluster: ran in $((SECONDS - t))s" >&2

# The chart (rendered by real Helm) and the operator's objects, strictly against Kubernetes 1.33.
# Before the tests: it installs the Helm that tests/kube's chart tests run.
tests/scripts/validate-chart.sh "${CARGO_TARGET_DIR:-target}/debug/baton-operator"

# One control plane for the whole run; tests/kube finds it through BATON_KUBECONFIG.
t=$SECONDS
if ! wait "$cp_build_pid"; then
  cat "$cp_log" >&2
  echo "building the control plane failed" >&2
  exit 1
fi
cp_waited=$((SECONDS - t))
cp_built=$(grep -o 'built in [0-9]*s' "$cp_log" || echo "binary cached")
# The node's programs (kubelet, kube-proxy, kube-scheduler from the same Kubernetes modules, so
# after the control plane's build; CoreDNS, kube-router, the provisioner) and its two local
# images, in the background too, for the node's tests at the end.
node_log=$(mktemp)
nice -n 19 tests/scripts/control-plane.sh build node >"$node_log" 2>&1 &
node_build_pid=$!
node_build_started=$SECONDS
cp_dir=$(mktemp -d)
t=$SECONDS
BATON_KUBECONFIG=$(tests/scripts/control-plane.sh up "$cp_dir" | tail -n1)
export BATON_KUBECONFIG
echo "control plane: ${cp_built} (in the background; test.sh waited ${cp_waited}s for it), started in $((SECONDS - t))s" >&2

if [ -n "$nextest_pid" ] && ! wait "$nextest_pid"; then
  tail -n 20 "$nextest_log" >&2
  echo "NOTE: installing cargo-nextest failed; running the tests with cargo test" >&2
fi
rm -f "$nextest_log"
# The documentation: the mdBook under docs/ built with a pinned mdBook, every relative link and
# #anchor checked.
tests/scripts/docs.sh
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
  # nextest does not run doctests (the examples in the crates' docs).
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast "$@"
fi

# Disk-full tests need a small filesystem: mount a tmpfs when we may (root, as in CI) and run
# them; say so loudly when we cannot, rather than pretending they passed.
small=$(mktemp -d)
if mount -t tmpfs -o size=4m tmpfs "$small" 2>/dev/null; then
  # cleanup (the EXIT trap above) unmounts it.
  BATON_SMALL_FS="$small" cargo test -p baton-raftlog --test disk_full -- --ignored
  BATON_SMALL_FS="$small" cargo test -p baton-tests --test disk_full -- --ignored
  # Mounts a tmpfs per member itself (so it needs root too, as the mount above proved).
  cargo test -p baton-tests --test log_bound -- --ignored
  # The disk-space alarm on a real volume (a tmpfs per member, filled by the test).
  cargo test -p baton-tests --test settings -- --ignored
  # Faults on real processes (tests/e2e/tests/faults.rs): each member in a network namespace of
  # its own on a bridge, partitions made with iptables, SIGSTOP pauses, kill -9 (root, as the
  # mount proved), and a client of a member cut off from the majority told so in time; locks
  # through real sidecars, fenced by their tokens, under faults aimed at the holder
  # (tests/e2e/tests/fenced_locks.rs); a sick disk under each member, a FUSE file system that
  # loses what was not fsynced on a power loss, fails fsyncs or stalls them
  # (tests/e2e/tests/disk_faults.rs).
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run -p baton-tests --run-ignored only \
      -E 'binary(faults) | binary(fenced_locks) | binary(disk_faults)'
  else
    cargo test -p baton-tests --test faults --test fenced_locks --test disk_faults -- --ignored
  fi
else
  rmdir "$small"
  small=
  echo "NOTE: could not mount a small tmpfs (not root?): the disk-full tests did not run" >&2
fi

# The client libraries under sdk/ (each language's build, linter and tests against real
# baton-sidecar processes on a Baton ensemble and on ZooKeeper; sdk/test.sh installs its tools).
sdk/test.sh

# The real node (tests/control-plane/README.md, "A real node"): the image checked against the
# Dockerfile, then the kube tests that need pods run by a kubelet from the image (#[ignore]d
# in the runs above: tests/kube/src/node.rs).
t=$SECONDS
if ! wait "$image_pid"; then
  tail -n 40 "$image_log" >&2
  echo "building the image failed" >&2
  exit 1
fi
image_waited=$((SECONDS - t))
grep -E '^(ghcr|compressed|image: (built|assembled|up to date))' "$image_log" >&2 || true
echo "image: ready $((SECONDS - image_started))s after its background build started (test.sh waited ${image_waited}s for it)" >&2
t=$SECONDS
if ! wait "$node_build_pid"; then
  tail -n 40 "$node_log" >&2
  echo "building the node's programs failed" >&2
  exit 1
fi
echo "node programs: ready $((SECONDS - node_build_started))s after their background build started (test.sh waited $((SECONDS - t))s for them)" >&2
rm -f "$image_log" "$node_log"
node_dir=$(mktemp -d)
t=$SECONDS
BATON_NODE_KUBECONFIG=$(CONTROL_PLANE_IMAGES="$image_dir/baton-image.tar" \
  tests/scripts/control-plane.sh up "$node_dir" --node | tail -n1)
export BATON_NODE_KUBECONFIG
echo "node: started in $((SECONDS - t))s" >&2
export BATON_IMAGE_DIR=$image_dir
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run -p baton-tests --test image --run-ignored only
  # Each test mostly waits for pods: more at once than the machine has cores.
  cargo nextest run -p baton-kube-tests --run-ignored only --test-threads 4 --no-fail-fast
else
  cargo test -p baton-tests --test image -- --ignored
  cargo test -p baton-kube-tests -- --ignored --test-threads 4
fi
# Every command of the docs' Tasks pages and the local cluster page, on the same node, from a
# fresh state the runner makes (the tests' install of the chart removed first). The local
# cluster page's last command stops the node (cleanup's `down` then finds nothing to stop).
t=$SECONDS
tests/scripts/docs-run.py cluster --node-dir "$node_dir" --image-dir "$image_dir"
echo "docs pages on the node: ran in $((SECONDS - t))s" >&2
