package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/httpapi"
)

// DefaultHealthcheckTimeout bounds one health check, connection and answer.
const DefaultHealthcheckTimeout = 3 * time.Second

// maxHealthBody bounds what a health check reads and prints of the answer.
const maxHealthBody = 64 << 10

// runHealthcheck asks a sagad's /readyz (or --path) and returns nil only
// for a 200; the answer's body, which names every check, goes to out. It
// needs no curl in the image: container health checks run it.
func runHealthcheck(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sagad healthcheck", flag.ContinueOnError)
	fs.SetOutput(helpOutput)
	addr := fs.String("addr", envOr("SAGA_HTTP_LISTEN", httpapi.DefaultListen),
		"host:port of the sagad's HTTP listener (its --http-listen); an unspecified host (0.0.0.0, ::, none) is asked on loopback [$SAGA_HTTP_LISTEN]")
	path := fs.String("path", "/readyz", "endpoint to ask: /readyz (ready to work) or /healthz (alive)")
	caFile := fs.String("tls-ca", "", "ask over TLS (the sagad runs with --api-tls-cert), checking its certificate against this CA file")
	serverName := fs.String("tls-server-name", "", "name the certificate must hold (default the host asked)")
	timeout := fs.Duration("timeout", DefaultHealthcheckTimeout, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.Newf("sagad healthcheck takes no arguments, not %q", fs.Args())
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		return errors.Wrapf(err, "--addr %q", *addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	scheme := "http"
	transport := &http.Transport{Proxy: nil}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return errors.Wrap(err, "--tls-ca")
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return errors.Newf("--tls-ca %s holds no PEM certificate", *caFile)
		}
		scheme = "https"
		transport.TLSClientConfig = &tls.Config{RootCAs: roots, ServerName: *serverName, MinVersion: tls.VersionTLS12}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	url := scheme + "://" + net.JoinHostPort(host, port) + *path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return errors.Wrapf(err, "--path %q", *path)
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return errors.Wrapf(err, "ask %s", url)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHealthBody))
	fmt.Fprintf(out, "%s %s\n%s", url, resp.Status, body)
	if resp.StatusCode != http.StatusOK {
		return errors.Newf("%s answered %s", url, resp.Status)
	}
	return nil
}
