package engine

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultServiceName is the service.name of saga's spans unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise.
const DefaultServiceName = "saga"

// TracingEnabled reports whether the environment asks for spans to be
// exported: an OTLP endpoint is set, and the SDK is not disabled.
func TracingEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// startTracing chooses the provider of every span: Config.TracerProvider;
// else, when TracingEnabled, an SDK provider exporting in batches over
// OTLP/HTTP as the standard OTEL_* variables say, which Close flushes;
// else the global provider.
func (a *App) startTracing(context.Context) error {
	switch {
	case a.cfg.TracerProvider != nil:
		a.tracing = a.cfg.TracerProvider
		return nil
	case !TracingEnabled():
		a.tracing = otel.GetTracerProvider()
		return nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return errors.Newf("OTLP protocol %q is not supported: saga exports traces over http/protobuf (the collector's port 4318)", protocol)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The endpoint, headers, TLS, compression and timeout come from the
	// OTEL_EXPORTER_OTLP_* variables.
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return errors.Wrap(err, "OTLP trace exporter")
	}
	fromEnv, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return errors.Wrap(err, "trace resource")
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", DefaultServiceName),
		attribute.String("service.instance.id", a.cfg.Instance)), fromEnv)
	if err != nil {
		return errors.Wrap(err, "trace resource")
	}
	// The sampler is OTEL_TRACES_SAMPLER's, by default parent-based
	// always-on: a caller's decision is kept.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	a.tracing = tp
	// Pushed first, popped last: the spans of every part are flushed.
	a.closers.push("tracing", func() error {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Wrap(tp.Shutdown(flushCtx), "flush spans")
	})
	a.logger.Info("exporting traces over OTLP/HTTP", "service", res.Set().Encoded(attribute.DefaultEncoder()))
	return nil
}

// startMetrics registers the counters of every part and, with
// MetricsListen, serves /metrics on a listener of its own.
func (a *App) startMetrics(context.Context) error {
	a.registerMetrics()
	if a.cfg.MetricsListen == "" {
		return nil
	}
	lis, err := net.Listen("tcp", a.cfg.MetricsListen)
	if err != nil {
		return errors.Wrap(err, "metrics listen")
	}
	a.MetricsAddr = lis.Addr().String()
	a.egress.AddOwn(a.MetricsAddr)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.Metrics.Handler())
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	a.run("metrics listener", func() error {
		if err := server.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	a.closers.push("metrics server", func() error { shutdown(server); return nil })
	a.logger.Info("metrics listening", "addr", "http://"+a.MetricsAddr+"/metrics")
	return nil
}
