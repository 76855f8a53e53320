#!/usr/bin/env bash
# Issue 24's flood: under `ulimit -n 4096`, 100,000 orders that each name a
# new reply topic, a caller waiting behind them (sagactl submit --wait) and
# one after them. Reports throughput, the most file descriptors held,
# /readyz, the broker's topic metrics and whether both callers were
# answered. Needs kcat, curl and python3; run from anywhere, as a user whose
# hard fd limit allows 4096. Not part of the test suite (minutes long).
#   integration/flood/distinct-replyto.sh [ORDERS]
set -u
orders=${1:-100000}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/saga-flood-XXXX)
trap 'kill $spid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cd "$root"
go build -o "$work/sagad" ./cmd/sagad && go build -o "$work/sagactl" ./cmd/sagactl || exit 1
( ulimit -n 4096; exec "$work/sagad" --data "$work/data" --http-listen 127.0.0.1:18080 --kafka-listen 127.0.0.1:19092 \
    --eventstore-listen 127.0.0.1:12113 >"$work/sagad.log" 2>&1 ) &
spid=$!
for _ in $(seq 100); do curl -fs http://127.0.0.1:18080/readyz >/dev/null && break; sleep 0.5; done
echo "sagad fd limit: $(grep 'open files' /proc/$spid/limits | awk '{print $4}')"
python3 - "$orders" >"$work/orders.txt" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f'r-{i}\t{{"orderId":"r-{i}","items":[{{"sku":"book","qty":1}}],"replyTo":"reply.r{i}"}}')
PY
ctl() { "$work/sagactl" submit --api http://127.0.0.1:18080 --kafka-brokers 127.0.0.1:19092 --eventstore 'esdb://127.0.0.1:12113?tls=false' "$@"; }
t0=$(date +%s)
kcat -P -b 127.0.0.1:19092 -t orders -K $'\t' -z none <"$work/orders.txt"
( s=$(date +%s); ctl --wait --timeout 900s good-behind '{"items":[{"sku":"book","qty":1}]}' >"$work/behind.out" 2>&1
  echo "caller behind the flood: exit $? after $(( $(date +%s) - s )) s" ) &
behind=$!
maxfd=0
for _ in $(seq 1200); do
  n=$(ls /proc/$spid/fd 2>/dev/null | wc -l); [ "$n" -gt "$maxfd" ] && maxfd=$n
  done_n=$(curl -fs http://127.0.0.1:18080/metrics | awk '/^saga_tasks\{state="Processed"\}/{print $2}')
  [ "${done_n:-0}" -ge "$orders" ] && break; sleep 1
done
echo "processed ${done_n:-0} of $orders (+1) after $(( $(date +%s) - t0 )) s; most fds held $maxfd"
wait $behind
curl -s http://127.0.0.1:18080/readyz | python3 -c 'import json,sys; print("readyz:", json.load(sys.stdin)["status"])'
curl -s http://127.0.0.1:18080/metrics | grep -E '^saga_kafka_(topics|reply_topics_evicted_total|topic_creations_refused_total)'
s=$(date +%s); ctl --wait --timeout 60s good-after '{"items":[{"sku":"book","qty":1}]}' >"$work/after.out" 2>&1
echo "caller after the flood: exit $? after $(( $(date +%s) - s )) s"
echo "'too many open files' in the log: $(grep -c 'too many open files' "$work/sagad.log")"
