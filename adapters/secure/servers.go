package secure

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
)

// serverKeyBits is the size of the RSA keys IssueServer makes.
const serverKeyBits = 3072

// Issued are the files IssueServer prepared, and whether it wrote them.
type Issued struct {
	Dir string
	// CA is the PEM certificate clients trust; CAKey its key (always
	// 0600: only the issuer needs it).
	CA, CAKey string
	// Cert and Key are the servers' certificate and PKCS#8 key.
	Cert, Key string
	// NewCA and NewCert tell what this call wrote; false: reused.
	NewCA, NewCert bool
}

// IssueServer prepares in dir the certificates of servers saga connects to
// but does not run itself, such as Kafka and KurrentDB in containers
// (sagad certs): a CA, created on first use and reused after, and one
// server certificate whose names are hosts, issued again when it is
// missing, expires within 30 days, lacks one of the hosts or was not
// signed by the CA.
//
// The server key is RSA in PKCS#8 PEM ("PRIVATE KEY"): KurrentDB reads only
// RSA keys, and Kafka's PEM key store only PKCS#8. The certificate has
// the digital-signature and key-encipherment key usages and both the
// server and client authentication extended key usages, which KurrentDB
// requires of a node's certificate.
//
// Certificates and the server key are written with mode (0600 is the safe
// choice; containers that run as other users than the files' owner need
// them readable, as Docker's own secrets are); the CA key is always 0600.
// dir is created 0700. A CA certificate without its key, or the reverse,
// is refused rather than overwritten.
func IssueServer(dir string, hosts []string, mode os.FileMode) (*Issued, error) {
	hosts = slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { return h == "" })
	if len(hosts) == 0 {
		return nil, errors.New("a server certificate needs at least one host name or address")
	}
	is := &Issued{Dir: dir, CA: filepath.Join(dir, CAFile), CAKey: filepath.Join(dir, CAKeyFile),
		Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errors.Wrap(err, "create the certificates directory")
	}
	_, caErr := os.Stat(is.CA)
	_, keyErr := os.Stat(is.CAKey)
	switch {
	case caErr == nil && keyErr == nil:
		if err := os.Chmod(is.CA, mode); err != nil {
			return nil, errors.Wrap(err, "set the CA certificate's mode")
		}
	case os.IsNotExist(caErr) && os.IsNotExist(keyErr):
		if err := newCA(is.CA, is.CAKey, mode); err != nil {
			return nil, err
		}
		is.NewCA = true
	default:
		return nil, errors.Wrapf(ErrIncomplete, "%s holds one of %s and %s but not both: remove it, or put back the other",
			dir, CAFile, CAKeyFile)
	}
	caPair, err := tls.LoadX509KeyPair(is.CA, is.CAKey)
	if err != nil {
		return nil, errors.Wrap(err, "load the CA")
	}
	ca, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		return nil, errors.Wrap(err, "parse the CA certificate")
	}
	if !is.NewCA && serverCertFresh(is, ca, hosts) {
		for _, p := range []string{is.Cert, is.Key} {
			if err := os.Chmod(p, mode); err != nil {
				return nil, errors.Wrap(err, "set the server certificate's mode")
			}
		}
		return is, nil
	}
	key, err := rsa.GenerateKey(rand.Reader, serverKeyBits)
	if err != nil {
		return nil, errors.Wrap(err, "server key")
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0], Organization: []string{"saga"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		return nil, errors.Wrap(err, "server certificate")
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, errors.Wrap(err, "server key")
	}
	if err := writeFileMode(is.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), mode); err != nil {
		return nil, err
	}
	if err := writeFileMode(is.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), mode); err != nil {
		return nil, err
	}
	is.NewCert = true
	return is, nil
}

// serverCertFresh tells whether the server certificate in is can stay: it
// loads with its key, which is RSA in PKCS#8, was signed by ca, covers
// every host and does not expire soon.
func serverCertFresh(is *Issued, ca *x509.Certificate, hosts []string) bool {
	pair, err := tls.LoadX509KeyPair(is.Cert, is.Key)
	if err != nil {
		return false
	}
	keyPEM, err := os.ReadFile(is.Key)
	if err != nil {
		return false
	}
	if block, _ := pem.Decode(keyPEM); block == nil || block.Type != "PRIVATE KEY" {
		return false
	}
	if _, rsaKey := pair.PrivateKey.(*rsa.PrivateKey); !rsaKey {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || cert.CheckSignatureFrom(ca) != nil || time.Until(cert.NotAfter) < renewBefore {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// EnsurePassword writes a random password to path, without a trailing
// newline (some readers, such as Kafka's directory config provider, take
// a file's bytes as they are), unless the file exists: an operator's own
// password is never replaced. It reports whether it wrote one.
func EnsurePassword(path string, mode os.FileMode) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, os.Chmod(path, mode)
	} else if !os.IsNotExist(err) {
		return false, errors.Wrapf(err, "check %s", path)
	}
	return true, writeFileMode(path, []byte(randomPassword()), mode)
}

// EnsureFile creates path with content and mode unless it exists (then
// only its mode is set).
func EnsureFile(path string, content []byte, mode os.FileMode) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, os.Chmod(path, mode)
	} else if !os.IsNotExist(err) {
		return false, errors.Wrapf(err, "check %s", path)
	}
	return true, writeFileMode(path, content, mode)
}
