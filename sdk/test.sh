#!/usr/bin/env bash
# Builds, lints and tests every client library under sdk/ against real baton-sidecar processes
# on a one-member Baton ensemble and on Apache ZooKeeper (sdk/testenv.sh starts both once).
# Needs target/debug/baton-ensemble and baton-sidecar (cargo build -p baton-sidecar
# -p baton-ensemble --bins) and, for the ZooKeeper test, Debian's zookeeper package.
# sdk/test.sh [go] [python] [typescript] [java]: only those (default: all).
set -euo pipefail
cd "$(dirname "$0")"
sdk=$(pwd)
source ./testenv.sh
trap testenv_stop EXIT
langs=("$@")
((${#langs[@]})) || langs=(go)
testenv_start

t0=$SECONDS
for lang in "${langs[@]}"; do
  t=$SECONDS
  case $lang in
    go)
      cd "$sdk/go"
      unformatted=$(gofmt -l .)
      if [ -n "$unformatted" ]; then
        echo "gofmt: not formatted: $unformatted" >&2
        exit 1
      fi
      go vet ./...
      go test -count=1 ./...
      ;;
    *)
      echo "unknown client: $lang" >&2
      exit 2
      ;;
  esac
  echo "sdk/$lang: passed in $((SECONDS - t))s" >&2
done
echo "sdk: ${langs[*]} passed in $((SECONDS - t0))s" >&2
