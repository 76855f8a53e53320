#!/usr/bin/env bash
# throughput.sh MODE [IN_FLIGHT] [DURATION]: the throughput of the split
# topology against one sagad with every role, both driven from outside by
# sagabench through Kafka (issue 28, item 4), with each process's CPU.
#
#   MODE=split  seven processes: a standalone event store, a broker-only
#               sagad, two scheduler+supervisor processes, an agents process
#               (with the demo services), a submitter+status process and an
#               api process
#   MODE=split6 six processes: as split, with submitter, status and api in
#               one process
#   MODE=paired six processes: the event store, the broker, two
#               scheduler+supervisor+agents processes with
#               --prefer-local-agents (commands handed to the agents of the
#               same process, as in one sagad), a submitter process and a
#               status+api process (one subscription for both)
#   MODE=all    one sagad, every role
#
# Example: integration/cluster/throughput.sh split 64 60s
# Nothing else should run on the machine meanwhile. SAGA_BIN=DIR uses the
# sagad and sagabench already built in DIR (build them before taking the
# machine); SAGA_PROFILE=1 also saves each process's CPU profile of every
# window and its heap at the window's end (NODE.wN.pprof, NODE.wN.heap,
# from --debug-listen) and prints the first and last windows' top functions.
# The data directories are removed when the script exits (SAGA_KEEP_DATA=1
# keeps them); the logs and results stay in the directory it names.
# SAGA_WINDOW=1m reports a long run window by window (sustained runs: the
# steady line compares the first and last full windows), with each
# process's CPU ms per order window by window; the machine line is
# sagabench's one-thread calibration before and after the run, to tell a
# slower host from a slower saga.
set -euo pipefail
mode=${1:?split, split6, paired or all}; conc=${2:-64}; dur=${3:-60s}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/saga-throughput.XXXXXX)
if [ -n "${SAGA_BIN:-}" ]; then
  cp "$SAGA_BIN/sagad" "$SAGA_BIN/sagabench" "$work/"
else
  go build -o "$work/sagad" "$root/cmd/sagad"
  go build -o "$work/sagabench" "$root/cmd/sagabench"
fi
pids=(); names=(); debug=()
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() {
  local name=$1; shift
  if [ -n "${SAGA_PROFILE:-}" ]; then
    local d=127.0.0.1:$(port); debug+=("$name=$d")
    set -- "$@" --debug-listen "$d"
  fi
  "$work/sagad" "$@" >"$work/$name.log" 2>&1 & pids+=($!); names+=("$name")
}
# On exit the processes stop and their data directories and binaries go:
# a run of minutes leaves gigabytes of event store and broker data, and runs
# left behind once filled the disk. The logs, results and profiles stay in
# $work; SAGA_KEEP_DATA=1 keeps the data too.
stop() {
  kill ${sampler:-} "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true
  [ -n "${SAGA_KEEP_DATA:-}" ] && return
  find "$work" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + 2>/dev/null || true
  rm -f "$work/sagad" "$work/sagabench"
}
trap stop EXIT
store=127.0.0.1:$(port); kafka=127.0.0.1:$(port)
ready=()
# The demo services keep each idempotency key in sagad's heap; orders here
# finish within seconds, so keys are kept 5 s, as sagabench's embedded run
# does: the figures are the engine's, not the fake services' growing memory.
demo=(--demo-key-retention 5s)
if [ "$mode" != all ]; then
  start store eventstore --listen "$store" --data "$work/es"
  h=127.0.0.1:$(port); ready+=("$h")
  start broker --roles broker --kafka-listen "$kafka" --data "$work/kafka" --http-listen "$h"
  for i in $(seq 100); do curl -sf -o /dev/null "http://$h/readyz" && break; sleep 0.2; done
  c=(--kafka-brokers "$kafka" --eventstore "esdb://$store?tls=false")
  case $mode in
  split) nodes=("s1 scheduler,supervisor" "s2 scheduler,supervisor" "agents agents" "submitter submitter,status" "api api") ;;
  split6) nodes=("s1 scheduler,supervisor" "s2 scheduler,supervisor" "agents agents" "front submitter,status,api") ;;
  paired) nodes=("s1 scheduler,supervisor,agents" "s2 scheduler,supervisor,agents" "submitter submitter" "front status,api") ;;
  *) echo "unknown mode $mode: split, split6, paired or all" >&2; exit 2 ;;
  esac
  for node in "${nodes[@]}"; do
    set -- $node; h=127.0.0.1:$(port); ready+=("$h")
    extra=(); case $2 in *scheduler*agents*) extra=(--prefer-local-agents) ;; esac
    start "$1" --roles "$2" "${c[@]}" --data "$work/$1" --instance "$1" --http-listen "$h" "${demo[@]}" "${extra[@]}"
  done
else
  h=127.0.0.1:$(port); ready+=("$h")
  start all --data "$work/all" --kafka-listen "$kafka" --eventstore-listen "$store" --http-listen "$h" "${demo[@]}"
fi
for h in "${ready[@]}"; do
  for i in $(seq 240); do curl -sf -o /dev/null "http://$h/readyz" && break; sleep 0.5; done
done
cpu() { for i in "${!pids[@]}"; do awk -v n="${names[$i]}" '{print n, $14+$15}' "/proc/${pids[$i]}/stat"; done | sort; }
secs() { case $1 in *m) echo $((${1%m} * 60)) ;; *s) echo "${1%s}" ;; *) echo "$1" ;; esac; }
win=${SAGA_WINDOW:-$dur}; wsecs=$(secs "$win"); nwin=$(($(secs "$dur") / wsecs))
# Every window: each process's CPU (and with SAGA_PROFILE, a CPU profile of
# the window and a heap profile at its end), to tell a cost per order that
# grows over the run from a machine that slows down (sagabench's one-thread
# calibration before and after the run tells the latter).
sample() {
  for n in $(seq "$nwin"); do
    if [ -n "${SAGA_PROFILE:-}" ]; then
      for nd in "${debug[@]}"; do
        curl -sf -o "$work/${nd%%=*}.w$n.pprof" "http://${nd#*=}/debug/pprof/profile?seconds=$((wsecs > 10 ? wsecs - 5 : wsecs))" &
      done
    fi
    sleep "$wsecs"; cpu >"$work/cpu.w$n"
    if [ -n "${SAGA_PROFILE:-}" ]; then
      for nd in "${debug[@]}"; do curl -sf -o "$work/${nd%%=*}.w$n.heap" "http://${nd#*=}/debug/pprof/heap" & done
    fi
  done
  wait
}
cpu >"$work/cpu0"; cp "$work/cpu0" "$work/cpu.w0"
sample & sampler=$!
"$work/sagabench" --kafka-brokers "$kafka" --concurrency "$conc" --duration "$dur" --window "$win" --json "$work/bench.json" >"$work/bench.log" 2>&1
cpu >"$work/cpu1"
wait "$sampler" || true
jq -r '"\(.ordersPerSecond|floor) orders/s, p50 \(.latencyMillis.p50) ms, p99 \(.latencyMillis.p99) ms, \(.orders) orders"' "$work/bench.json"
grep -E "^  (window|steady|last/first|machine)" "$work/bench.log" || true
orders=$(jq .orders "$work/bench.json"); hz=$(getconf CLK_TCK)
join "$work/cpu0" "$work/cpu1" | awk -v o="$orders" -v hz="$hz" '{d=($3-$2)/hz; t+=d; printf "  %-10s %6.1f s CPU  %.3f ms/order\n", $1, d, d*1000/o} END {printf "  %-10s %6.1f s CPU  %.3f ms/order\n", "total", t, t*1000/o}'
if [ "$nwin" -gt 1 ]; then
  # CPU ms per order of each process, window by window (sagabench's windows
  # start after its calibration, about a second later than these).
  echo "  CPU ms/order by window:"
  for n in $(seq "$nwin"); do
    [ -f "$work/cpu.w$n" ] || continue
    o=$(jq ".windows[$((n - 1))].orders // 0" "$work/bench.json")
    join "$work/cpu.w$((n - 1))" "$work/cpu.w$n" | awk -v o="$o" -v hz="$hz" -v n="$n" '{d=($3-$2)/hz; t+=d; s=s sprintf(" %s %.3f", $1, o ? d*1000/o : 0)} END {printf "    w%d %6d orders:%s  total %.3f\n", n, o, s, o ? t*1000/o : 0}'
  done
fi
if [ -n "${SAGA_PROFILE:-}" ]; then
  for nd in "${debug[@]}"; do
    for n in $(printf "%s\n" 1 "$nwin" | sort -u); do
      echo "== ${nd%%=*} window $n"; go tool pprof -top -nodecount=25 "$work/sagad" "$work/${nd%%=*}.w$n.pprof" 2>/dev/null | sed -n '4,30p'
      echo "== ${nd%%=*} heap at the end of window $n (in use)"; go tool pprof -top -sample_index=inuse_space -nodecount=12 "$work/sagad" "$work/${nd%%=*}.w$n.heap" 2>/dev/null | sed -n '4,18p'
    done
  done >"$work/profiles.txt"
fi
[ -n "${SAGA_PROFILE:-}" ] && echo "profiles in $work/profiles.txt"
echo "logs and results in $work"
