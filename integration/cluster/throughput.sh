#!/usr/bin/env bash
# throughput.sh MODE [IN_FLIGHT] [DURATION]: the throughput of the split
# topology against one sagad with every role, both driven from outside by
# sagabench through Kafka (issue 28, item 4), with each process's CPU.
#
#   MODE=split  a standalone event store, a broker-only sagad, two
#               scheduler+supervisor processes, an agents process (with the
#               demo services), a submitter+status process and an api process
#   MODE=all    one sagad, every role
#
# Example: integration/cluster/throughput.sh split 64 60s
# Nothing else should run on the machine meanwhile.
set -euo pipefail
mode=${1:?split or all}; conc=${2:-64}; dur=${3:-60s}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/saga-throughput.XXXXXX)
go build -o "$work/sagad" "$root/cmd/sagad"
go build -o "$work/sagabench" "$root/cmd/sagabench"
pids=(); names=()
start() { local name=$1; shift; "$work/sagad" "$@" >"$work/$name.log" 2>&1 & pids+=($!); names+=("$name"); }
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
store=127.0.0.1:$(port); kafka=127.0.0.1:$(port)
ready=()
if [ "$mode" = split ]; then
  start store eventstore --listen "$store" --data "$work/es"
  h=127.0.0.1:$(port); ready+=("$h")
  start broker --roles broker --kafka-listen "$kafka" --data "$work/kafka" --http-listen "$h"
  for i in $(seq 100); do curl -sf -o /dev/null "http://$h/readyz" && break; sleep 0.2; done
  c=(--kafka-brokers "$kafka" --eventstore "esdb://$store?tls=false")
  for node in "s1 scheduler,supervisor" "s2 scheduler,supervisor" "agents agents" "submitter submitter,status" "api api"; do
    set -- $node; h=127.0.0.1:$(port); ready+=("$h")
    start "$1" --roles "$2" "${c[@]}" --data "$work/$1" --instance "$1" --http-listen "$h"
  done
else
  h=127.0.0.1:$(port); ready+=("$h")
  start all --data "$work/all" --kafka-listen "$kafka" --eventstore-listen "$store" --http-listen "$h"
fi
for h in "${ready[@]}"; do
  for i in $(seq 240); do curl -sf -o /dev/null "http://$h/readyz" && break; sleep 0.5; done
done
cpu() { for i in "${!pids[@]}"; do awk -v n="${names[$i]}" '{print n, $14+$15}' "/proc/${pids[$i]}/stat"; done | sort; }
cpu >"$work/cpu0"
"$work/sagabench" --kafka-brokers "$kafka" --concurrency "$conc" --duration "$dur" --window "$dur" --json "$work/bench.json" >"$work/bench.log" 2>&1
cpu >"$work/cpu1"
jq -r '"\(.ordersPerSecond|floor) orders/s, p50 \(.latencyMillis.p50) ms, p99 \(.latencyMillis.p99) ms, \(.orders) orders"' "$work/bench.json"
orders=$(jq .orders "$work/bench.json"); hz=$(getconf CLK_TCK)
join "$work/cpu0" "$work/cpu1" | awk -v o="$orders" -v hz="$hz" '{d=($3-$2)/hz; t+=d; printf "  %-10s %6.1f s CPU  %.3f ms/order\n", $1, d, d*1000/o} END {printf "  %-10s %6.1f s CPU  %.3f ms/order\n", "total", t, t*1000/o}'
echo "logs and results in $work"
