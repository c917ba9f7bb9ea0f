#!/usr/bin/env bash
# Benchmarks a one-member Baton against a one-member Apache ZooKeeper 3.8 on this machine, with the
# same client (baton-bench) and the same workloads, and prints one table side by side.
#
#   scripts/bench.sh [--quick] [--targets zk,baton] [--members 1]
#
#   --quick          ~2 s per cell instead of ~6 s (the whole run then takes a couple of minutes)
#   --targets LIST   which servers to run (default zk,baton); a single one prints its own numbers
#   --members N      ensemble size; only 1 for now
#
# Both servers keep their data under $BENCH_DIR (default target/bench/, the work tree's disk), both
# fsync every write before acknowledging it (ZooKeeper's default forceSync=yes; Baton always).
# Ports: $ZK_PORT (22181) for ZooKeeper; $BATON_PORT (23181), $BATON_PEER_PORT (23888) and
# $BATON_ADMIN_PORT (23080) for Baton. Ratios read ">1 means Baton wins": Baton/ZK for ops/s,
# ZK/Baton for latencies and memory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cell=6s
election_rounds=30
targets=zk,baton
members=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) cell=2s; election_rounds=10 ;;
    --targets) targets=${2:?--targets needs a list}; shift ;;
    --members) members=${2:?--members needs a number}; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$members" != 1 ]; then
  echo "bench.sh: --members $members: multi-member ensembles are not yet supported (only 1)" >&2
  exit 2
fi
command -v jq >/dev/null || { echo "bench.sh: needs jq to build the table" >&2; exit 2; }

want() { [[ ",$targets," == *",$1,"* ]]; }
want zk || want baton || { echo "bench.sh: --targets must name zk and/or baton" >&2; exit 2; }

work=${BENCH_DIR:-$root/target/bench}
zk_port=${ZK_PORT:-22181}
baton_port=${BATON_PORT:-23181}
baton_peer_port=${BATON_PEER_PORT:-23888}
baton_admin_port=${BATON_ADMIN_PORT:-23080}
bench=$root/target/release/baton-bench
results=$work/results.jsonl

packages=(-p baton-bench)
want baton && packages+=(-p baton-ensemble)
echo "building ${packages[*]} (release)..." >&2
(cd "$root" && cargo build --release --quiet "${packages[@]}")

# Only what this script creates is removed, whatever $BENCH_DIR points at.
rm -rf "$work/zk" "$work/baton"
mkdir -p "$work"
: >"$results"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Answers a four-letter word on HOST PORT (empty when nothing listens).
four_letter() {
  local reply
  reply=$(exec 2>/dev/null 3<>"/dev/tcp/$1/$2" && printf '%s' "$3" >&3 && timeout 2 cat <&3) || true
  printf '%s' "$reply"
}

# Waits until `check` succeeds, failing early if the server's process has died.
wait_ready() {
  local name=$1 pid=$2 log=$3; shift 3
  for _ in $(seq 1 120); do
    if "$@"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "bench.sh: $name exited during start-up; last lines of $log:" >&2
      tail -20 "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "bench.sh: $name not ready after 60 s; last lines of $log:" >&2
  tail -20 "$log" >&2
  exit 1
}

zk_ready() { [ "$(four_letter 127.0.0.1 "$zk_port" ruok)" = imok ]; }
baton_ready() {
  [ "$(four_letter 127.0.0.1 "$baton_port" ruok)" = imok ] &&
    curl -sf "http://127.0.0.1:$baton_admin_port/readyz" >/dev/null
}

declare -A server pid_of
if want zk; then
  # The reference script execs java, so $! is the JVM whose memory we measure.
  "$root/scripts/reference-zookeeper.sh" "$zk_port" "$work/zk" >"$work/zk.log" 2>&1 &
  pid_of[zk]=$!; pids+=("$!")
  server[zk]=127.0.0.1:$zk_port
fi
if want baton; then
  "$root/target/release/baton-ensemble" --id 1 --data-dir "$work/baton" \
    --client-addr "127.0.0.1:$baton_port" --peer-addr "127.0.0.1:$baton_peer_port" \
    --admin-addr "127.0.0.1:$baton_admin_port" >"$work/baton.log" 2>&1 &
  pid_of[baton]=$!; pids+=("$!")
  server[baton]=127.0.0.1:$baton_port
fi
want zk && wait_ready ZooKeeper "${pid_of[zk]}" "$work/zk.log" zk_ready
want baton && wait_ready Baton "${pid_of[baton]}" "$work/baton.log" baton_ready

names=()
want zk && names+=(zk)
want baton && names+=(baton)

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
declare -A rss_idle rss_full
for name in "${names[@]}"; do rss_idle[$name]=$(rss_kib "${pid_of[$name]}"); done

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2

# One cell of the matrix: the same arguments against every server, one after the other, so
# background load on this shared machine hits both alike.
cell() {
  for name in "${names[@]}"; do
    "$bench" --servers "${server[$name]}" --label "$name" --json "$@" | tee -a "$results" |
      jq -r '"  \(.label)\t\(.workload)\tworkers=\(.workers)\tops/s=\(.ops_per_sec)\tp50=\(.p50_us)us"' >&2
  done
}

cell --workload create-delete --workers 1 --duration "$cell"
cell --workload create-delete --workers 10 --duration "$cell"
cell --workload create-delete --workers 50 --duration "$cell"
cell --workload get-data --workers 10 --duration "$cell"
cell --workload mixed-90-10 --workers 10 --duration "$cell"
cell --workload mixed-50-50 --workers 10 --duration "$cell"
cell --workload lock-uncontended --workers 1 --duration "$cell"
cell --workload lock-contended --workers 10 --duration "$cell"
cell --workload election-failover --workers 5 --ops "$election_rounds"
cell --workload watch-fanout --workers 100 --duration "$cell"
cell --workload populate --workers 32 --ops 100000 --data-size 100
for name in "${names[@]}"; do rss_full[$name]=$(rss_kib "${pid_of[$name]}"); done

"$bench" --workload fsync --ops 1000 --fsync-dir "$work" --label disk --json >>"$results"
echo "machine: load $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

# The table: one row per cell, each metric for every server, and the ratio when there are two.
jq -r '[.workload, .workers, .label, .ops_per_sec, .p50_us, .p99_us, .p999_us] | @tsv' "$results" |
  awk -F'\t' -v names="${names[*]}" '
    function lat(us) {
      if (us == "") return "-"
      if (us < 1000) return sprintf("%.0fus", us)
      if (us < 1000000) return sprintf("%.2fms", us / 1000)
      return sprintf("%.2fs", us / 1000000)
    }
    function ratio(num, den) { return (num > 0 && den > 0) ? sprintf("%.2f", num / den) : "-" }
    BEGIN { n = split(names, target, " ") }
    $3 == "disk" { disk = sprintf("disk: append 1 KiB + fdatasync: p50 %s, p99 %s, p999 %s (%.0f/s)",
                                  lat($5), lat($6), lat($7), $4); next }
    {
      key = $1 " w" $2
      if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
      ops[key, $3] = $4; p50[key, $3] = $5; p99[key, $3] = $6; p999[key, $3] = $7
    }
    END {
      a = target[1]; b = target[n]
      printf "%-22s", "workload"
      split("ops/s p50 p99 p999", metric, " ")
      for (m = 1; m <= 4; m++) {
        for (t = 1; t <= n; t++) printf " %12s", metric[m] "(" target[t] ")"
        if (n == 2) printf " %6s", "x"
      }
      printf "\n"
      for (r = 1; r <= rows; r++) {
        key = order[r]
        printf "%-22s", key
        for (t = 1; t <= n; t++) printf " %12.0f", ops[key, target[t]]
        if (n == 2) printf " %6s", ratio(ops[key, b], ops[key, a])
        for (t = 1; t <= n; t++) printf " %12s", lat(p50[key, target[t]])
        if (n == 2) printf " %6s", ratio(p50[key, a], p50[key, b])
        for (t = 1; t <= n; t++) printf " %12s", lat(p99[key, target[t]])
        if (n == 2) printf " %6s", ratio(p99[key, a], p99[key, b])
        for (t = 1; t <= n; t++) printf " %12s", lat(p999[key, target[t]])
        if (n == 2) printf " %6s", ratio(p999[key, a], p999[key, b])
        printf "\n"
      }
      print disk
    }'

printf '%-22s' "memory (RSS)"
for name in "${names[@]}"; do
  printf ' %s: %d MiB idle, %d MiB with 100k x 100 B znodes;' "$name" \
    $((rss_idle[$name] / 1024)) $((rss_full[$name] / 1024))
done
if [ "${#names[@]}" = 2 ]; then
  awk -v zk="${rss_full[zk]}" -v baton="${rss_full[baton]}" \
    'BEGIN { printf " x %.2f", (baton > 0 ? zk / baton : 0) }'
fi
printf '\n'
echo "(x: >1 means Baton wins. Raw results: $results)"
