#!/usr/bin/env bash
# Runs Apache ZooKeeper 3.8 (Debian's `zookeeper` package) standalone in the foreground, as the
# reference for behaviour and benchmarks: reference-zookeeper.sh PORT DATA_DIR
# TTL nodes and all four-letter words are enabled so every feature can be compared; a test that
# needs ZooKeeper's default allow-list sets ZK_4LW_WHITELIST (e.g. to `srvr`).
set -euo pipefail
port=${1:?usage: reference-zookeeper.sh PORT DATA_DIR}
dir=${2:?usage: reference-zookeeper.sh PORT DATA_DIR}
mkdir -p "$dir"
cat >"$dir/zoo.cfg" <<CFG
tickTime=2000
dataDir=$dir
clientPort=$port
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=${ZK_4LW_WHITELIST:-*}
CFG
exec java -Xmx512m -Dzookeeper.extendedTypesEnabled=true -Dzookeeper.root.logger=WARN,CONSOLE \
  -Dlog4j.configuration=file:/etc/zookeeper/conf/log4j.properties \
  -cp "/usr/share/java/*:/etc/zookeeper/conf" \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
