package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// API credentials and TLS, from flags, the environment or the config file.
var (
	apiTokenFile string
	apiCAFile    string
)

// loadConfigFile reads KEY=VALUE lines (the SAGA_* environment variables)
// from $SAGA_CONFIG, else ~/.config/saga/sagactl.conf, for those not set
// in the environment: the place for an operator's API token file and CA.
func loadConfigFile() error {
	path := os.Getenv("SAGA_CONFIG")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		path = filepath.Join(home, ".config", "saga", "sagactl.conf")
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) && os.Getenv("SAGA_CONFIG") == "" {
		return nil
	}
	if err != nil {
		return errors.Wrap(err, "open sagactl's config file")
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(strings.TrimSpace(key), "SAGA_") {
			return errors.Newf("%s line %d: want SAGA_NAME=value", path, n)
		}
		key = strings.TrimSpace(key)
		if _, set := os.LookupEnv(key); !set {
			_ = os.Setenv(key, strings.TrimSpace(value))
		}
	}
	return errors.Wrapf(lines.Err(), "read %s", path)
}

// apiToken is the bearer token for the API, if one is configured: from the
// --api-token-file file, else $SAGA_API_TOKEN. Never from a flag value,
// which would show in ps.
func apiToken() (string, error) {
	if apiTokenFile != "" {
		raw, err := os.ReadFile(apiTokenFile)
		if err != nil {
			return "", errors.Wrap(err, "read the API token file")
		}
		return strings.TrimSpace(string(raw)), nil
	}
	return os.Getenv("SAGA_API_TOKEN"), nil
}

// apiDialTimeout bounds connecting to the API, so that an address that
// does not answer fails within seconds rather than the system's minutes.
const apiDialTimeout = 5 * time.Second

// apiClient is the HTTP client for the API, trusting --api-ca when given;
// made once, so that a bulk action's requests share connections.
var apiClient = sync.OnceValues(newAPIClient)

func newAPIClient() (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: apiDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	if apiCAFile != "" {
		pem, err := os.ReadFile(apiCAFile)
		if err != nil {
			return nil, errors.Wrap(err, "read the API's CA file")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.Newf("%s holds no PEM certificate", apiCAFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t}, nil
}

// doAPI sends a request to the API with the configured credentials.
func doAPI(req *http.Request) (*http.Response, error) {
	token, err := apiToken()
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client, err := apiClient()
	if err != nil {
		return nil, err
	}
	return client.Do(req)
}
