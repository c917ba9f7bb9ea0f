#!/usr/bin/env bash
# Benchmarks Baton against Apache ZooKeeper 3.8 on this machine, the same ensemble size for both,
# with the same client (baton-bench) and the same workloads, and prints one table side by side.
#
#   scripts/bench.sh [--quick] [--targets zk,baton] [--members 1|3|5]
#
#   --quick          ~2 s per cell instead of ~6 s, fewer failover rounds (about 2 minutes instead
#                    of 5 on an idle build; --members 3 adds a minute or more for ensemble-failover,
#                    whose rounds wait for the killed member to restart and rejoin)
#   --targets LIST   which servers to run (default zk,baton); a single one prints its own numbers
#   --members N      ensemble size (default 1: ZooKeeper standalone, Baton one member). With 3 or 5,
#                    every member runs on loopback on this one machine, and the bench's workers are
#                    spread round-robin across the members (worker i talks to member i mod N), so
#                    most writes are forwarded by a follower to the leader, as in production.
#                    With 3 or 5 members the table also has ensemble-failover: kill -9 the leader,
#                    time until a write through a surviving member is accepted (baton-bench
#                    restarts the killed member with the start script below and waits for it to
#                    rejoin before the next round).
#
# The sidecar rows run real baton-sidecar processes (built here) against each server: HTTP lock
# acquire+release, uncontended and contended, and /leader hand-over on SIGTERM.
#
# Both servers keep their data under $BENCH_DIR (default target/bench/, the work tree's disk), both
# fsync every write before acknowledging it (ZooKeeper's default forceSync=yes; Baton always).
# Ports: the first free ones from $ZK_PORT (42181) for ZooKeeper clients (and $ZK_QUORUM_PORT
# (42888) for its quorum and election ports), and from $BATON_PORT (43181), $BATON_PEER_PORT
# (43888) and $BATON_ADMIN_PORT (43080) for Baton.
# Every member is started by a script of its own, $BENCH_DIR/run/start-<zk|baton>-<i>.sh, which
# writes the member's pid (the server process itself: the script ends in exec) to
# $BENCH_DIR/run/<zk|baton>-<i>.pid; that pid, and only that one, is what ensemble-failover kills.
# Memory is the sum of every member's RSS.
# Ratios read ">1 means Baton wins": Baton/ZK for ops/s, ZK/Baton for latencies and memory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cell=6s
election_rounds=30
handover_rounds=30
failover_rounds=10
targets=zk,baton
members=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) cell=2s; election_rounds=10; handover_rounds=10; failover_rounds=3 ;;
    --targets) targets=${2:?--targets needs a list}; shift ;;
    --members) members=${2:?--members needs a number}; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$members" in
  1|3|5) ;;
  *) echo "bench.sh: --members must be 1, 3 or 5 (got $members)" >&2; exit 2 ;;
esac
command -v jq >/dev/null || { echo "bench.sh: needs jq to build the table" >&2; exit 2; }

want() { [[ ",$targets," == *",$1,"* ]]; }
want zk || want baton || { echo "bench.sh: --targets must name zk and/or baton" >&2; exit 2; }

# True when something accepts connections on 127.0.0.1:$1.
port_busy() { (exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$1"); }

# Sets variable $1 to the first port from $2 up that nobody listens on: other engineers run
# servers on this machine too, and a four-letter word answered by someone else's server would
# otherwise be benchmarked silently.
taken=" "
pick_port() {
  local port=$2
  while port_busy "$port" || [[ "$taken" == *" $port "* ]]; do port=$((port + 1)); done
  taken+="$port "
  printf -v "$1" '%s' "$port"
}

work=${BENCH_DIR:-$root/target/bench}
# Per member i (1..members): client, quorum and election ports of ZooKeeper; client, peer and
# admin ports of Baton.
declare -A zk_port zk_quorum_port zk_election_port baton_port baton_peer_port baton_admin_port
for i in $(seq 1 "$members"); do
  pick_port "zk_port[$i]" "${ZK_PORT:-42181}"
  pick_port "zk_quorum_port[$i]" "${ZK_QUORUM_PORT:-42888}"
  pick_port "zk_election_port[$i]" "${ZK_QUORUM_PORT:-42888}"
  pick_port "baton_port[$i]" "${BATON_PORT:-43181}"
  pick_port "baton_peer_port[$i]" "${BATON_PEER_PORT:-43888}"
  pick_port "baton_admin_port[$i]" "${BATON_ADMIN_PORT:-43080}"
done
bench=$root/target/release/baton-bench
results=$work/results.jsonl

# The sidecar rows run baton-sidecar against ZooKeeper too.
packages=(-p baton-bench -p baton-sidecar)
want baton && packages+=(-p baton-ensemble)
echo "building ${packages[*]} (release)..." >&2
(cd "$root" && cargo build --release --quiet "${packages[@]}")

# Only what this script creates is removed, whatever $BENCH_DIR points at.
rm -rf "$work/zk" "$work/baton" "$work/run"
mkdir -p "$work/run"
: >"$results"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Members that ensemble-failover restarted are not our children; their pid files say where
  # they are. A pid is stopped only while its command line still names this run's directory,
  # so a stranger that reused the number is left alone.
  local file pid
  for file in "$work"/run/*.pid; do
    [ -e "$file" ] || continue
    pid=$(<"$file")
    if [[ "$pid" =~ ^[0-9]+$ ]] && grep -qaF "$work/" "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Writes $work/run/start-$1-$2.sh, which runs member $2 of $1 (zk or baton) in the foreground:
# it writes its own pid to $work/run/$1-$2.pid and then execs the server (arguments 4..), so the
# pid is the server's own process, never a wrapper; output is appended to log $3.
member_script() {
  local name=$1 i=$2 log=$3; shift 3
  local script=$work/run/start-$name-$i.sh
  {
    echo '#!/usr/bin/env bash'
    printf 'echo $$ >%q\n' "$work/run/$name-$i.pid"
    printf 'exec'
    printf ' %q' "$@"
    printf ' >>%q 2>&1 </dev/null\n' "$log"
  } >"$script"
  chmod +x "$script"
  : >"$log"
}

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

# True when process $2 (or a thread of it) is the one listening on port $1.
listens() { ss -Hltnp "sport = :$1" 2>/dev/null | grep -q "pid=$2,"; }

# ZooKeeper member $1 serves clients: standalone, or in a quorum that has a leader.
zk_ready() {
  local i=$1
  [[ "$(four_letter 127.0.0.1 "${zk_port[$i]}" srvr)" == *"Mode: "* ]] &&
    listens "${zk_port[$i]}" "${zk_pid[$i]}"
}
# Baton member $1 knows a leader and has applied what it knows committed.
baton_ready() {
  local i=$1
  [ "$(four_letter 127.0.0.1 "${baton_port[$i]}" ruok)" = imok ] &&
    listens "${baton_port[$i]}" "${baton_pid[$i]}" &&
    curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:${baton_admin_port[$i]}/readyz" >/dev/null
}

# The data dir and config of member $1 of a ZooKeeper quorum, and its start script: the same JVM
# flags as reference-zookeeper.sh (which runs standalone only), plus the quorum's server list and
# this member's myid.
zk_member() {
  local i=$1 dir=$work/zk/$1 j
  mkdir -p "$dir"
  echo "$i" >"$dir/myid"
  {
    echo "tickTime=2000"
    echo "initLimit=10"
    echo "syncLimit=5"
    echo "dataDir=$dir"
    echo "clientPort=${zk_port[$i]}"
    echo "maxClientCnxns=0"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=*"
    for j in $(seq 1 "$members"); do
      echo "server.$j=127.0.0.1:${zk_quorum_port[$j]}:${zk_election_port[$j]}"
    done
  } >"$dir/zoo.cfg"
  member_script zk "$i" "$work/zk-$i.log" \
    java -Xmx512m -Dzookeeper.extendedTypesEnabled=true -Dzookeeper.root.logger=WARN,CONSOLE \
    -Dlog4j.configuration=file:/etc/zookeeper/conf/log4j.properties \
    -cp "/usr/share/java/*:/etc/zookeeper/conf" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
}

declare -A server zk_pid baton_pid
# Members authenticate each other with certificates, as in production.
if want baton; then
  "$root/target/release/baton-ensemble" certs --out "$work/certs" --cluster-id bench \
    --ids "$(seq -s, 1 "$members")" 2>/dev/null
fi
baton_members=()
for i in $(seq 1 "$members"); do baton_members+=("$i=127.0.0.1:${baton_peer_port[$i]}"); done
baton_members=$(IFS=,; echo "${baton_members[*]}")
zk_servers=() baton_servers=()
for i in $(seq 1 "$members"); do
  if want zk; then
    # Every way ends in exec java, so $! is the JVM whose memory we measure.
    if [ "$members" = 1 ]; then
      member_script zk 1 "$work/zk.log" \
        "$root/scripts/reference-zookeeper.sh" "${zk_port[$i]}" "$work/zk"
    else
      zk_member "$i"
    fi
    "$work/run/start-zk-$i.sh" &
    zk_pid[$i]=$!; pids+=("$!")
    zk_servers+=("127.0.0.1:${zk_port[$i]}")
  fi
  if want baton; then
    if [ "$members" = 1 ]; then baton_dir=$work/baton; else baton_dir=$work/baton/$i; fi
    member_script baton "$i" "$work/baton$([ "$members" = 1 ] || echo "-$i").log" \
      "$root/target/release/baton-ensemble" --id "$i" --data-dir "$baton_dir" \
      --client-addr "127.0.0.1:${baton_port[$i]}" --peer-addr "127.0.0.1:${baton_peer_port[$i]}" \
      --admin-addr "127.0.0.1:${baton_admin_port[$i]}" --members "$baton_members" \
      --tls-ca "$work/certs/ca.crt" --tls-cert "$work/certs/member-$i.crt" \
      --tls-key "$work/certs/member-$i.key"
    "$work/run/start-baton-$i.sh" &
    baton_pid[$i]=$!; pids+=("$!")
    baton_servers+=("127.0.0.1:${baton_port[$i]}")
  fi
done
server[zk]=$(IFS=,; echo "${zk_servers[*]}")
server[baton]=$(IFS=,; echo "${baton_servers[*]}")
for i in $(seq 1 "$members"); do
  suffix=$([ "$members" = 1 ] || echo "-$i")
  want zk && wait_ready "ZooKeeper member $i" "${zk_pid[$i]}" "$work/zk$suffix.log" zk_ready "$i"
  want baton && wait_ready "Baton member $i" "${baton_pid[$i]}" "$work/baton$suffix.log" baton_ready "$i"
done

names=()
want zk && names+=(zk)
want baton && names+=(baton)

# Resident memory of every member of server $1 (zk or baton), summed, in KiB.
rss_kib() {
  local -n member_pids="$1_pid"
  local total=0 pid kib
  for pid in "${member_pids[@]}"; do
    [ -r "/proc/$pid/status" ] || { echo "bench.sh: $1 process $pid is gone" >&2; exit 1; }
    kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
    total=$((total + kib))
  done
  echo "$total"
}
declare -A rss_idle rss_full
for name in "${names[@]}"; do rss_idle[$name]=$(rss_kib "$name"); done

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start; $members member(s) each" >&2

# The disk's own fdatasync latency, the floor under every durable write. Measured before and
# after the matrix: on a shared machine it moves with everyone else's I/O.
disk_sync() {
  "$bench" --workload fsync --ops 1000 --fsync-dir "$work" --label "$1" --json >>"$results"
}
disk_sync disk-before

# One cell of the matrix: the same arguments against every server, one after the other, so
# background load on this shared machine hits both alike. A literal {name} in an argument
# becomes the server's name (zk or baton).
cell() {
  for name in "${names[@]}"; do
    "$bench" --servers "${server[$name]}" --label "$name" --json "${@//\{name\}/$name}" |
      tee -a "$results" |
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
cell --workload sidecar-lock-uncontended --workers 1 --duration "$cell"
cell --workload sidecar-lock-contended --workers 5 --duration "$cell"
cell --workload election-failover --workers 5 --ops "$election_rounds"
cell --workload sidecar-handover --workers 3 --ops "$handover_rounds"
cell --workload watch-fanout --workers 100 --duration "$cell"
cell --workload populate --workers 32 --ops 100000 --data-size 100
for name in "${names[@]}"; do rss_full[$name]=$(rss_kib "$name"); done
# Last: it replaces members (new pids), which the memory figures above must not see.
if [ "$members" -ge 3 ]; then
  echo "ensemble-failover: kill -9 of the leader, $failover_rounds round(s) each (bash reports each kill)" >&2
  cell --workload ensemble-failover --ops "$failover_rounds" \
    --member-pid-file "$work/run/{name}-{id}.pid" --member-start "$work/run/start-{name}-{id}.sh"
fi

disk_sync disk-after
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
    $3 ~ /^disk-/ {
      disk = disk sprintf("%s: append 1 KiB + fdatasync p50 %s, p99 %s, p999 %s (%.0f/s)\n",
                          $3, lat($5), lat($6), lat($7), $4)
      next
    }
    {
      key = $1 " w" $2
      if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
      ops[key, $3] = $4; p50[key, $3] = $5; p99[key, $3] = $6; p999[key, $3] = $7
    }
    END {
      a = target[1]; b = target[n]
      printf "%-28s", "workload"
      split("ops/s p50 p99 p999", metric, " ")
      for (m = 1; m <= 4; m++) {
        for (t = 1; t <= n; t++) printf " %12s", metric[m] "(" target[t] ")"
        if (n == 2) printf " %6s", "x"
      }
      printf "\n"
      for (r = 1; r <= rows; r++) {
        key = order[r]
        printf "%-28s", key
        # Hand-over and failover rows time rounds that include restarts: their rate says
        # nothing, their latencies are the result.
        timed = (key ~ /(failover|handover) w/)
        for (t = 1; t <= n; t++) printf (timed ? " %12s" : " %12.0f"), (timed ? "-" : ops[key, target[t]])
        if (n == 2) printf " %6s", (timed ? "-" : ratio(ops[key, b], ops[key, a]))
        for (t = 1; t <= n; t++) printf " %12s", lat(p50[key, target[t]])
        if (n == 2) printf " %6s", ratio(p50[key, a], p50[key, b])
        for (t = 1; t <= n; t++) printf " %12s", lat(p99[key, target[t]])
        if (n == 2) printf " %6s", ratio(p99[key, a], p99[key, b])
        for (t = 1; t <= n; t++) printf " %12s", lat(p999[key, target[t]])
        if (n == 2) printf " %6s", ratio(p999[key, a], p999[key, b])
        printf "\n"
      }
      printf "%s", disk
    }'

printf '%-28s' "memory (RSS)"
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
