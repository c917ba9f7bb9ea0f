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
((${#langs[@]})) || langs=(go python typescript java)
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
    python)
      # ruff from PyPI into the tools' virtualenv (Debian's python refuses `pip install` into
      # the system; tests/scripts/test.sh makes the venv, python3-venv if it must).
      tools=${BATON_TOOLS:-$HOME/.cache/baton-tools}
      if [ ! -x "$tools/venv/bin/ruff" ]; then
        [ -x "$tools/venv/bin/pip" ] || { mkdir -p "$tools"; python3 -m venv "$tools/venv"; }
        echo "installing ruff into $tools/venv" >&2
        "$tools/venv/bin/pip" install --quiet --disable-pip-version-check 'ruff==0.17.5'
      fi
      cd "$sdk/python"
      "$tools/venv/bin/ruff" check --no-cache .
      # -S: no site-packages at all, so the tests prove the client needs only the standard
      # library (the examples they start run with -S too).
      PYTHONPATH=.:tests python3 -S -m unittest discover -s tests
      ;;
    typescript)
      cd "$sdk/typescript"
      # tsc and Node's types from npm, as package-lock.json pins them.
      npm ci --no-audit --no-fund --loglevel=error
      rm -rf dist
      npx tsc -p . --strict
      node --test --test-concurrency=1 dist/test/*.test.js
      ;;
    java)
      cd "$sdk/java"
      # javac -Xlint:all -Werror, JUnit 5 (Maven Central, into ~/.m2 on first use).
      mvn -q -B verify
      ;;
    *)
      echo "unknown client: $lang" >&2
      exit 2
      ;;
  esac
  echo "sdk/$lang: passed in $((SECONDS - t))s" >&2
done
echo "sdk: ${langs[*]} passed in $((SECONDS - t0))s" >&2
