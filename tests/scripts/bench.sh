#!/usr/bin/env bash
# Benchmarks Baton against Apache ZooKeeper 3.8 on this machine, the same ensemble size for both,
# with the same client (baton-bench) and the same workloads, and prints one table side by side.
#
#   tests/scripts/bench.sh [--quick] [--targets zk,baton,etcd] [--members 1|3|5] [--tls peer|off|on|both]
#                    [--rows LIST] [--repeat N] [--sessions LIST]
#
#   --quick          ~2 s per cell instead of ~6 s, fewer failover rounds (about 2 minutes instead
#                    of 5 on an idle build; --members 3 adds a minute or more for ensemble-failover,
#                    whose rounds wait for the killed member to restart and rejoin)
#   --targets LIST   which servers to run (default zk,baton,etcd); a single one prints its own
#                    numbers. etcd (Debian's etcd-server, 3.4) runs as a cluster of --members on
#                    loopback, plain (left out with --tls on or both), on the rows that mean the
#                    same thing there (baton-bench --etcd): create-delete (put + delete), get-data
#                    (serializable gets, like ZooKeeper's member-local reads), get-data-linearizable
#                    (linearizable gets; ZooKeeper and Baton: sync + getData), the mixes (gets and
#                    puts), lock-* (etcd's lock service) and election-failover (its election
#                    service: the leader resigns, the next campaign returns, Observe names it).
#                    Installed from Debian when missing, with protoc for baton-bench's etcd
#                    client (its cargo feature `etcd`, built here).
#   --members N      ensemble size (default 1: ZooKeeper standalone, Baton one member). With 3 or 5,
#                    every member runs on loopback on this one machine, and the bench's workers are
#                    spread round-robin across the members (worker i talks to member i mod N), so
#                    most writes are forwarded by a follower to the leader, as in production.
#                    With 3 or 5 members the table also has ensemble-failover: kill -9 the leader,
#                    time until a write through a surviving member is accepted (baton-bench
#                    restarts the killed member with the start script below and waits for it to
#                    rejoin before the next round). Worker 0, the whole of the one-worker rows,
#                    talks to a follower of every server (each list is rotated to start at one,
#                    checked every round), so no server is timed through its leader alone;
#                    ONE_CLIENT_ON=leader puts it on each server's leader instead.
#                    They also get sessions-failover (20 sessions on the leader, each writing;
#                    kill -9 the leader; per session, time until it writes again; sessions lost)
#                    and sessions-scale (sidecar-like sessions, 10 per election: each member's
#                    RSS and idle CPU, election hand-over at that scale, and after a kill -9 of
#                    the leader, then of the busiest follower, how soon every session is back
#                    and how many were lost; see --sessions). --rows sessions-10k still
#                    selects it.
#   --tls MODE       TLS on Baton's (and ZooKeeper's) links. peer (default): Baton members
#                    authenticate each other with certificates, clients use the plain port,
#                    ZooKeeper runs plain. off: Baton with --insecure-no-tls (all plain, like
#                    plain ZooKeeper). on: TLS everywhere: Baton with peer TLS and
#                    --secure-client-addr, ZooKeeper with sslQuorum and secureClientPort (Netty),
#                    and every bench session over TLS (baton-bench --tls-ca); labels zk-tls and
#                    baton-tls. both: the off and on servers side by side (zk, zk-tls, baton,
#                    baton-tls), each cell run against all of them in turn, with TLS/plain
#                    ratios. TLS servers keep their plain client port for the readiness probes
#                    and ensemble-failover's `srvr` (that row alone uses it).
#   --rows LIST      only these rows: workload names (create-delete,get-data,..) or
#                    WORKLOAD:WORKERS (create-delete:50); default all
#   --repeat N       run the selected rows N times (default 1), the servers' order reversed
#                    every other round; the table shows each round and their mean. populate
#                    runs in the last round only, ensemble-failover once after it.
#   --sessions LIST  sessions-scale's session counts (default 10000), e.g. 10000,25000,50000,
#                    100000: the row runs once per count, smallest first, against each server.
#                    A server that fails at a count (baton-bench's error, no result within
#                    $SESSIONS_TIMEOUT seconds (default 1800), or a member that died) is not
#                    run at larger counts; its first failure is printed after the table. Every
#                    process needs an open-files limit above the largest count (the bench holds
#                    every session): bench.sh raises it when it can (root with
#                    CAP_SYS_RESOURCE), else stops before starting anything. Sessions are
#                    spread over loopback addresses, $SESSIONS_PER_ADDRESS (20,000) each
#                    (127.0.0.1..127.0.0.K): one destination address and port leaves a client
#                    about 28,000 local ports (32768-60999). ZooKeeper listens on every address
#                    already; with K > 1 Baton's members listen on 0.0.0.0 (see baton_member).
#                    Baton's members then accept up to the largest count
#                    (--max-client-connections, 10,000 by default), so that its cap, like
#                    ZooKeeper's heap (ZK_HEAP below), is not what is measured.
#   --no-build       use the binaries as they are (in $BENCH_BIN_DIR, default target/release)
#                    instead of running cargo build first; e.g. a copy made once, so that other
#                    builds in this work tree cannot change them between runs
#
# The sidecar rows run real baton-sidecar processes (built here) against each server: HTTP lock
# acquire+release, uncontended and contended, and /leader hand-over on SIGTERM; semaphore
# acquire+release (2 permits), uncontended and contended; and an app crash (SIGKILL of a child
# process standing for the app): app-crash-lock-free-{stream,ttl,zk-session} time until a waiting
# pod gets the crashed app's lock (held with hold=stream, as a 2 s lease, or by a plain ZooKeeper
# client with a 4 s session), app-crash-new-leader-{health,none} until another pod's sidecar leads
# (with --app-health 100ms x 2; without it the leader never changes: "never", after waiting 5 s).
# --rows app-crash-lock-free (a prefix of row names followed by -) selects a whole family.
#
# Both servers keep their data under $BENCH_DIR (default target/bench/, the work tree's disk), both
# fsync every write before acknowledging it (ZooKeeper's default forceSync=yes; Baton always).
# ZooKeeper's members run with a JVM heap of $ZK_HEAP (-Xmx; default 512m); give sessions-scale
# more (ZK_HEAP=4g), so that the heap's cap is not what fails at large --sessions counts.
# Ports: the first free ones from $ZK_PORT (22181) for ZooKeeper clients, $ZK_SECURE_PORT (22281)
# for its TLS clients (and $ZK_QUORUM_PORT (22888) for its quorum and election ports), and from
# $BATON_PORT (23181), $BATON_SECURE_PORT (23281), $BATON_PEER_PORT (23888) and $BATON_ADMIN_PORT
# (23080) for Baton, and from $ETCD_PORT (24379) and $ETCD_PEER_PORT (24479) for etcd, whose data is
# under $BENCH_DIR/etcd/<i>. All below Linux's ephemeral range (32768-60999): with 10,000 client
# connections open, a member restarted by a failover row could otherwise find its port taken by
# one of them (it happened: "cannot listen on the admin address").
# The floor: before the matrix, `fsync` with as many writers as members (each its own file, as
# every member persists each entry to its own log on this one disk) and `loopback-rtt` (a 64-byte
# echo over 127.0.0.1); fsync again at the end. floor = fdatasync p50 (the mean of both) +
# loopback p50, and the table's "floor x" columns give every single-client row's p50 as a multiple
# of it.
# Every member is started by a script of its own, $BENCH_DIR/run/start-<name>-<i>.sh (name: zk,
# zk-tls, baton, baton-tls), which writes the member's pid (the server process itself: the
# script ends in exec) to $BENCH_DIR/run/<name>-<i>.pid; that pid, and only that one, is what
# ensemble-failover kills.
# Memory is the sum of every member's RSS.
# Ratios read ">1 means the second wins": Baton/ZK (or TLS/plain) for ops/s, ZK/Baton (plain/TLS)
# for latencies and memory.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cell=6s
election_rounds=30
handover_rounds=30
crash_rounds=20
ttl_rounds=10
zk_crash_rounds=5
failover_rounds=10
sessions_rounds=3
targets=zk,baton,etcd
members=1
tls=peer
rows=all
repeat=1
build=1
session_counts=10000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) cell=2s; election_rounds=10; handover_rounds=10; failover_rounds=3; sessions_rounds=2
             crash_rounds=10; ttl_rounds=4; zk_crash_rounds=3 ;;
    --targets) targets=${2:?--targets needs a list}; shift ;;
    --members) members=${2:?--members needs a number}; shift ;;
    --tls) tls=${2:?--tls needs peer, off, on or both}; shift ;;
    --rows) rows=${2:?--rows needs a list}; shift ;;
    --repeat) repeat=${2:?--repeat needs a number}; shift ;;
    --no-build) build=0 ;;
    --sessions) session_counts=${2:?--sessions needs a list}; shift ;;
    -h|--help) sed -n "2,$(($(grep -n '^set -euo' "$0" | cut -d: -f1) - 1))p" "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$members" in
  1|3|5) ;;
  *) echo "bench.sh: --members must be 1, 3 or 5 (got $members)" >&2; exit 2 ;;
esac
case "$tls" in
  peer|off|on|both) ;;
  *) echo "bench.sh: --tls must be peer, off, on or both (got $tls)" >&2; exit 2 ;;
esac
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: --repeat must be a positive number" >&2; exit 2; }
command -v jq >/dev/null || { echo "bench.sh: needs jq to build the table" >&2; exit 2; }
[[ "$session_counts" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "bench.sh: --sessions must be a list of positive numbers (got $session_counts)" >&2; exit 2; }
session_counts=$(tr , '\n' <<<"$session_counts" | sort -n | uniq | paste -sd,)
max_sessions=${session_counts##*,}
# Loopback addresses sessions-scale spreads N sessions over: $SESSIONS_PER_ADDRESS (20,000)
# each, below the ~28,000 local ports a client has per destination address and port.
per_address=${SESSIONS_PER_ADDRESS:-20000}
loopback_addresses() { echo $((($1 + per_address - 1) / per_address)); }
max_loopback=$(loopback_addresses "$max_sessions")

want() { [[ ",$targets," == *",$1,"* ]]; }
want zk || want baton || want etcd || { echo "bench.sh: --targets must name zk, baton and/or etcd" >&2; exit 2; }

# The servers under test, in table order. A name ending in -tls serves (and is benchmarked
# on) a TLS client port and runs its quorum over TLS; plain "baton" has peer TLS unless
# --tls off/both.
names=()
for server_kind in zk baton; do
  want "$server_kind" || continue
  if [ "$tls" != on ]; then names+=("$server_kind"); fi
  if [ "$tls" = on ] || [ "$tls" = both ]; then names+=("$server_kind-tls"); fi
done
# etcd runs plain only: its rows compare the servers' own protocols, and it has no counterpart of
# the TLS servers' rows.
if want etcd; then
  if [ "$tls" = on ] || [ "$tls" = both ]; then
    echo "bench.sh: etcd runs plain only; left out with --tls $tls" >&2
  else
    names+=(etcd)
  fi
fi
is_etcd() { [ "$1" = etcd ]; }
is_tls() { [[ "$1" == *-tls ]]; }
is_zk() { [[ "$1" == zk* ]]; }
# Does plain "baton" run with --insecure-no-tls?
baton_plain_insecure() { [ "$tls" = off ] || [ "$tls" = both ]; }
# Pairs whose ratio the table shows: ZooKeeper vs Baton, or plain vs TLS of each server.
pairs=()
if [ "$tls" = both ]; then
  want zk && pairs+=(zk:zk-tls)
  want baton && pairs+=(baton:baton-tls)
else
  core=()
  for name in "${names[@]}"; do is_etcd "$name" || core+=("$name"); done
  [ "${#core[@]}" != 2 ] || pairs+=("${core[0]}:${core[1]}")
fi
# Baton against etcd as well.
if [[ " ${names[*]} " == *" etcd "* && " ${names[*]} " == *" baton "* ]]; then pairs+=(etcd:baton); fi

# --rows: is row $1 (workload) with $2 workers selected?
row_wanted() {
  [ "$rows" = all ] && return 0
  [[ ",$rows," == *",$1,"* || ",$rows," == *",$1:$2,"* ]] && return 0
  # A family: app-crash-lock-free selects app-crash-lock-free-stream, -ttl and -zk-session.
  local entry
  for entry in ${rows//,/ }; do [[ "$1" == "$entry"-* ]] && return 0; done
  return 1
}

# sessions-scale (its old name, sessions-10k, still selects it).
sessions_scale_wanted() { row_wanted sessions-scale "$max_sessions" || row_wanted sessions-10k 10000; }

# The limit is per process: sessions-scale holds every session's connection in the bench
# process, and each member (which inherits the limit) about a third of them, half after a
# kill, all of them at worst; the rest of the matrix needs far fewer. The margin covers the
# bench's probes, the members' logs and snapshots and the JVMs' jars.
nofile_margin=1000
nofile_needed=$((max_sessions + nofile_margin))
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$nofile_needed" ] && [ "$(id -u)" = 0 ]; then
  # Raising the hard limit takes CAP_SYS_RESOURCE, which root in a container may not have.
  ulimit -Hn "$nofile_needed" 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$members" -ge 3 ] && [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$nofile_needed" ] &&
  sessions_scale_wanted; then
  if [ "$(id -u)" = 0 ]; then
    how="root could not raise it: that takes CAP_SYS_RESOURCE, which this process lacks (a container's default); start the run where it has the capability, or with a higher limit (docker run --ulimit nofile=$nofile_needed:$nofile_needed, LimitNOFILE= in systemd)"
  else
    how="raise it as root (ulimit -Hn $nofile_needed; ulimit -n $nofile_needed), in /etc/security/limits.conf (nofile) or with LimitNOFILE= in systemd"
  fi
  echo "bench.sh: sessions-scale with $max_sessions sessions needs $nofile_needed open files per process (the bench holds every session), but ulimit -n is $(ulimit -n), hard limit $(ulimit -Hn); $how; or pass --sessions no larger than $(($(ulimit -Hn) - nofile_margin))" >&2
  exit 2
fi

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
# Per server name and member i, keyed "name/i": the plain client port (every server has one),
# the TLS client port (-tls servers), ZooKeeper's quorum and election ports, Baton's peer and
# admin ports.
declare -A client_port secure_port quorum_port election_port peer_port admin_port
for name in "${names[@]}"; do
  for i in $(seq 1 "$members"); do
    k=$name/$i
    if is_zk "$name"; then
      pick_port "client_port[$k]" "${ZK_PORT:-22181}"
      is_tls "$name" && pick_port "secure_port[$k]" "${ZK_SECURE_PORT:-22281}"
      pick_port "quorum_port[$k]" "${ZK_QUORUM_PORT:-22888}"
      pick_port "election_port[$k]" "${ZK_QUORUM_PORT:-22888}"
    elif is_etcd "$name"; then
      pick_port "client_port[$k]" "${ETCD_PORT:-24379}"
      pick_port "peer_port[$k]" "${ETCD_PEER_PORT:-24479}"
    else
      pick_port "client_port[$k]" "${BATON_PORT:-23181}"
      is_tls "$name" && pick_port "secure_port[$k]" "${BATON_SECURE_PORT:-23281}"
      pick_port "peer_port[$k]" "${BATON_PEER_PORT:-23888}"
      pick_port "admin_port[$k]" "${BATON_ADMIN_PORT:-23080}"
    fi
  done
done
bin=${BENCH_BIN_DIR:-$root/target/release}
bench=$bin/baton-bench
results=$work/results.jsonl

# The sidecar rows run baton-sidecar against ZooKeeper too; baton-ensemble also makes the
# certificates.
packages=(-p baton-bench -p baton-sidecar)
if want baton || [ "$tls" = on ] || [ "$tls" = both ]; then packages+=(-p baton-ensemble); fi
if [[ " ${names[*]} " == *" etcd "* ]]; then
  # baton-bench's etcd client is an optional feature: its build needs protoc and the protobuf
  # well-known types, which the default workspace build does not.
  packages+=(--features baton-bench/etcd)
  missing=()
  needed=(etcd-server)
  [ "$build" = 0 ] || needed+=(protobuf-compiler libprotobuf-dev)
  for package in "${needed[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi
if [ "$build" = 1 ]; then
  echo "building ${packages[*]} (release)..." >&2
  (cd "$root" && cargo build --release --quiet "${packages[@]}")
fi

# Only what this script creates is removed, whatever $BENCH_DIR points at.
rm -rf "$work/zk" "$work/zk-tls" "$work/baton" "$work/baton-tls" "$work/etcd" "$work/run" "$work/certs"
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

# Writes $work/run/start-$1-$2.sh, which runs member $2 of $1 (a server name) in the foreground:
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
  local what=$1 pid=$2 log=$3; shift 3
  for _ in $(seq 1 120); do
    if "$@"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "bench.sh: $what exited during start-up; last lines of $log:" >&2
      tail -20 "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "bench.sh: $what not ready after 60 s; last lines of $log:" >&2
  tail -20 "$log" >&2
  exit 1
}

# True when process $2 (or a thread of it) is the one listening on port $1.
listens() { ss -Hltnp "sport = :$1" 2>/dev/null | grep -q "pid=$2,"; }

declare -A member_pid
# Member $2 of ZooKeeper server $1 serves clients: standalone, or in a quorum that has a leader
# (and, for zk-tls, listens on its TLS port too).
zk_ready() {
  local k=$1/$2
  [[ "$(four_letter 127.0.0.1 "${client_port[$k]}" srvr)" == *"Mode: "* ]] &&
    listens "${client_port[$k]}" "${member_pid[$k]}" &&
    { ! is_tls "$1" || listens "${secure_port[$k]}" "${member_pid[$k]}"; }
}
# Member $2 of Baton server $1 knows a leader and has applied what it knows committed.
baton_ready() {
  local k=$1/$2
  [ "$(four_letter 127.0.0.1 "${client_port[$k]}" ruok)" = imok ] &&
    listens "${client_port[$k]}" "${member_pid[$k]}" &&
    { ! is_tls "$1" || listens "${secure_port[$k]}" "${member_pid[$k]}"; } &&
    if [ "$1" = baton ] && baton_plain_insecure; then
      curl -sf "http://127.0.0.1:${admin_port[$k]}/readyz" >/dev/null
    else
      curl -sf --cacert "$work/certs/ca.crt" "https://127.0.0.1:${admin_port[$k]}/readyz" >/dev/null
    fi
}

# Member $2 of ZooKeeper server $1 in a quorum: its data dir, config and start script, with the
# JVM flags and class path of reference-zookeeper.sh (which runs standalone only; here logging at
# WARN, with Debian's log4j.properties), plus the quorum's server list and this member's myid. zk-tls adds a TLS client port and a TLS quorum
# (both need the Netty connection factory), with the certificates Baton's members use: the same
# CA, a PEM key store (key and certificate in one file) and the CA as PEM trust store. Clients
# are not asked for a certificate, as on Baton's TLS port.
zk_member() {
  local name=$1 i=$2 dir=$work/$1/$2 j
  mkdir -p "$dir"
  echo "$i" >"$dir/myid"
  {
    echo "tickTime=2000"
    echo "initLimit=10"
    echo "syncLimit=5"
    echo "dataDir=$dir"
    echo "clientPort=${client_port[$name/$i]}"
    echo "maxClientCnxns=0"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=*"
    if is_tls "$name"; then
      cat "$work/certs/member-$i.key" "$work/certs/member-$i.crt" >"$dir/keystore.pem"
      echo "secureClientPort=${secure_port[$name/$i]}"
      echo "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
      echo "ssl.keyStore.location=$dir/keystore.pem"
      echo "ssl.keyStore.type=PEM"
      echo "ssl.trustStore.location=$work/certs/ca.crt"
      echo "ssl.trustStore.type=PEM"
      echo "ssl.clientAuth=none"
      if [ "$members" -gt 1 ]; then
        echo "sslQuorum=true"
        echo "ssl.quorum.keyStore.location=$dir/keystore.pem"
        echo "ssl.quorum.keyStore.type=PEM"
        echo "ssl.quorum.trustStore.location=$work/certs/ca.crt"
        echo "ssl.quorum.trustStore.type=PEM"
      fi
    fi
    if [ "$members" -gt 1 ]; then
      for j in $(seq 1 "$members"); do
        echo "server.$j=127.0.0.1:${quorum_port[$name/$j]}:${election_port[$name/$j]}"
      done
    fi
  } >"$dir/zoo.cfg"
  member_script "$name" "$i" "$work/$name-$i.log" \
    java "-Xmx${ZK_HEAP:-512m}" -Dzookeeper.extendedTypesEnabled=true -Dzookeeper.root.logger=WARN,CONSOLE \
    -Dlog4j.configuration=file:/etc/zookeeper/conf/log4j.properties \
    -cp "$("$root/tests/scripts/reference-zookeeper.sh" --classpath)" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
}

# Member $2 of Baton server $1.
baton_member() {
  local name=$1 i=$2 k=$1/$2 dir peers=() j client_host=127.0.0.1 max_connections=10000
  if [ "$members" = 1 ]; then dir=$work/$name; else dir=$work/$name/$i; fi
  # sessions-scale with more than $SESSIONS_PER_ADDRESS sessions reaches the members at
  # 127.0.0.1..127.0.0.K (see --sessions), which a listener on 127.0.0.1 alone would refuse.
  # 0.0.0.0 also exposes the plain client port to the machine's network for the run's length:
  # this bench is meant for a machine of its own, and ZooKeeper's members (clientPort without
  # clientPortAddress) listen the same way.
  if [ "$members" -ge 3 ] && [ "$max_loopback" -gt 1 ] && sessions_scale_wanted; then
    client_host=0.0.0.0
  fi
  if [ "$members" -ge 3 ] && sessions_scale_wanted && [ "$max_sessions" -gt "$max_connections" ]; then
    max_connections=$max_sessions
  fi
  for j in $(seq 1 "$members"); do peers+=("$j=127.0.0.1:${peer_port[$name/$j]}"); done
  local args=(--id "$i" --data-dir "$dir"
    --client-addr "$client_host:${client_port[$k]}" --peer-addr "127.0.0.1:${peer_port[$k]}"
    --admin-addr "127.0.0.1:${admin_port[$k]}" --members "$(IFS=,; echo "${peers[*]}")"
    # Every bench client comes from 127.0.0.1 (watch-fanout opens 100): no per-address cap,
    # as ZooKeeper's maxClientCnxns=0 above.
    --max-client-connections-per-ip 0 --max-client-connections "$max_connections"
    # baton_ready asks `ruok`; only `srvr` is answered by default, as in ZooKeeper.
    --four-letter-words ruok,srvr)
  if [ "$name" = baton ] && baton_plain_insecure; then
    args+=(--insecure-no-tls)
  else
    # Members authenticate each other with certificates, as in production.
    args+=(--tls-ca "$work/certs/ca.crt" --tls-cert "$work/certs/member-$i.crt"
      --tls-key "$work/certs/member-$i.key")
  fi
  is_tls "$name" && args+=(--secure-client-addr "127.0.0.1:${secure_port[$k]}")
  member_script "$name" "$i" "$work/$name-$i.log" "$bin/baton-ensemble" "${args[@]}"
}

# Member $1 of etcd: one of --members on loopback, its data on the same disk as the others'
# (etcd fsyncs its WAL before acknowledging, always).
etcd_member() {
  local i=$1 j cluster=() client peer
  for j in $(seq 1 "$members"); do cluster+=("m$j=http://127.0.0.1:${peer_port[etcd/$j]}"); done
  client=http://127.0.0.1:${client_port[etcd/$i]}
  peer=http://127.0.0.1:${peer_port[etcd/$i]}
  member_script etcd "$i" "$work/etcd-$i.log" etcd --name "m$i" --data-dir "$work/etcd/$i" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$(IFS=,; echo "${cluster[*]}")" --initial-cluster-state new \
    --initial-cluster-token bench --logger zap --log-level warn
}
# Member $2 of etcd has a leader and serves clients.
etcd_ready() {
  local k=$1/$2
  curl -sf "http://127.0.0.1:${client_port[$k]}/health" | grep -q '"health":"true"' &&
    listens "${client_port[$k]}" "${member_pid[$k]}"
}

# One CA for every server: Baton's members and ZooKeeper's (which reads the same PEM files).
if { want baton && [ "$tls" = peer ]; } || [ "$tls" = on ] || [ "$tls" = both ]; then
  "$bin/baton-ensemble" certs --out "$work/certs" --cluster-id bench \
    --ids "$(seq -s, 1 "$members")" 2>/dev/null
fi
# server: what the bench's sessions use (the TLS ports of -tls servers); plain_server: the
# plain client ports (ensemble-failover's srvr).
declare -A server plain_server member_order
# Baton's members first: they bind their ports within milliseconds, before the JVMs' quorum
# connections take ephemeral ports, which on Linux span the ranges picked above.
start_order=()
for name in "${names[@]}"; do is_zk "$name" || start_order+=("$name"); done
for name in "${names[@]}"; do if is_zk "$name"; then start_order+=("$name"); fi; done
for name in "${start_order[@]}"; do
  list=() plain=()
  for i in $(seq 1 "$members"); do
    k=$name/$i
    if is_zk "$name"; then
      if [ "$members" = 1 ] && ! is_tls "$name"; then
        member_script "$name" 1 "$work/$name-1.log" \
          "$root/tests/scripts/reference-zookeeper.sh" "${client_port[$k]}" "$work/$name"
      else
        zk_member "$name" "$i"
      fi
    elif is_etcd "$name"; then
      etcd_member "$i"
    else
      baton_member "$name" "$i"
    fi
    # Every way ends in exec of the server, so $! is the process whose memory we measure.
    "$work/run/start-$name-$i.sh" &
    member_pid[$k]=$!; pids+=("$!")
    plain+=("127.0.0.1:${client_port[$k]}")
    if is_tls "$name"; then list+=("127.0.0.1:${secure_port[$k]}"); else list+=("127.0.0.1:${client_port[$k]}"); fi
  done
  server[$name]=$(IFS=,; echo "${list[*]}")
  member_order[$name]=${server[$name]}
  plain_server[$name]=$(IFS=,; echo "${plain[*]}")
done
for i in $(seq 1 "$members"); do
  for name in "${names[@]}"; do
    if is_zk "$name"; then check=zk_ready; elif is_etcd "$name"; then check=etcd_ready; else check=baton_ready; fi
    wait_ready "$name member $i" "${member_pid[$name/$i]}" "$work/$name-$i.log" "$check" "$name" "$i"
  done
done

# Resident memory of every member of server $1, summed, in KiB.
rss_kib() {
  local total=0 pid kib i
  for i in $(seq 1 "$members"); do
    pid=${member_pid[$1/$i]}
    [ -r "/proc/$pid/status" ] || { echo "bench.sh: $1 process $pid is gone" >&2; exit 1; }
    kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
    total=$((total + kib))
  done
  echo "$total"
}
declare -A rss_idle rss_full
for name in "${names[@]}"; do rss_idle[$name]=$(rss_kib "$name"); done

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start; $members member(s) each; servers: ${names[*]}" >&2

# The disk's own fdatasync latency, the floor under every durable write, with one writer per
# member as the members share this disk. Measured before and after the matrix: on a shared
# machine it moves with everyone else's I/O.
disk_sync() {
  "$bench" --workload fsync --workers "$members" --ops 1000 --fsync-dir "$work" --label "$1" --json >>"$results"
}
disk_sync disk-before
# The other half of the floor: one loopback round trip.
"$bench" --workload loopback-rtt --ops 10000 --label loopback --json >>"$results"

# One cell of the matrix: the same arguments against every server, one after the other, so
# background load on this shared machine hits them alike (in reverse order every other round).
# A literal {name} in an argument becomes the server's name. -tls servers are reached over TLS
# (--tls-ca), except with plain_client=1 (ensemble-failover), which uses their plain ports.
round=1
cell() {
  local order=("${names[@]}") name n tls_args
  if [ $((round % 2)) = 0 ]; then
    order=()
    for ((n = ${#names[@]} - 1; n >= 0; n--)); do order+=("${names[n]}"); done
  fi
  for name in "${order[@]}"; do
    tls_args=()
    if is_etcd "$name"; then
      etcd_counterpart "$@" || continue
      tls_args=(--etcd)
    fi
    if [ "${plain_client:-0}" = 1 ]; then
      servers=${plain_server[$name]}
    else
      servers=${server[$name]}
      is_tls "$name" && tls_args=(--tls-ca "$work/certs/ca.crt")
    fi
    "$bench" --servers "$servers" "${tls_args[@]}" --label "$name" --json "${@//\{name\}/$name}" |
      jq -c --argjson round "$round" '. + {round: $round}' |
      tee -a "$results" |
      jq -r '"  \(.label)\t\(.workload)\tworkers=\(.workers)\tops/s=\(.ops_per_sec)\tp50=\(.p50_us)us"' >&2
  done
}
# Whether the cell's --workload (in the arguments) has an etcd counterpart in baton-bench --etcd.
etcd_counterpart() {
  local previous='' arg
  for arg in "$@"; do
    if [ "$previous" = --workload ]; then
      case "$arg" in
        create-delete|get-data|get-data-linearizable|mixed-90-10|mixed-50-50) return 0 ;;
        lock-uncontended|lock-contended|election-failover) return 0 ;;
        *) return 1 ;;
      esac
    fi
    previous=$arg
  done
  return 1
}
# A row of the matrix: workload $1 with $2 workers, unless --rows leaves it out.
row() {
  local workload=$1 workers=$2; shift 2
  row_wanted "$workload" "$workers" || return 0
  cell --workload "$workload" --workers "$workers" "$@"
}

# Worker 0 (the whole of the 1-worker rows) must meet the same kind of member on every server:
# a follower, whose writes are forwarded to the leader as most clients' are. Otherwise one
# ensemble's leader may happen to be member 1 and another's a follower, and their one-worker
# rows would time different paths. So each server's list starts at its first follower, checked
# again every round (leadership can move under load).
# ONE_CLIENT_ON=leader times the other path: each list starts at the server's leader.
one_client_on=${ONE_CLIENT_ON:-follower}
case "$one_client_on" in
  follower|leader) ;;
  *) echo "bench.sh: ONE_CLIENT_ON must be follower or leader (got $one_client_on)" >&2; exit 2 ;;
esac
member_is_wanted() {
  local op='!='
  [ "$one_client_on" = follower ] || op='=='
  if is_etcd "$1"; then
    curl -sf -X POST -d '{}' "http://127.0.0.1:${client_port[$1/$2]}/v3/maintenance/status" |
      jq -e ".leader $op .header.member_id" >/dev/null
  else
    [[ "$(four_letter 127.0.0.1 "${client_port[$1/$2]}" srvr)" == *"Mode: $one_client_on"* ]]
  fi
}
follower_first() {
  local name i found list=() rotated=()
  [ "$members" -gt 1 ] || return 0
  for name in "${names[@]}"; do
    found=0
    for i in $(seq 1 "$members"); do
      if member_is_wanted "$name" "$i"; then
        found=1
        break
      fi
    done
    if [ "$found" = 0 ]; then
      echo "  $name: no member says it is a $one_client_on; sessions keep --servers order" >&2
      continue
    fi
    IFS=, read -ra list <<<"${member_order[$name]}"
    rotated=("${list[@]:i-1}" "${list[@]:0:i-1}")
    server[$name]=$(IFS=,; echo "${rotated[*]}")
    echo "  $name: worker 0 on member $i (a $one_client_on)" >&2
  done
}

populated=0
for round in $(seq 1 "$repeat"); do
  [ "$repeat" = 1 ] || echo "round $round of $repeat" >&2
  follower_first
  row create-delete 1 --duration "$cell"
  row create-delete 10 --duration "$cell"
  row create-delete 50 --duration "$cell"
  row get-data 10 --duration "$cell"
  row get-data-linearizable 10 --duration "$cell"
  row mixed-90-10 10 --duration "$cell"
  row mixed-50-50 10 --duration "$cell"
  row lock-uncontended 1 --duration "$cell"
  row lock-contended 10 --duration "$cell"
  row sidecar-lock-uncontended 1 --duration "$cell"
  row sidecar-lock-contended 5 --duration "$cell"
  row election-failover 5 --ops "$election_rounds"
  row sidecar-handover 3 --ops "$handover_rounds"
  row semaphore-uncontended 1 --duration "$cell"
  row semaphore-contended 5 --duration "$cell"
  row app-crash-lock-free-stream 2 --ops "$crash_rounds"
  row app-crash-lock-free-ttl 2 --ops "$ttl_rounds"
  row app-crash-lock-free-zk-session 2 --ops "$zk_crash_rounds"
  row app-crash-new-leader-health 3 --ops "$crash_rounds"
  row app-crash-new-leader-none 3 --ops 1
  row watch-fanout 100 --duration "$cell"
  if [ "$round" = "$repeat" ] && row_wanted populate 32; then
    row populate 32 --ops 100000 --data-size 100
    populated=1
  fi
done
for name in "${names[@]}"; do rss_full[$name]=$(rss_kib "$name"); done
# Last: it replaces members (new pids), which the memory figures above must not see.
if [ "$members" -ge 3 ] && row_wanted ensemble-failover "$members"; then
  echo "ensemble-failover: kill -9 of the leader, $failover_rounds round(s) each (bash reports each kill)" >&2
  plain_client=1 cell --workload ensemble-failover --ops "$failover_rounds" \
    --member-pid-file "$work/run/{name}-{id}.pid" --member-start "$work/run/start-{name}-{id}.sh"
fi
if [ "$members" -ge 3 ] && row_wanted sessions-failover 20; then
  echo "sessions-failover: 20 sessions on the leader, kill -9 of it, $sessions_rounds round(s) each" >&2
  plain_client=1 cell --workload sessions-failover --workers 20 --ops "$sessions_rounds" \
    --member-pid-file "$work/run/{name}-{id}.pid" --member-start "$work/run/start-{name}-{id}.sh"
fi
# Every member of server $1 is running (by its pid file: the failover rows replace members).
members_alive() {
  local i pid
  for i in $(seq 1 "$members"); do
    pid=$(cat "$work/run/$1-$i.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null || return 1
  done
}
# sessions-scale: each count against each server in turn (not through cell: a failure here is a
# result, recorded in $failures, and the server is left out of the larger counts).
failures=$work/sessions-failures.tsv
: >"$failures"
if [ "$members" -ge 3 ] && sessions_scale_wanted; then
  declare -A failed
  for count in ${session_counts//,/ }; do
    spread=$(loopback_addresses "$count")
    echo "sessions-scale: $count sessions over $spread loopback address(es), idle usage, hand-overs, kill -9 of the leader then of a follower" >&2
    for name in "${names[@]}"; do
      is_etcd "$name" && continue
      if [ -n "${failed[$name]:-}" ]; then
        echo "  $name: skipped (failed at ${failed[$name]})" >&2
        continue
      fi
      log=$work/sessions-$name-$count.log
      started=$SECONDS
      status=0
      timeout --kill-after=30 "${SESSIONS_TIMEOUT:-1800}" "$bench" --servers "${plain_server[$name]}" \
        --label "$name" --json --workload sessions-scale --workers "$count" \
        --loopback-addresses "$spread" \
        --member-pid-file "$work/run/$name-{id}.pid" --member-start "$work/run/start-$name-{id}.sh" \
        2>"$log" | jq -c --argjson round "$round" '. + {round: $round}' >"$work/sessions-$name-$count.json" ||
        status=$?
      error=''
      if [ "$status" = 124 ] || [ "$status" = 137 ]; then
        error="no result within ${SESSIONS_TIMEOUT:-1800} s"
      elif [ "$status" != 0 ] || ! [ -s "$work/sessions-$name-$count.json" ]; then
        error=$(grep -m1 '^baton-bench:' "$log" || tail -1 "$log")
        error=${error:-exit status $status}
      fi
      if ! members_alive "$name"; then error="${error:+$error; }a member is not running afterwards"; fi
      if [ -n "$error" ]; then
        failed[$name]=$count
        printf '%s\t%s\t%s\n' "$name" "$count" "$error" >>"$failures"
        echo "  $name: FAILED at $count sessions after $((SECONDS - started)) s: $error (log: $log)" >&2
        continue
      fi
      cat "$work/sessions-$name-$count.json" >>"$results"
      jq -r '"  \(.label)\tsessions=\(.workers)\tset-up \(.setup_secs)s\tleader kill: all back \(.all_back_ms) ms, \(.sessions_lost) lost\tfollower kill: all back \(.follower_all_back_ms) ms, \(.follower_sessions_lost) lost"' \
        "$work/sessions-$name-$count.json" >&2
      echo "  $name: $((SECONDS - started)) s" >&2
    done
  done
fi

disk_sync disk-after
echo "machine: load $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

# The table: one row per cell (per round, then their mean, with --repeat), each metric for every
# server, and the ratio of every pair.
jq -r '[.workload, .workers, .label, .ops_per_sec, .p50_us, .p99_us, .p999_us, (.round // 1)] | @tsv' "$results" |
  awk -F'\t' -v names="${names[*]}" -v pairs="${pairs[*]}" -v repeat="$repeat" '
    function lat(us) {
      if (us == "") return "-"
      if (us < 1000) return sprintf("%.0fus", us)
      if (us < 1000000) return sprintf("%.2fms", us / 1000)
      return sprintf("%.2fs", us / 1000000)
    }
    function ratio(num, den) { return (num > 0 && den > 0) ? sprintf("%.2f", num / den) : "-" }
    function add(key, name, o, a, b, c) {
      if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
      ops[key, name] = o; p50[key, name] = a; p99[key, name] = b; p999[key, name] = c
      has[key, name] = 1
    }
    # One metric of one row: a column per server, then one ratio per pair; higher is better
    # for ops/s (second/first), lower for latencies (first/second).
    function cells(key, m, timed,    t, p, v, a, b) {
      for (t = 1; t <= n; t++) {
        if (m == 1) v = (timed || !((key, target[t]) in has)) ? "-" : sprintf("%.0f", ops[key, target[t]])
        else if (m == 2) v = lat(p50[key, target[t]])
        else if (m == 3) v = lat(p99[key, target[t]])
        else v = lat(p999[key, target[t]])
        # A timed row with no round recorded: what it waited for never came (app-crash-new-leader-none).
        if (m > 1 && timed && ops[key, target[t]] == 0) v = "never"
        # A server without this row (etcd has no counterpart of most sidecar rows).
        printf " %14s", ((key, target[t]) in has) ? v : "-"
      }
      for (p = 1; p <= npairs; p++) {
        a = first[p]; b = second[p]
        if (m == 1) v = timed ? "-" : ratio(ops[key, b], ops[key, a])
        else if (m == 2) v = ratio(p50[key, a], p50[key, b])
        else if (m == 3) v = ratio(p99[key, a], p99[key, b])
        else v = ratio(p999[key, a], p999[key, b])
        printf " %6s", v
      }
    }
    BEGIN {
      n = split(names, target, " ")
      npairs = split(pairs, pair, " ")
      for (p = 1; p <= npairs; p++) { split(pair[p], ab, ":"); first[p] = ab[1]; second[p] = ab[2] }
    }
    # A single-client row p50 as a multiple of the floor.
    function floors(key, timed,    t, v) {
      for (t = 1; t <= n; t++) {
        v = "-"
        if (floor > 0 && !timed && key ~ / w1( |$)/ && ((key, target[t]) in has))
          v = sprintf("%.2f", p50[key, target[t]] / floor)
        printf " %14s", v
      }
    }
    $3 ~ /^disk-/ {
      disk = disk sprintf("%s: append 1 KiB + fdatasync, %d writer(s) at once, p50 %s, p99 %s, p999 %s (%.0f/s)\n",
                          $3, $2, lat($5), lat($6), lat($7), $4)
      dsum += $5; dn++
      next
    }
    $3 == "loopback" { rtt = $5; rtt99 = $6; next }
    {
      key = $1 " w" $2
      if (repeat > 1) {
        add(key " #" $8, $3, $4, $5, $6, $7)
        if (!(key in mseen)) { mseen[key] = 1; morder[++mrows] = key }
        count[key, $3]++; sops[key, $3] += $4; s50[key, $3] += $5; s99[key, $3] += $6; s999[key, $3] += $7
      } else add(key, $3, $4, $5, $6, $7)
    }
    END {
      for (r = 1; r <= mrows; r++) {
        key = morder[r]
        for (t = 1; t <= n; t++) {
          c = count[key, target[t]]
          if (c > 0) add(key " mean", target[t], sops[key, target[t]] / c, s50[key, target[t]] / c,
                         s99[key, target[t]] / c, s999[key, target[t]] / c)
        }
      }
      if (dn > 0 && rtt != "") floor = dsum / dn + rtt
      printf "%-30s", "workload"
      split("ops/s p50 p99 p999", metric, " ")
      for (m = 1; m <= 4; m++) {
        for (t = 1; t <= n; t++) printf " %14s", metric[m] "(" target[t] ")"
        for (p = 1; p <= npairs; p++) printf " %6s", "x" (npairs > 1 ? p : "")
      }
      for (t = 1; t <= n; t++) printf " %14s", "floor x(" target[t] ")"
      printf "\n"
      for (r = 1; r <= rows; r++) {
        key = order[r]
        printf "%-30s", key
        # Hand-over and failover rows time rounds that include restarts: their rate says
        # nothing, their latencies are the result.
        timed = (key ~ /(failover|handover|sessions-scale|app-crash-.*) w/)
        for (m = 1; m <= 4; m++) cells(key, m, timed)
        floors(key, timed)
        printf "\n"
      }
      for (p = 1; p <= npairs; p++) printf "x%s: %s against %s\n", (npairs > 1 ? p : ""), second[p], first[p]
      printf "%s", disk
      if (floor > 0)
        printf "floor: fdatasync p50 %s (mean of the disk lines) + loopback round trip p50 %s (p99 %s) = %s; floor x: a single-client row'"'"'s p50 / floor\n",
               lat(dsum / dn), lat(rtt), lat(rtt99), lat(floor)
    }'

# What the sessions rows measure besides latencies (their latencies are in the table: per
# session, the kill until it wrote again, or until its client was connected again).
jq -r 'select(.workload == "app-crash-new-leader-none") |
  "app-crash-new-leader-none \(.label): no new leader within 5 s of the leading app'"'"'s crash (without --app-health)"' "$results"
jq -r 'select(.workload == "sessions-failover") |
  "sessions-failover \(.label): \(.sessions_lost) session(s) lost"' "$results"
jq -r 'select(.workload == "sessions-scale") |
  "sessions-scale \(.label), \(.workers) sessions over \(.loopback_addresses) loopback address(es): RSS per member \([.rss_kib[] | "\(. / 1024 | floor) MiB"] | join(", ")) (total \(.rss_total_kib / 1024 | floor) MiB) with \(.connections | map(tostring) | join(", ")) connections; idle CPU per member \(.cpu_idle_pct | map("\(.)%") | join(", ")) (bench process \(.bench_cpu_idle_pct)%); set-up \(.setup_secs)s; ping p50 \(.ping_p50_us)us p99 \(.ping_p99_us)us max \(.ping_max_us)us; ConnectionLoss retried \(.connection_losses)\n  hand-over (delete -> successor'"'"'s watch) p50 \(.handover_p50_us)us p99 \(.handover_p99_us)us max \(.handover_max_us)us; after the kill p50 \(.handover_after_kill_p50_us)us max \(.handover_after_kill_max_us)us\n  leader kill -9: \(.reconnected) session(s) reconnected, all back after \(.all_back_ms) ms, \(.sessions_lost) lost; then connections \(.connections_after_kill | map(tostring) | join(", ")), RSS \([.rss_after_kill_kib[] | if . == null then "-" else "\(. / 1024 | floor) MiB" end] | join(", "))\n  follower kill -9 (connections before: \(.connections_before_follower_kill | map(tostring) | join(", "))): \(.follower_reconnected) session(s) reconnected, p50 \(.follower_reconnect_p50_us)us, all back after \(.follower_all_back_ms) ms, \(.follower_sessions_lost) lost; candidates'"'"' nodes \(.nodes_found)/\(.nodes_expected)"' "$results"
while IFS=$'\t' read -r name count error; do
  echo "sessions-scale $name: first failed at $count sessions: $error"
done <"$failures"
printf '%-30s' "memory (RSS)"
for name in "${names[@]}"; do
  if [ "$populated" = 1 ]; then
    printf ' %s: %d MiB idle, %d MiB with 100k x 100 B znodes;' "$name" \
      $((rss_idle[$name] / 1024)) $((rss_full[$name] / 1024))
  else
    printf ' %s: %d MiB idle, %d MiB at the end;' "$name" \
      $((rss_idle[$name] / 1024)) $((rss_full[$name] / 1024))
  fi
done
if [ "${#names[@]}" = 2 ] && [ "${#pairs[@]}" = 1 ]; then
  awk -v a="${rss_full[${names[0]}]}" -v b="${rss_full[${names[1]}]}" \
    'BEGIN { printf " x %.2f", (b > 0 ? a / b : 0) }'
fi
printf '\n'
echo "(x: >1 means the second of its pair wins. Raw results: $results)"
