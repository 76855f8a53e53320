package secure

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// The files of a secure directory.
const (
	CAFile                  = "ca.pem"
	CAKeyFile               = "ca-key.pem"
	CertFile                = "server.pem"
	KeyFile                 = "server-key.pem"
	KafkaPasswordFile       = "kafka-password"
	EventStorePasswordFile  = "eventstore-admin-password"
	EventStoreUsersFile     = "eventstore-users"
	KafkaUser               = "saga"
	EventStoreUser          = esdbserver.DefaultAdminUser
	certValidity            = 10 * 365 * 24 * time.Hour
	renewBefore             = 30 * 24 * time.Hour
	generatedPasswordLength = 32
)

// ErrIncomplete is returned by Prepare when the directory holds some of
// the files but not others: it will not overwrite what an operator may
// have put there.
var ErrIncomplete = errors.New("secure directory is incomplete")

// Files are the paths and names of a prepared secure directory. It holds
// no secret itself; the passwords are read from their files when needed.
type Files struct {
	Dir string
	// CA is the PEM certificate clients trust; Cert and Key are the
	// servers' certificate and key.
	CA, Cert, Key string
	// KafkaUser and KafkaPasswordFile are the SCRAM credentials of the
	// embedded broker (SCRAM-SHA-256 and SCRAM-SHA-512).
	KafkaUser, KafkaPasswordFile string
	// EventStoreUser and EventStorePasswordFile are the event store's
	// administrator; EventStoreUsers is its users file.
	EventStoreUser, EventStorePasswordFile, EventStoreUsers string
}

// Prepare returns the secure files in dir, generating on first use a CA,
// a server certificate for the hosts (always 127.0.0.1, ::1, localhost and
// this host's name), and random passwords, all written 0600 in a 0700
// directory. Later calls reuse them; a server certificate close to expiry,
// or missing a host, is issued again by the same CA.
func Prepare(dir string, hosts ...string) (*Files, error) {
	f := &Files{Dir: dir, CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile),
		KafkaUser: KafkaUser, KafkaPasswordFile: filepath.Join(dir, KafkaPasswordFile),
		EventStoreUser: EventStoreUser, EventStorePasswordFile: filepath.Join(dir, EventStorePasswordFile),
		EventStoreUsers: filepath.Join(dir, EventStoreUsersFile)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errors.Wrap(err, "create the secure directory")
	}
	all := []string{f.CA, filepath.Join(dir, CAKeyFile), f.Cert, f.Key, f.KafkaPasswordFile, f.EventStorePasswordFile, f.EventStoreUsers}
	var present []string
	for _, p := range all {
		if _, err := os.Stat(p); err == nil {
			present = append(present, filepath.Base(p))
		}
	}
	switch len(present) {
	case 0:
		if err := f.generate(hosts); err != nil {
			return nil, err
		}
	case len(all):
	default:
		return nil, errors.Wrapf(ErrIncomplete, "%s holds %v but not all of %s, %s, %s, %s, %s, %s, %s: remove it to start afresh",
			dir, present, CAFile, CAKeyFile, CertFile, KeyFile, KafkaPasswordFile, EventStorePasswordFile, EventStoreUsersFile)
	}
	if err := f.renewServerCert(hosts); err != nil {
		return nil, err
	}
	return f, nil
}

// newCA writes a new CA certificate (mode certMode) and its key (0600).
func newCA(certPath, keyPath string, certMode os.FileMode) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return errors.Wrap(err, "CA key")
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "saga local CA " + host, Organization: []string{"saga"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return errors.Wrap(err, "CA certificate")
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", mustMarshalKey(key)); err != nil {
		return err
	}
	return writeFileMode(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), certMode)
}

func (f *Files) generate(hosts []string) error {
	if err := newCA(f.CA, filepath.Join(f.Dir, CAKeyFile), 0o600); err != nil {
		return err
	}
	if err := f.issueServerCert(hosts); err != nil {
		return err
	}
	kafkaPass, esPass := randomPassword(), randomPassword()
	if err := writeFile(f.KafkaPasswordFile, []byte(kafkaPass+"\n")); err != nil {
		return err
	}
	if err := writeFile(f.EventStorePasswordFile, []byte(esPass+"\n")); err != nil {
		return err
	}
	hash, err := esdbserver.HashPassword(esPass)
	if err != nil {
		return err
	}
	users := "# saga event store users: NAME:HASH:GROUPS (sagad eventstore-user adds one)\n" +
		esdbserver.FormatUser(esdbserver.User{Name: f.EventStoreUser, Hash: hash, Groups: []string{esdbserver.AdminsGroup}}) + "\n"
	return writeFile(f.EventStoreUsers, []byte(users))
}

// serverHosts are the names and addresses the server certificate covers.
func serverHosts(extra []string) []string {
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	for _, h := range extra {
		if h != "" && !contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// renewServerCert issues the server certificate again when it expires
// soon or lacks one of the hosts.
func (f *Files) renewServerCert(hosts []string) error {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return errors.Wrap(err, "load the server certificate")
	}
	cert := pair.Leaf
	if cert == nil {
		if cert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return errors.Wrap(err, "parse the server certificate")
		}
	}
	fresh := time.Until(cert.NotAfter) > renewBefore
	for _, h := range serverHosts(hosts) {
		if cert.VerifyHostname(h) != nil {
			fresh = false
		}
	}
	if fresh {
		return nil
	}
	return f.issueServerCert(hosts)
}

func (f *Files) issueServerCert(hosts []string) error {
	caPair, err := tls.LoadX509KeyPair(f.CA, filepath.Join(f.Dir, CAKeyFile))
	if err != nil {
		return errors.Wrap(err, "load the CA")
	}
	ca, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		return errors.Wrap(err, "parse the CA certificate")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return errors.Wrap(err, "server key")
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "saga", Organization: []string{"saga"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range serverHosts(hosts) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		return errors.Wrap(err, "server certificate")
	}
	if err := writePEM(f.Key, "EC PRIVATE KEY", mustMarshalKey(key)); err != nil {
		return err
	}
	return writePEM(f.Cert, "CERTIFICATE", der)
}

// ServerTLS is the TLS configuration of the embedded servers.
func (f *Files) ServerTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, errors.Wrap(err, "load the server certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// KafkaPassword reads the broker's SCRAM password.
func (f *Files) KafkaPassword() (string, error) { return readSecret(f.KafkaPasswordFile) }

// EventStorePassword reads the event store's administrator password.
func (f *Files) EventStorePassword() (string, error) { return readSecret(f.EventStorePasswordFile) }

// KafkaUsers are the users the embedded broker accepts.
func (f *Files) KafkaUsers() ([]broker.SASLUser, error) {
	pass, err := f.KafkaPassword()
	if err != nil {
		return nil, err
	}
	return []broker.SASLUser{{Mechanism: broker.SASLScramSHA256, User: f.KafkaUser, Password: pass},
		{Mechanism: broker.SASLScramSHA512, User: f.KafkaUser, Password: pass}}, nil
}

// KafkaSecurity are the settings saga's clients connect to the embedded
// broker with.
func (f *Files) KafkaSecurity() kafka.Security {
	return kafka.Security{CAFile: f.CA, SASLMechanism: kafka.SASLScramSHA256, SASLUser: f.KafkaUser, SASLPasswordFile: f.KafkaPasswordFile}
}

// EventStoreURL is the connection string of the embedded event store at
// addr, with the administrator's credentials: a secret, to print only
// through eventstore.Redact.
func (f *Files) EventStoreURL(addr string) (string, error) {
	pass, err := f.EventStorePassword()
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "esdb", User: url.UserPassword(f.EventStoreUser, pass), Host: addr,
		RawQuery: "tls=true&tlsCAFile=" + url.QueryEscape(f.CA)}
	return u.String(), nil
}

// Instructions tell a person how to connect standard clients to the
// embedded servers: paths of the secret files, never the secrets.
func (f *Files) Instructions(kafkaAddr, eventStoreAddr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "secure mode: TLS with the CA %s; credentials in %s (0600)\n", f.CA, f.Dir)
	fmt.Fprintf(&b, "  kafka (SASL_SSL, SCRAM-SHA-256 or SCRAM-SHA-512, user %s, password in %s):\n", f.KafkaUser, f.KafkaPasswordFile)
	fmt.Fprintf(&b, "    kcat -b %s -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=%s \\\n", kafkaAddr, f.KafkaUser)
	fmt.Fprintf(&b, "      -X sasl.password=\"$(cat %s)\" -X ssl.ca.location=%s -L\n", f.KafkaPasswordFile, f.CA)
	fmt.Fprintf(&b, "    sagactl/sagabench: --kafka-tls-ca %s --kafka-sasl-mechanism SCRAM-SHA-256 --kafka-sasl-user %s --kafka-sasl-password-file %s\n",
		f.CA, f.KafkaUser, f.KafkaPasswordFile)
	fmt.Fprintf(&b, "  event store (user %s, password in %s):\n", f.EventStoreUser, f.EventStorePasswordFile)
	fmt.Fprintf(&b, "    esdb://%s:$(cat %s)@%s?tls=true&tlsCAFile=%s\n", f.EventStoreUser, f.EventStorePasswordFile, eventStoreAddr, f.CA)
	return b.String()
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", errors.Wrap(err, "read secret")
	}
	return strings.TrimSpace(string(b)), nil
}

func randomPassword() string {
	b := make([]byte, generatedPasswordLength*3/4)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func mustMarshalKey(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return der
}

func writePEM(path, kind string, der []byte) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

// writeFile writes a file 0600 through a temporary file and a rename, so a
// crash leaves either the old file or the new one.
func writeFile(path string, data []byte) error { return writeFileMode(path, data, 0o600) }

// writeFileMode is writeFile with another mode, set whatever the umask.
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return errors.Wrapf(err, "write %s", path)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return errors.Wrapf(err, "write %s", path)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Wrapf(err, "write %s", path)
	}
	return nil
}
