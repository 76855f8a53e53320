#!/usr/bin/env bash
# official-client-suite.sh runs an official EventStoreDB Go client's own test
# suite against the embedded server (sagad eventstore), as far as it needs no
# Docker container, no cluster and no pre-populated database (the tests that
# need one skip).
#
#   adapters/esdbserver/testdata/official-client-suite.sh [RUN-PATTERN] [MODULE@VERSION]
#
# RUN-PATTERN is go test's -run (default TestPersistentSubscriptions);
# MODULE@VERSION defaults to the EventStore-Client-Go/v4 version in saga's
# go.mod, e.g. github.com/kurrent-io/KurrentDB-Client-Go@v1.4.2 for the
# newer client (fetched into the module cache, not added to go.mod). The
# suite's tests start containers unless told an address: the script patches
# a copy of the suite so that createDatabase returns a client of the embedded
# server. It prints the suite's verbose output to $OUT (default
# ./official-suite.log) and a summary of its subtests.
set -euo pipefail
pattern=${1:-TestPersistentSubscriptions}
module=${2:-}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d)
out=${OUT:-$PWD/official-suite.log}
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$module" ]; then
	dir=$(cd "$root" && go list -m -f '{{.Dir}}' github.com/EventStore/EventStore-Client-Go/v4)
else
	dir=$(cd "$work" && go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
fi
cp -r "$dir" "$work/client"
chmod -R u+w "$work/client"
pkg=
for d in "$work/client/esdb" "$work/client/kurrentdb"; do
	if [ -d "$d" ]; then pkg=$d; fi
done
# createDatabase: an empty database is the embedded server; a populated one
# is nil, so the tests that need its data set skip.
python3 - "$pkg/containers_test.go" <<'PY'
import sys, re
p = sys.argv[1]
s = open(p).read()
sig = re.search(r'func createDatabase\(t \*testing\.T, populated bool\) \(\*Container, \*(\w+)\.Client\) \{\n', s)
assert sig, "createDatabase not found"
inject = ('\tif ep := os.Getenv("SAGA_SUITE_ENDPOINT"); ep != "" {\n'
          '\t\tif populated {\n\t\t\treturn nil, nil\n\t\t}\n'
          '\t\tc := &Container{Endpoint: ep}\n'
          '\t\treturn c, createTestClient(fmt.Sprintf("%s://%s?tls=false", os.Getenv("SAGA_SUITE_SCHEME"), ep), c, t)\n'
          '\t}\n')
s = s[:sig.end()] + inject + s[sig.end():]
# A container of the embedded server has nothing to stop.
close = re.search(r'func \(container \*Container\) Close\(\) \{\n', s)
assert close, "Container.Close not found"
s = s[:close.end()] + '\tif container.Container == nil {\n\t\treturn\n\t}\n' + s[close.end():]
open(p, 'w').write(s)
PY
scheme=esdb
case "$pkg" in */kurrentdb) scheme=kurrentdb ;; esac

(cd "$root" && go build -o "$work/sagad" ./cmd/sagad)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$work/sagad" eventstore -listen "127.0.0.1:$port" -data "$work/data" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
	if grep -q "event store listening" "$work/server.log"; then break; fi
	sleep 0.1
done

set +e
(cd "$pkg" && SAGA_SUITE_ENDPOINT="127.0.0.1:$port" SAGA_SUITE_SCHEME=$scheme EVENTSTORE_INSECURE=true \
	go test -run "$pattern" -count=1 -v -timeout 15m . >"$out" 2>&1)
set -e
# The leaves: Test/Group/Case.
leaf='^ +--- %s: [^/ ]+/[^/ ]+/[^ ]+ '
pass=$(grep -cE "$(printf "$leaf" PASS)" "$out" || true)
fail=$(grep -cE "$(printf "$leaf" FAIL)" "$out" || true)
skip=$(grep -cE "$(printf "$leaf" SKIP)" "$out" || true)
echo "$pattern: $pass passed, $fail failed, $skip skipped (log: $out)"
grep -E "$(printf "$leaf" FAIL)" "$out" || true
