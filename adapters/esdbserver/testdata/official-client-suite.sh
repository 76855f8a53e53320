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
#
# SKIP is go test's -skip (e.g. /Rebalance, the cluster's tests). When
# EXPECT_FAIL is set (to the names of the tests expected to fail, separated
# by spaces; empty for none) the script checks the outcome and exits 1 if a
# test not named there failed, a test named there passed (remove it from
# the list), the binary panicked or nothing ran; CI runs it so
# (.ci/run). Without EXPECT_FAIL it only reports.
set -euo pipefail
pattern=${1:-TestPersistentSubscriptions}
module=${2:-}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d)
out=${OUT:-$PWD/official-suite.log}
server_pids=
cleanup() {
	for pid in $server_pids; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# summarize counts the tests that have no subtests, by outcome, and in
# check mode (EXPECT_FAIL set) fails on an unexpected outcome.
summarize() {
	python3 - "$out" "$pattern" "${EXPECT_FAIL-}" "${EXPECT_FAIL+check}" <<'PY'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
res = {}
for l in lines:
    m = re.match(r"\s*--- (PASS|FAIL|SKIP): (\S+)", l)
    if m:
        res[m.group(2)] = m.group(1)
leaves = {n: r for n, r in res.items() if not any(o.startswith(n + "/") for o in res)}
count = {k: sum(1 for r in leaves.values() if r == k) for k in ("PASS", "FAIL", "SKIP")}
print(f"{sys.argv[2]}: {count['PASS']} passed, {count['FAIL']} failed, {count['SKIP']} skipped (log: {sys.argv[1]})")
for n, r in sorted(leaves.items()):
    if r == "FAIL":
        print("  FAIL", n)
if any(l.startswith("panic:") for l in lines):
    print("  the test binary panicked: the tests after the panic did not run")
if not res:
    print("  no test ran; the log's tail:")
    print("\n".join(lines[-15:]))
if sys.argv[4] == "check":
    expected = set(sys.argv[3].split())
    failed = {n for n, r in leaves.items() if r == "FAIL"}
    bad = False
    for n in sorted(failed - expected):
        print("  unexpected failure:", n)
        bad = True
    for n in sorted(expected - failed):
        print("  expected to fail but", "passed" if leaves.get(n) == "PASS" else "did not fail (%s)" % leaves.get(n, "not run"),
              "- remove it from EXPECT_FAIL:", n)
        bad = True
    if not res or any(l.startswith("panic:") for l in lines):
        bad = True
    if bad:
        sys.exit(1)
PY
}

if [ -z "$module" ]; then
	dir=$(cd "$root" && go list -m -f '{{.Dir}}' github.com/EventStore/EventStore-Client-Go/v4)
else
	dir=$(cd "$work" && go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
fi
cp -r "$dir" "$work/client"
chmod -R u+w "$work/client"
started=$SECONDS
(cd "$root" && go build -o "$work/sagad" ./cmd/sagad)
echo "sagad built in $((SECONDS - started)) s" >&2
# serve [sagad eventstore flags...] starts a server on a free port and sets
# addr to its address.
serve() {
	local port log
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	log="$work/server-$port.log"
	"$work/sagad" eventstore -listen "127.0.0.1:$port" -data "$work/data-$port" "$@" >"$log" 2>&1 &
	server_pids="$server_pids $!"
	for _ in $(seq 100); do
		if grep -q "event store listening" "$log"; then break; fi
		sleep 0.1
	done
	addr="127.0.0.1:$port"
}

if [ -f "$work/client/test/client_fixture_test.go" ]; then
	# KurrentDB-Client-Go: suites whose fixtures dial fixed addresses, an
	# insecure node on 2114 and a secure one on 2115 with the module's
	# certificates (the default admin/changeit account).
	pkg="$work/client/test"
	serve
	insecure=$addr
	serve -tls-cert "$work/client/certs/node1/node.crt" -tls-key "$work/client/certs/node1/node.key"
	secure=$addr
	sed -i "s/localhost:2114/$insecure/; s/localhost:2115/$secure/" "$pkg/client_fixture_test.go"
	started=$SECONDS
	set +e
	(cd "$pkg" && go test -run "$pattern" -skip "${SKIP:-^$}" -count=1 -v -timeout 15m . >"$out" 2>&1)
	set -e
	echo "suite built and ran in $((SECONDS - started)) s" >&2
	summarize
	exit
fi

pkg=$work/client/esdb
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
serve
endpoint=$addr
started=$SECONDS
set +e
(cd "$pkg" && SAGA_SUITE_ENDPOINT="$endpoint" SAGA_SUITE_SCHEME=esdb EVENTSTORE_INSECURE=true \
	go test -run "$pattern" -skip "${SKIP:-^$}" -count=1 -v -timeout 15m . >"$out" 2>&1)
set -e
echo "suite built and ran in $((SECONDS - started)) s" >&2
summarize
