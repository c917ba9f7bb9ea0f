# shellcheck shell=bash
# Sourced by sdk/test.sh: starts, for the whole run, the two ensembles every client's tests use
# (a one-member Baton ensemble and Apache ZooKeeper 3.8, the reference), and exports where they
# and the sidecar binary are:
#   BATON_SDK_ENSEMBLE=127.0.0.1:PORT   BATON_SDK_ZOOKEEPER=127.0.0.1:PORT
#   BATON_SIDECAR_BIN=/abs/target/debug/baton-sidecar
# Each test starts its own baton-sidecar processes on them. testenv_stop (an EXIT trap of the
# caller) stops both ensembles and removes their data.

testenv_dir=
testenv_pids=()

testenv_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Answers `ruok` with `imok`? (bash's /dev/tcp: no netcat needed)
testenv_ruok() {
  local reply
  reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf ruok >&3; cat <&3" 2>/dev/null) || return 1
  [ "$reply" = imok ]
}

# testenv_wait NAME PID PORT LOG: polls the external process's start (there is no event to wait on).
testenv_wait() {
  local name=$1 pid=$2 port=$3 log=$4
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited while starting; its log:" >&2
      cat "$log" >&2
      return 1
    fi
    testenv_ruok "$port" && return 0
    sleep 0.2
  done
  echo "$name did not answer ruok on 127.0.0.1:$port within 60 s; its log:" >&2
  cat "$log" >&2
  return 1
}

testenv_start() {
  local root target
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  target=${CARGO_TARGET_DIR:-$root/target}
  case $target in /*) ;; *) target=$root/$target ;; esac
  testenv_dir=$(mktemp -d)
  local ensemble=$target/debug/baton-ensemble
  BATON_SIDECAR_BIN=$target/debug/baton-sidecar
  for bin in "$ensemble" "$BATON_SIDECAR_BIN"; do
    if [ ! -x "$bin" ]; then
      echo "$bin is missing: cargo build -p baton-sidecar -p baton-ensemble --bins" >&2
      return 1
    fi
  done
  export BATON_SIDECAR_BIN

  "$ensemble" certs --out "$testenv_dir/certs" --cluster-id sdk-tests --ids 1 >/dev/null 2>&1 || { echo "baton-ensemble certs failed" >&2; return 1; }
  local port
  port=$(testenv_free_port)
  "$ensemble" --id 1 --data-dir "$testenv_dir/baton" --client-addr "127.0.0.1:$port" \
    --peer-addr "127.0.0.1:$(testenv_free_port)" --admin-addr "127.0.0.1:$(testenv_free_port)" \
    --four-letter-words ruok --tls-ca "$testenv_dir/certs/ca.crt" \
    --tls-cert "$testenv_dir/certs/member-1.crt" --tls-key "$testenv_dir/certs/member-1.key" \
    >"$testenv_dir/baton.log" 2>&1 </dev/null &
  testenv_pids+=($!)
  testenv_wait baton-ensemble $! "$port" "$testenv_dir/baton.log" || return 1
  export BATON_SDK_ENSEMBLE=127.0.0.1:$port

  port=$(testenv_free_port)
  "$root/tests/scripts/reference-zookeeper.sh" "$port" "$testenv_dir/zookeeper" \
    >"$testenv_dir/zookeeper.log" 2>&1 </dev/null &
  testenv_pids+=($!)
  testenv_wait zookeeper $! "$port" "$testenv_dir/zookeeper.log" || return 1
  export BATON_SDK_ZOOKEEPER=127.0.0.1:$port
}

testenv_stop() {
  local pid
  for pid in "${testenv_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  testenv_pids=()
  [ -n "$testenv_dir" ] && rm -rf "$testenv_dir"
  testenv_dir=
}
