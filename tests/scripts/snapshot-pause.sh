#!/usr/bin/env bash
# The snapshot row: does a snapshot of a large tree pause the core?
#
# Starts a Baton ensemble (1 or 3 members, fsync on, loopback), fills one directory with
# --znodes nodes through the bench's `populate` workload while the members snapshot every
# --snapshot-entries entries, then writes that many entries again so that one more snapshot
# covers the whole tree, waits until every member has it on disk, and prints per member:
# RSS, znodes, snapshots taken, the last snapshot's size and time (copy to durable file, off
# the core), and the longest core pause (`baton_core_step_max_seconds`: the longest batch
# the core thread handled) with how many batches took over 12.8 ms. Then, from the members'
# logs, when each batch of 10 ms or more happened: while a snapshot was being written (from the
# copy until 300 ms after it was durable, which covers the compaction and the deletion of the
# snapshot it replaced) or not, and how many of them waited 10 ms or more on an fsync.
#
#   tests/scripts/snapshot-pause.sh [--znodes 1000000] [--members 1|3]
#       [--snapshot-entries 100000] [--data-size 16] [--workers 32] [--keep]
#
# Uses target/release/{baton-ensemble,baton-bench}, building them if missing. Ports from
# $BATON_SNAP_PORT (47000): client +i, peer +10+i, admin +20+i.
set -euo pipefail

znodes=1000000 members=1 every=100000 data_size=16 workers=32 keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --znodes) znodes=$2; shift 2 ;;
    --members) members=$2; shift 2 ;;
    --snapshot-entries) every=$2; shift 2 ;;
    --data-size) data_size=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$repo/target/release
if [ ! -x "$bin/baton-ensemble" ] || [ ! -x "$bin/baton-bench" ]; then
  (cd "$repo" && cargo build --release -p baton-ensemble -p baton-bench)
fi
work=$(mktemp -d /tmp/snapshot-pause.XXXXXX)
base=${BATON_SNAP_PORT:-47000}
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

peers=() servers=()
for i in $(seq 1 "$members"); do
  peers+=("$i=127.0.0.1:$((base + 10 + i))")
  servers+=("127.0.0.1:$((base + i))")
done
for i in $(seq 1 "$members"); do
  BATON_LOG="${BATON_LOG:-info},baton_ensemble::core_batch=debug" \
  "$bin/baton-ensemble" --id "$i" --data-dir "$work/m$i" --insecure-no-tls \
    --client-addr "127.0.0.1:$((base + i))" --peer-addr "127.0.0.1:$((base + 10 + i))" \
    --admin-addr "127.0.0.1:$((base + 20 + i))" --members "$(IFS=,; echo "${peers[*]}")" \
    --max-client-connections-per-ip 0 --snapshot-entries "$every" \
    >"$work/m$i.log" 2>&1 &
  pids+=("$!")
done

admin() { echo "http://127.0.0.1:$((base + 20 + $1))"; }
# The value of the series named $2 (labels included, as printed) on member $1.
metric() { curl -sf "$(admin "$1")/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
newest_snapshot() {
  find "$work/m$1" -maxdepth 1 -name 'snap-*.snap' -printf '%f\n' |
    sed 's/^snap-[0-9]*-0*\([0-9]*\)\.snap$/\1/' | sort -n | tail -1
}

for i in $(seq 1 "$members"); do
  for _ in $(seq 1 300); do
    curl -sf "$(admin "$i")/readyz" >/dev/null && break
    sleep 0.1
  done
done

echo "populating $znodes znodes on $members member(s), a snapshot every $every entries"
"$bin/baton-bench" --servers "$(IFS=,; echo "${servers[*]}")" --workload populate \
  --ops "$znodes" --workers "$workers" --data-size "$data_size" --label baton
target=$(metric 1 baton_raft_applied_index)
# Enough entries after the last create for one more snapshot, which then holds every node.
"$bin/baton-bench" --servers "$(IFS=,; echo "${servers[*]}")" --workload populate \
  --ops "$((every + 1000))" --workers "$workers" --data-size "$data_size" --label extra \
  >/dev/null
for i in $(seq 1 "$members"); do
  for _ in $(seq 1 1200); do
    [ "$(newest_snapshot "$i")" -ge "$target" ] 2>/dev/null && break
    sleep 0.5
  done
done
sleep 1 # the core counts a finished snapshot at its next batch; ticks come every 100 ms
for i in $(seq 1 "$members"); do curl -sf "$(admin "$i")/metrics" >"$work/m$i.metrics"; done

printf '%-7s %9s %9s %9s %10s %12s %13s %16s %15s\n' member rss_mib znodes snapshots \
  snap_mib last_snap_ms max_pause_ms max_less_fsync_ms steps_over_13ms
for i in $(seq 1 "$members"); do
  rss=$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/${pids[$((i - 1))]}/status")
  last_ms=$(grep 'snapshot taken; log compacted' "$work/m$i.log" | tail -1 |
    sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p')
  steps=$(metric "$i" baton_core_step_seconds_count)
  fast=$(metric "$i" 'baton_core_step_seconds_bucket{le="0.0128"}')
  printf '%-7s %9s %9s %9s %10.1f %12s %13.2f %16.2f %15s\n' "$i" "$rss" \
    "$(metric "$i" baton_znodes)" "$(metric "$i" baton_snapshots_total)" \
    "$(awk -v b="$(metric "$i" baton_snapshot_bytes)" 'BEGIN { print b / 1048576 }')" \
    "${last_ms:-?}" \
    "$(awk -v s="$(metric "$i" baton_core_step_max_seconds)" 'BEGIN { print s * 1000 }')" \
    "$(awk -v s="$(metric "$i" baton_core_work_max_seconds)" 'BEGIN { print s * 1000 }')" \
    "$(awk -v a="$steps" -v b="$fast" 'BEGIN { print a - b }')"
done

echo
echo "batches of 10 ms or more, by what the member was doing (from the logs):"
for i in $(seq 1 "$members"); do
  python3 - "$i" "$work/m$i.log" <<'PY'
import datetime, re, sys

member, log = sys.argv[1], sys.argv[2]
def at(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
snapshots, batches, first, last = [], [], None, None
for line in open(log, errors="replace"):
    m = re.match(r"(\S+Z) ", line)
    if not m:
        continue
    t = at(m.group(1))
    first, last = first or t, t
    m = re.search(r"snapshot taken; log compacted .*elapsed_ms=(\d+)", line)
    if m:
        snapshots.append((t - int(m.group(1)) / 1000, t + 0.3))
    m = re.search(r"a long core batch took_us=(\d+) fsync_us=(\d+)", line)
    if m:
        batches.append((t, int(m.group(1)) / 1000, int(m.group(2)) / 1000))
during = lambda t: any(a <= t <= b for a, b in snapshots)
busy = sum(b - a for a, b in snapshots)
for name, chosen, secs in (
    ("while a snapshot was written", [b for b in batches if during(b[0])], busy),
    ("otherwise", [b for b in batches if not during(b[0])], (last or 0) - (first or 0) - busy),
):
    print(f"member {member} {name} ({secs:.1f} s): {len(chosen)} batches, "
          f"{sum(1 for b in chosen if b[2] >= 10)} with an fsync of 10 ms or more, "
          f"longest {max((b[1] for b in chosen), default=0):.1f} ms")
PY
done
