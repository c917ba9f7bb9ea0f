#!/usr/bin/env bash
# Installs and builds the ZooKeeper clients that tests/e2e/tests/refusals.rs runs against a real
# member (one program per client under tests/clients/<lang>/, each built into its target/):
#   python/  kazoo 2.8 (Debian's python3-kazoo)       c/     the C client (Debian's libzookeeper-mt)
#   java/    ZooKeeper 3.5 and Curator 5 (Maven; and  node/  node-zookeeper-client (npm ci)
#            Debian's 3.8 jar from the zookeeper package) go/  go-zookeeper/zk (Go modules)
# Go, Node.js with npm, Java 17 with Maven: the toolchains sdk/ needs too (sdk/README.md).
# Idempotent, and quick once done: each program is rebuilt only when its files changed.
set -euo pipefail
cd "$(dirname "$0")"
t0=$SECONDS

missing=()
for package in python3-kazoo zookeeper libzookeeper-mt-dev gcc; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
for tool in go node npm java mvn; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: see sdk/README.md" >&2; exit 1; }
done

# built DIR FILE...: true when DIR/target/stamp holds the hash of FILE... (built from them).
built() {
  local dir=$1
  shift
  [ "$(cat "$dir/target/stamp" 2>/dev/null)" = "$(cd "$dir" && cat "$@" | sha256sum)" ]
}
stamp() {
  local dir=$1
  shift
  mkdir -p "$dir/target"
  (cd "$dir" && cat "$@" | sha256sum) >"$dir/target/stamp"
}

if ! built c refusal.c; then
  mkdir -p c/target
  gcc -std=c11 -Wall -Wextra -Werror -O2 -o c/target/refusal c/refusal.c -lzookeeper_mt -lpthread
  stamp c refusal.c
fi

if ! built go go.mod go.sum main.go; then
  mkdir -p go/target
  (
    cd go
    unformatted=$(gofmt -l .)
    [ -z "$unformatted" ] || { echo "gofmt: not formatted: $unformatted" >&2; exit 1; }
    go mod download
    go vet ./...
    go build -o target/refusal .
  )
  stamp go go.mod go.sum main.go
fi

if ! built node package.json package-lock.json; then
  (cd node && npm ci --no-audit --no-fund --loglevel=error)
  stamp node package.json package-lock.json
fi

java_files=(pom.xml zookeeper/pom.xml zookeeper/src/main/java/Refusal.java curator/pom.xml
  curator/src/main/java/CuratorRefusal.java)
if ! built java "${java_files[@]}"; then
  # javac -Xlint -Werror; each module's run-time classpath into its target/classpath.txt.
  (cd java && mvn -q -B compile)
  stamp java "${java_files[@]}"
fi

echo "tests/clients: ready in $((SECONDS - t0))s" >&2
