#!/usr/bin/env bash
# Runs Apache ZooKeeper 3.8 (Debian's `zookeeper` package) standalone in the foreground, as the
# reference for behaviour and benchmarks: reference-zookeeper.sh PORT DATA_DIR
# TTL nodes and all four-letter words are enabled so every feature can be compared; a test that
# needs ZooKeeper's default allow-list sets ZK_4LW_WHITELIST (e.g. to `srvr`). It logs to stdout
# at ZK_LOG_LEVEL (INFO unless set) with log4j 1.2, configured by DATA_DIR/log4j.properties.
#
# A member of a quorum instead: ZK_MYID=N and ZK_QUORUM="1=HOST,2=HOST,..." (quorum port 2888,
# election port 3888 on each host), the client port bound to ZK_CLIENT_ADDR if set, and
# ZK_TICK_MS (2000 unless set) as tickTime, with initLimit 10 and syncLimit 2 ticks (the fault
# tests, tests/e2e/tests/faults.rs, run ZooKeeper quorums so, each member in a network namespace).
#
# reference-zookeeper.sh --classpath prints the class path it runs with (bench.sh uses it too).
# The class path is explicit, never /usr/share/java/*: what else a machine has installed there
# (slf4j-nop, slf4j-simple, maven's SLF4J provider, log4j-over-slf4j...) must not decide which
# SLF4J binding ZooKeeper gets, or a start-up error is swallowed by the no-op one. It is
# ZooKeeper's jars (zookeeper.jar's manifest names most of its runtime dependencies, and the JVM
# adds those), the Netty jars the manifest leaves out but the Netty connection factory (TLS,
# bench.sh's zk-tls) needs, and exactly one SLF4J binding: slf4j-log4j12 with log4j 1.2, the
# logging Debian's zookeeper package depends on (liblog4j1.2-java) and ships a log4j.properties
# for. tests/e2e/tests/reference_zookeeper.rs checks the class path the JVM ends up with.
set -euo pipefail

classpath() {
  local jar resolved entries=()
  for jar in zookeeper zookeeper-jute netty-codec netty-resolver netty-transport-native-unix-common \
    slf4j-api slf4j-log4j12 log4j-1.2; do
    if ! resolved=$(readlink -e "/usr/share/java/$jar.jar"); then
      echo "reference-zookeeper.sh: /usr/share/java/$jar.jar is missing" \
        "(apt-get install zookeeper libslf4j-java liblog4j1.2-java)" >&2
      return 1
    fi
    entries+=("$resolved")
  done
  (IFS=:; echo "${entries[*]}")
}

if [ "${1:-}" = --classpath ]; then
  classpath
  exit
fi

port=${1:?usage: reference-zookeeper.sh PORT DATA_DIR}
dir=${2:?usage: reference-zookeeper.sh PORT DATA_DIR}
cp=$(classpath)
mkdir -p "$dir"
cat >"$dir/zoo.cfg" <<CFG
tickTime=${ZK_TICK_MS:-2000}
dataDir=$dir
clientPort=$port
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=${ZK_4LW_WHITELIST:-*}
CFG
if [ -n "${ZK_CLIENT_ADDR:-}" ]; then
  echo "clientPortAddress=$ZK_CLIENT_ADDR" >>"$dir/zoo.cfg"
fi
if [ -n "${ZK_QUORUM:-}" ]; then
  echo "${ZK_MYID:?ZK_QUORUM needs ZK_MYID}" >"$dir/myid"
  {
    echo "initLimit=10"
    echo "syncLimit=2"
    IFS=, read -ra quorum_members <<<"$ZK_QUORUM"
    for member in "${quorum_members[@]}"; do
      echo "server.${member%%=*}=${member#*=}:2888:3888"
    done
  } >>"$dir/zoo.cfg"
fi
cat >"$dir/log4j.properties" <<CFG
log4j.rootLogger=${ZK_LOG_LEVEL:-INFO}, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Target=System.out
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
CFG
exec java -Xmx512m -Dzookeeper.extendedTypesEnabled=true \
  -Dlog4j.configuration="file:$dir/log4j.properties" \
  -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
