#!/usr/bin/env bash
# A saga agent written in shell, to show that any Kafka client can be one.
# It consumes the agent's command topic in a consumer group with kcat, does
# the work (here: nothing), and replies with kcat, keyed by task id. It stays
# silent once a command's completeBy has passed, as the protocol asks.
#
#   kcat-agent.sh BROKERS AGENT
set -euo pipefail
brokers=$1
agent=$2

kcat -C -b "$brokers" -G "saga-agent-$agent" -X auto.offset.reset=earliest -u -q -f '%s\n' "saga.cmd.$agent" |
while IFS= read -r command; do
  # completeBy is RFC 3339 with nanoseconds; jq's date functions want whole seconds.
  if ! jq -e '(.completeBy | sub("\\.[0-9]+"; "") | fromdateiso8601) > now' >/dev/null <<<"$command"; then
    echo "kcat-agent: $(jq -r '.taskId + "/" + .step' <<<"$command") is past its completeBy; staying silent" >&2
    continue
  fi
  task=$(jq -r .taskId <<<"$command")
  reply=$(jq -c --arg agent "$agent" '{taskId, step, action, attempt, outcome: "succeeded", agent: $agent}' <<<"$command")
  printf '%s\t%s\n' "$task" "$reply" | kcat -P -b "$brokers" -t saga.replies -K $'\t'
done
