package integration_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/sagaengine/saga/"

// goList runs go list at the module root with a format over the packages of
// a layer.
func goList(t *testing.T, format, layer string, deps bool) []string {
	args := []string{"list", "-f", format}
	if deps {
		args = append(args, "-deps")
	}
	cmd := exec.Command("go", append(args, "./"+layer+"/...")...)
	cmd.Dir = ".." // the module root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return strings.Fields(string(out))
}

func violates(dep string, forbidden []string) bool {
	for _, f := range forbidden {
		if dep == f || strings.HasPrefix(dep, f+"/") {
			return true
		}
	}
	return false
}

// TestImportsPointOneWay keeps the layering: domain <- projections,
// processes <- adapters <- cmd, integration. Inner layers reach no Kafka,
// EventStoreDB, gRPC, metrics library or OpenTelemetry SDK code even
// indirectly (the OpenTelemetry API, which processes start spans with, is
// allowed), and do no HTTP themselves.
func TestImportsPointOneWay(t *testing.T) {
	infrastructure := []string{"github.com/twmb/franz-go", "github.com/EventStore/EventStore-Client-Go", "google.golang.org/grpc",
		"github.com/prometheus", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters"}
	inner := map[string][]string{
		"domain":      {module + "projections", module + "processes", module + "adapters", module + "cmd"},
		"projections": {module + "processes", module + "adapters", module + "cmd"},
		"processes":   {module + "projections", module + "adapters", module + "cmd"},
	}
	for layer, forbidden := range inner {
		for _, dep := range goList(t, "{{.ImportPath}}", layer, true) {
			assert.False(t, violates(dep, append(forbidden, infrastructure...)), "%s depends on %s", layer, dep)
		}
		for _, imp := range goList(t, `{{join .Imports " "}}`, layer, false) {
			assert.False(t, violates(imp, []string{"net/http"}), "%s imports %s", layer, imp)
		}
	}
	for _, dep := range goList(t, "{{.ImportPath}}", "adapters", true) {
		assert.False(t, violates(dep, []string{module + "cmd", module + "integration"}), "adapters depend on %s", dep)
	}
}

// TestAgentRuntimeAndDispatchImportNoProcessManager keeps the agent's own
// runtime and dispatch policy apart from the process managers: neither
// processes/agentruntime nor processes/dispatch depends on package
// processes itself (the scheduler, supervisor, submitter, ...), nor on
// projections, adapters or cmd. They share the ports of processes/port.
func TestAgentRuntimeAndDispatchImportNoProcessManager(t *testing.T) {
	forbidden := []string{module + "projections", module + "adapters", module + "cmd"}
	for _, layer := range []string{"processes/agentruntime", "processes/dispatch"} {
		deps := goList(t, "{{.ImportPath}}", layer, true)
		assert.Contains(t, deps, module+layer, "go list lists %s itself", layer)
		for _, dep := range deps {
			assert.NotEqual(t, module+"processes", dep, "%s depends on the process managers", layer)
			assert.False(t, violates(dep, forbidden), "%s depends on %s", layer, dep)
		}
	}
}

// TestTracingSDKIsWiredOnlyByTheEngine keeps the OpenTelemetry SDK and
// its exporters to adapters/engine, the one place that wires them: every
// other package starts spans through the API alone, on the provider it is
// given.
func TestTracingSDKIsWiredOnlyByTheEngine(t *testing.T) {
	sdk := []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters"}
	format := `{{.ImportPath}} {{join .Imports " "}}`
	cmd := exec.Command("go", "list", "-f", format, "./domain/...", "./projections/...", "./processes/...", "./adapters/...")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if fields[0] == module+"adapters/engine" {
			continue
		}
		for _, imp := range fields[1:] {
			assert.False(t, violates(imp, sdk), "%s imports %s: only adapters/engine wires the tracing SDK", fields[0], imp)
		}
	}
}

// TestEmbeddingExampleUsesOnlyThePublicAPI keeps integration/embedding, the
// example of a Go service embedding saga, to the public packages of
// docs/api.md.
func TestEmbeddingExampleUsesOnlyThePublicAPI(t *testing.T) {
	public := []string{module + "adapters/agent", module + "adapters/client", module + "adapters/engine",
		module + "adapters/workflowfile", module + "domain"}
	for _, imp := range goList(t, `{{join .TestImports " "}} {{join .XTestImports " "}}`, "integration/embedding", false) {
		if strings.HasPrefix(imp, module) {
			assert.True(t, violates(imp, public), "integration/embedding imports %s, which is not public", imp)
		}
	}
}

// TestClientLinksNothingOfTheEngine keeps the public Go client to the wire
// protocol: of saga it links domain and domain/protocol only (no embedded
// broker, no processes, no other adapter).
func TestClientLinksNothingOfTheEngine(t *testing.T) {
	// domain/internal/plainjson is the domain's own JSON reader and writer
	// (standard library only), part of the wire codecs.
	allowed := []string{module + "adapters/client", module + "domain", module + "domain/protocol", module + "domain/internal/plainjson"}
	for _, dep := range goList(t, "{{.ImportPath}}", "adapters/client", true) {
		if strings.HasPrefix(dep, module) {
			assert.Contains(t, allowed, dep, "adapters/client depends on %s", dep)
		}
		for _, forbidden := range []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/EventStore/EventStore-Client-Go", "google.golang.org/grpc"} {
			assert.False(t, violates(dep, []string{forbidden}), "adapters/client depends on %s", dep)
		}
	}
}

// TestDomainDoesNotNeedTheProtocol keeps the wire format out of the core:
// domain/protocol builds on domain, and no package of domain but the
// protocol itself imports it, not even in tests.
func TestDomainDoesNotNeedTheProtocol(t *testing.T) {
	protocol := module + "domain/protocol"
	format := `{{.ImportPath}} {{join .Deps " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`
	cmd := exec.Command("go", "list", "-f", format, "./domain/...")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if violates(fields[0], []string{protocol}) {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			assert.False(t, violates(dep, []string{protocol}), "%s depends on %s", fields[0], dep)
		}
	}
	assert.NotZero(t, checked, "no package of domain was checked")
	assert.Contains(t, goList(t, `{{join .Imports " "}}`, "domain/protocol", false), module+"domain", "the protocol builds on domain")
}

// TestContractSuiteStaysInTests keeps adapters/eventstore/eventstoretest, the
// event store's contract suite, out of every binary, and to the port: it
// depends on the domain and processes, not on any event store.
func TestContractSuiteStaysInTests(t *testing.T) {
	suite := module + "adapters/eventstore/eventstoretest"
	for _, imp := range goList(t, `{{join .Imports " "}}`, ".", false) {
		assert.NotEqual(t, suite, imp, "a non-test package imports the contract suite")
	}
	for _, dep := range goList(t, "{{.ImportPath}}", "adapters/eventstore/eventstoretest", true) {
		assert.False(t, violates(dep, []string{module + "adapters", "github.com/EventStore/EventStore-Client-Go", "google.golang.org/grpc"}) && dep != suite,
			"the contract suite depends on %s", dep)
	}
}

// TestTheEmbeddedBrokerImportsNothingAboveIt keeps the embedded Kafka
// broker (adapters/kafka/broker) a server of its own, as adapters/esdbserver
// is: of saga it depends on domain, domain/protocol and the disk flush it
// shares with the event store (adapters/internal/diskflush, which depends on
// nothing of saga), not on the Kafka client (adapters/kafka), the processes
// or the engine.
func TestTheEmbeddedBrokerImportsNothingAboveIt(t *testing.T) {
	brokerPackage := module + "adapters/kafka/broker"
	flush := module + "adapters/internal/diskflush"
	for _, dep := range goList(t, "{{.ImportPath}}", "adapters/internal/diskflush", true) {
		assert.False(t, strings.HasPrefix(dep, module) && dep != flush, "adapters/internal/diskflush depends on %s", dep)
	}
	deps := goList(t, "{{.ImportPath}}", "adapters/kafka/broker", true)
	require.Contains(t, deps, brokerPackage, "go list found no broker package")
	for _, dep := range deps {
		if strings.HasPrefix(dep, module) && dep != brokerPackage {
			assert.True(t, violates(dep, []string{module + "domain", flush}), "adapters/kafka/broker depends on %s", dep)
		}
	}
}
