#!/usr/bin/env bash
# Builds, lints and tests every client library under sdk/ against real baton-sidecar processes
# on a one-member Baton ensemble and on Apache ZooKeeper (sdk/testenv.sh starts both once).
# Needs target/debug/baton-ensemble and baton-sidecar (cargo build -p baton-sidecar
# -p baton-ensemble --bins) and, for the ZooKeeper test, Debian's zookeeper package.
# Then, per language, the package is built and installed as sdk/README.md tells users, into a
# scratch project outside the repository, type-checked there and its README examples (copied from
# examples/) run against a real sidecar (installed_* below).
# sdk/test.sh [go] [python] [typescript] [java]: only those (default: all).
set -euo pipefail
cd "$(dirname "$0")"
sdk=$(pwd)
# shellcheck source-path=SCRIPTDIR source=testenv.sh
source ./testenv.sh
scratch=$(mktemp -d)
installed_pid=
cleanup() {
  [ -z "$installed_pid" ] || { kill "$installed_pid" 2>/dev/null || true; wait "$installed_pid" 2>/dev/null || true; }
  rm -rf "$scratch"
  testenv_stop
}
trap cleanup EXIT
langs=("$@")
((${#langs[@]})) || langs=(go python typescript java)
# Each library's generated file (error codes, operations, parameters, bounds) is what
# generate.py makes of the sidecar's OpenAPI document (made from its code), and the library's
# sources take routes, parameter names and bounds from it and use every operation for apps.
python3 ./generate.py --check "${langs[@]}"
testenv_start
# A harness that is missing fails the tests here (elsewhere the Java tests skip, for `mvn install`).
export BATON_SDK_REQUIRED=1
tools=${BATON_TOOLS:-$HOME/.cache/baton-tools}

# The tools' virtualenv (Debian's python refuses `pip install` into the system;
# tests/scripts/test.sh makes the venv, python3-venv if it must), with pinned tools from PyPI.
tools_pip() {
  [ -x "$tools/venv/bin/pip" ] || { mkdir -p "$tools"; python3 -m venv "$tools/venv"; }
  echo "installing $* into $tools/venv" >&2
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "$@"
}

# One sidecar for the installed packages' examples, standing in election "" (the examples' own).
installed_sidecar() {
  [ -z "$installed_pid" ] || return 0
  local port
  port=$(testenv_free_port)
  "$BATON_SIDECAR_BIN" --ensemble "$BATON_SDK_ENSEMBLE" --listen "127.0.0.1:$port" \
    --identity "installed-$$" --session-timeout 10s --election "installed-$$" \
    >"$scratch/sidecar.log" 2>&1 </dev/null &
  installed_pid=$!
  export BATON_SIDECAR=127.0.0.1:$port
  python3 - "$port" <<'PY' || { cat "$scratch/sidecar.log" >&2; return 1; }
import sys, time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit("the sidecar for the installed packages did not become ready")
PY
}

# examples_run LANG LOCK-COMMAND -- LEADER-COMMAND: the lock example prints its token and exits
# 0; the leader example prints its token, and exits on SIGTERM with 0 (the JVM: 143, after its
# shutdown hook handed over).
examples_run() {
  local lang=$1 out=$scratch/$1.out
  shift
  local lock=() leader=()
  while [ "$1" != -- ]; do lock+=("$1"); shift; done
  shift
  leader=("$@")
  installed_sidecar
  "${lock[@]}" >"$out" || { echo "$lang: the installed lock example failed" >&2; return 1; }
  grep -q '^holding db with fencing token [0-9]' "$out" || { echo "$lang: lock example printed: $(cat "$out")" >&2; return 1; }
  "${leader[@]}" >"$out" &
  local pid=$! _
  for _ in $(seq 1 300); do
    grep -q '^leading with fencing token [0-9]' "$out" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^leading with fencing token [0-9]' "$out" || { kill "$pid" 2>/dev/null; echo "$lang: leader example printed: $(cat "$out")" >&2; return 1; }
  kill -TERM "$pid"
  local status=0 want=0
  [ "$lang" != java ] || want=143
  wait "$pid" || status=$?
  [ "$status" = "$want" ] || { echo "$lang: the installed leader example exited $status on SIGTERM, not $want" >&2; return 1; }
}

# The examples, as a user copies them from the README (the leader one campaigns in the
# election "" of the sidecar, which is the one it stands in).

installed_go() {
  # sdk/go/README.md: a consumer module requiring baton.dev/baton, replaced by a local copy.
  local dir=$scratch/go
  mkdir -p "$dir/lock" "$dir/leader"
  cp "$sdk/go/examples/lock/main.go" "$dir/lock/"
  cp "$sdk/go/examples/leader/main.go" "$dir/leader/"
  (
    cd "$dir"
    go mod init example.com/consumer >/dev/null 2>&1
    go mod edit -require=baton.dev/baton@v0.0.0 -replace=baton.dev/baton="$sdk/go"
    go vet ./...
    go build -o bin/ ./...
  )
  examples_run go "$dir/bin/lock" -- "$dir/bin/leader"
}

installed_python() {
  # sdk/python/README.md: python -m build, the wheel into a fresh virtualenv; mypy --strict
  # on the examples there (the package is typed: py.typed).
  local dir=$scratch/python
  mkdir -p "$dir"
  "$tools/venv/bin/python" -m build --wheel --outdir "$dir/dist" "$sdk/python" >"$dir/build.log" 2>&1 ||
    { cat "$dir/build.log" >&2; return 1; }
  rm -rf "$sdk/python/build" "$sdk/python"/*.egg-info
  # A fresh virtualenv; the tools' pip installs into it (--python), which saves bootstrapping
  # a pip of its own.
  python3 -m venv --without-pip "$dir/venv"
  "$tools/venv/bin/pip" --python "$dir/venv/bin/python" install --quiet --disable-pip-version-check "$dir"/dist/*.whl
  cp "$sdk/python/examples/lock.py" "$sdk/python/examples/leader.py" "$dir/"
  (cd "$dir" && "$tools/venv/bin/mypy" --strict --cache-dir "$tools/mypy-cache" \
    --python-executable "$dir/venv/bin/python" lock.py leader.py)
  examples_run python "$dir/venv/bin/python" "$dir/lock.py" -- "$dir/venv/bin/python" "$dir/leader.py"
}

installed_typescript() {
  # sdk/typescript/README.md: npm pack (prepare builds dist/src), the tarball installed into a
  # project of the user's; tsc --strict on the examples there.
  local dir=$scratch/typescript tgz
  mkdir -p "$dir"
  tgz=$(cd "$sdk/typescript" && npm pack --silent --pack-destination "$dir" | tail -1)
  local extra
  extra=$(tar tzf "$dir/$tgz" | grep -v -e '^package/dist/src/' -e '^package/package.json$' \
    -e '^package/README.md$' -e '^package/LICENSE$' || true)
  [ -z "$extra" ] || { echo "typescript: the package holds more than dist/src: $extra" >&2; return 1; }
  (
    cd "$dir"
    printf '{"name": "consumer", "private": true, "type": "module"}\n' >package.json
    npm install --no-audit --no-fund --loglevel=error --prefer-offline "./$tgz" typescript@5.9.3 '@types/node@^20.9.5'
    for ex in lock leader; do
      sed 's#"../src/index.js"#"@baton/sidecar-client"#' "$sdk/typescript/examples/$ex.ts" >"$ex.ts"
    done
    npx tsc --strict --target ES2022 --lib ES2022,ESNext.Disposable --module NodeNext \
      --moduleResolution NodeNext --types node lock.ts leader.ts
  )
  examples_run typescript node "$dir/lock.js" -- node "$dir/leader.js"
}

installed_java() {
  # sdk/java/README.md: mvn install (done above), then a project of the user's depending on
  # dev.baton:baton-sidecar-client from the local repository.
  local dir=$scratch/java version
  version=$(sed -n 's#^  <version>\(.*\)</version>#\1#p' "$sdk/java/pom.xml" | head -1)
  mkdir -p "$dir/src/main/java/consumer"
  for ex in LockExample LeaderExample; do
    sed 's/^package dev.baton.sdk.examples;/package consumer;/' \
      "$sdk/java/src/test/java/dev/baton/sdk/examples/$ex.java" >"$dir/src/main/java/consumer/$ex.java"
  done
  cat >"$dir/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>consumer</groupId>
  <artifactId>consumer</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>dev.baton</groupId>
      <artifactId>baton-sidecar-client</artifactId>
      <version>$version</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.14.1</version>
        <configuration><compilerArgs><arg>-Xlint:all</arg><arg>-Werror</arg></compilerArgs></configuration>
      </plugin>
    </plugins>
  </build>
</project>
POM
  (cd "$dir" && mvn -q -B compile)
  # Run with the very jar Maven compiled against, from the local repository.
  local cp=$dir/target/classes:$HOME/.m2/repository/dev/baton/baton-sidecar-client/$version/baton-sidecar-client-$version.jar
  examples_run java java -cp "$cp" consumer.LockExample -- java -cp "$cp" consumer.LeaderExample
}

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
      installed_go
      ;;
    python)
      # ruff, mypy and build from PyPI into the tools' virtualenv.
      if ! { [ -x "$tools/venv/bin/ruff" ] && [ -x "$tools/venv/bin/mypy" ] &&
        "$tools/venv/bin/python" -c 'import build' 2>/dev/null; }; then
        tools_pip 'ruff==0.17.5' 'mypy==2.4.1' 'build==1.6.1'
      fi
      cd "$sdk/python"
      "$tools/venv/bin/ruff" check --no-cache .
      "$tools/venv/bin/mypy" --strict --cache-dir "$tools/mypy-cache" baton
      # -S: no site-packages at all, so the tests prove the client needs only the standard
      # library (the examples they start run with -S too).
      PYTHONPATH=.:tests python3 -S -m unittest discover -s tests
      installed_python
      ;;
    typescript)
      cd "$sdk/typescript"
      # tsc and Node's types from npm, as package-lock.json pins them (prepare, the build, is
      # run below as tsc --strict, and again by npm pack).
      npm ci --no-audit --no-fund --loglevel=error --ignore-scripts
      rm -rf dist
      npx tsc -p . --strict
      node --test --test-concurrency=1 dist/test/*.test.js
      installed_typescript
      ;;
    java)
      cd "$sdk/java"
      # javac -Xlint:all -Werror, JUnit 5 (Maven Central, into ~/.m2 on first use); install
      # puts the jar, its sources and javadoc into ~/.m2 as the README says.
      mvn -q -B install
      # Elsewhere (no ensembles, as the README's `mvn install` runs) the harness tests skip.
      env -u BATON_SDK_ENSEMBLE -u BATON_SDK_ZOOKEEPER -u BATON_SDK_REQUIRED mvn -q -B -o surefire:test
      installed_java
      ;;
    *)
      echo "unknown client: $lang" >&2
      exit 2
      ;;
  esac
  echo "sdk/$lang: passed in $((SECONDS - t))s" >&2
done
echo "sdk: ${langs[*]} passed in $((SECONDS - t0))s" >&2
