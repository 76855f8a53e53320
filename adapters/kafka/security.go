package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// The SASL mechanisms saga's Kafka clients speak: those the embedded
// broker accepts, and OAUTHBEARER.
const (
	// SASLPlain sends the user and password as they are: only over TLS.
	SASLPlain = broker.SASLPlain
	// SASLScramSHA256 is SCRAM with SHA-256 (RFC 7677).
	SASLScramSHA256 = broker.SASLScramSHA256
	// SASLScramSHA512 is SCRAM with SHA-512.
	SASLScramSHA512 = broker.SASLScramSHA512
	// SASLOAuthBearer sends a bearer token (RFC 7628).
	SASLOAuthBearer = "OAUTHBEARER"
)

// ErrInvalidSecurity is the cause of every problem Security.Validate
// reports.
var ErrInvalidSecurity = errors.New("invalid kafka security settings")

// Security says how saga's Kafka clients encrypt and authenticate: TLS
// (with a CA, a client certificate, a server name) and SASL. It is the
// one place sagad, sagactl, sagabench, adapters/client and adapters/agent
// take these settings from (RegisterFlags), so they have the same flags
// and environment variables everywhere.
//
// Secrets come from a file or the environment, never from a flag value (a
// flag's value can be read in the process list by anyone on the host).
// Password and token files are read at each authentication, so a rotated
// secret is picked up on the next connection. String and LogValue never
// show a secret.
type Security struct {
	// TLS connects with TLS, trusting the system's CAs unless CAFile is
	// set. Setting CAFile, CertFile or InsecureSkipVerify implies it.
	TLS bool
	// CAFile is a PEM file of the CAs to trust instead of the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that authenticate clients by certificate (mutual TLS).
	CertFile, KeyFile string
	// ServerName overrides the name the broker's certificate is checked
	// against (default: the host of the address dialled).
	ServerName string
	// InsecureSkipVerify accepts any broker certificate: anyone on the
	// path can then read and change the traffic. For tests only.
	InsecureSkipVerify bool

	// SASLMechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER;
	// empty means no SASL.
	SASLMechanism string
	// SASLUser is the user name of PLAIN and SCRAM.
	SASLUser string
	// SASLPasswordFile holds the password of PLAIN and SCRAM (surrounding
	// white space is ignored); SASLPassword is the password itself, for
	// programs and the environment. Set one of them.
	SASLPasswordFile, SASLPassword string
	// SASLTokenFile holds the OAUTHBEARER token; SASLToken is the token
	// itself. Set one of them.
	SASLTokenFile, SASLToken string
}

// Enabled reports whether any TLS or SASL setting is made.
func (s Security) Enabled() bool { return s.tlsOn() || s.SASLMechanism != "" }

func (s Security) tlsOn() bool {
	return s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.InsecureSkipVerify || s.ServerName != ""
}

// Validate reports every problem with the settings, each wrapping
// ErrInvalidSecurity.
func (s Security) Validate() error {
	var errs error
	add := func(format string, args ...any) {
		errs = errors.CombineErrors(errs, errors.Wrapf(ErrInvalidSecurity, format, args...))
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		add("a client certificate needs its key and a key its certificate (--kafka-tls-cert, --kafka-tls-key)")
	}
	if s.InsecureSkipVerify && s.CAFile != "" {
		add("a CA file and skipping certificate verification contradict each other")
	}
	for _, f := range []struct{ what, path string }{{"CA file", s.CAFile}, {"client certificate", s.CertFile}, {"client key", s.KeyFile},
		{"SASL password file", s.SASLPasswordFile}, {"SASL token file", s.SASLTokenFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			add("%s: %v", f.what, err)
		}
	}
	switch strings.ToUpper(s.SASLMechanism) {
	case "":
		if s.SASLUser != "" || s.SASLPasswordFile != "" || s.SASLPassword != "" || s.SASLTokenFile != "" || s.SASLToken != "" {
			add("SASL credentials are given but no mechanism (--kafka-sasl-mechanism)")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.SASLUser == "" {
			add("SASL %s needs a user (--kafka-sasl-user)", s.SASLMechanism)
		}
		switch {
		case s.SASLPasswordFile == "" && s.SASLPassword == "":
			add("SASL %s needs a password: --kafka-sasl-password-file or $SAGA_KAFKA_SASL_PASSWORD", s.SASLMechanism)
		case s.SASLPasswordFile != "" && s.SASLPassword != "":
			add("SASL password given both in a file and in the environment: give one")
		}
		if strings.EqualFold(s.SASLMechanism, SASLPlain) && !s.tlsOn() {
			add("SASL PLAIN sends the password in clear: use it with TLS (--kafka-tls)")
		}
	case SASLOAuthBearer:
		switch {
		case s.SASLTokenFile == "" && s.SASLToken == "":
			add("SASL OAUTHBEARER needs a token: --kafka-sasl-token-file or $SAGA_KAFKA_SASL_TOKEN")
		case s.SASLTokenFile != "" && s.SASLToken != "":
			add("SASL token given both in a file and in the environment: give one")
		}
	default:
		add("unknown SASL mechanism %q: want %s, %s, %s or %s", s.SASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer)
	}
	return errs
}

// Opts are the client options that apply the settings; none when nothing
// is set.
func (s Security) Opts() ([]kgo.Opt, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.tlsOn() {
		cfg, err := s.TLSConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if mech := s.mechanism(); mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// TLSConfig is the client TLS configuration of the settings.
func (s Security) TLSConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify} //nolint:gosec // only with the loud flag
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, errors.Wrap(err, "kafka TLS CA file")
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.Wrapf(ErrInvalidSecurity, "kafka TLS CA file %s holds no PEM certificate", s.CAFile)
		}
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, errors.Wrap(err, "kafka TLS client certificate")
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// secret reads a secret from its file, or takes the value given.
func secret(file, value, what string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", errors.Wrapf(err, "read the kafka %s file", what)
	}
	return strings.TrimSpace(string(b)), nil
}

func (s Security) mechanism() sasl.Mechanism {
	userPass := func() (string, string, error) {
		pass, err := secret(s.SASLPasswordFile, s.SASLPassword, "SASL password")
		return s.SASLUser, pass, err
	}
	switch strings.ToUpper(s.SASLMechanism) {
	case SASLPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			u, p, err := userPass()
			return plain.Auth{User: u, Pass: p}, err
		})
	case SASLScramSHA256:
		return scram.Sha256(func(context.Context) (scram.Auth, error) {
			u, p, err := userPass()
			return scram.Auth{User: u, Pass: p}, err
		})
	case SASLScramSHA512:
		return scram.Sha512(func(context.Context) (scram.Auth, error) {
			u, p, err := userPass()
			return scram.Auth{User: u, Pass: p}, err
		})
	case SASLOAuthBearer:
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			token, err := secret(s.SASLTokenFile, s.SASLToken, "SASL token")
			return oauth.Auth{Token: token}, err
		})
	}
	return nil
}

// ErrAuthenticationFailed marks an error Explain takes for a refused SASL
// login.
var ErrAuthenticationFailed = errors.New("kafka SASL authentication failed")

// Explain adds what an error most likely means under these settings. A
// broker that refuses a SASL login may simply close the connection (the
// embedded broker does; Kafka answers SASL_AUTHENTICATION_FAILED, which
// franz-go reports clearly), which a client sees as EOF: with SASL on,
// Explain marks such an error with ErrAuthenticationFailed.
func (s Security) Explain(err error) error {
	if err == nil || s.SASLMechanism == "" || !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
		return err
	}
	return errors.Wrapf(ErrAuthenticationFailed, "the broker closed the connection (%v): check SASL %s user %q and its password, and that the broker accepts %s",
		err, strings.ToUpper(s.SASLMechanism), s.SASLUser, strings.ToUpper(s.SASLMechanism))
}

// String describes the settings without their secrets.
func (s Security) String() string {
	var parts []string
	if s.tlsOn() {
		t := "tls"
		if s.CAFile != "" {
			t += " ca=" + s.CAFile
		}
		if s.CertFile != "" {
			t += " cert=" + s.CertFile
		}
		if s.InsecureSkipVerify {
			t += " INSECURE-skip-verify"
		}
		parts = append(parts, t)
	}
	if s.SASLMechanism != "" {
		parts = append(parts, "sasl "+strings.ToUpper(s.SASLMechanism)+" user="+s.SASLUser)
	}
	if len(parts) == 0 {
		return "plaintext, no authentication"
	}
	return strings.Join(parts, ", ")
}

// GoString is String, so that %#v shows no secret either.
func (s Security) GoString() string { return "kafka.Security{" + s.String() + "}" }

// LogValue is String, so that logging the settings shows no secret.
func (s Security) LogValue() slog.Value { return slog.StringValue(s.String()) }

// The environment variables of RegisterFlags.
const (
	EnvTLS                = "SAGA_KAFKA_TLS"
	EnvTLSCA              = "SAGA_KAFKA_TLS_CA"
	EnvTLSCert            = "SAGA_KAFKA_TLS_CERT"
	EnvTLSKey             = "SAGA_KAFKA_TLS_KEY"
	EnvTLSServerName      = "SAGA_KAFKA_TLS_SERVER_NAME"
	EnvSASLMechanism      = "SAGA_KAFKA_SASL_MECHANISM"
	EnvSASLUser           = "SAGA_KAFKA_SASL_USER"
	EnvSASLPasswordFile   = "SAGA_KAFKA_SASL_PASSWORD_FILE"
	EnvSASLPassword       = "SAGA_KAFKA_SASL_PASSWORD"
	EnvSASLTokenFile      = "SAGA_KAFKA_SASL_TOKEN_FILE"
	EnvSASLToken          = "SAGA_KAFKA_SASL_TOKEN"
	FlagInsecureSkipCheck = "kafka-tls-INSECURE-skip-verify"
)

// RegisterFlags registers the Kafka security flags on fs, each defaulting
// to its environment variable, and returns the settings they fill once fs
// is parsed. Passwords and tokens have no flag: they come from
// --kafka-sasl-password-file / --kafka-sasl-token-file or from
// $SAGA_KAFKA_SASL_PASSWORD / $SAGA_KAFKA_SASL_TOKEN, read here.
func RegisterFlags(fs *flag.FlagSet) *Security {
	s := &Security{SASLPassword: os.Getenv(EnvSASLPassword), SASLToken: os.Getenv(EnvSASLToken)}
	env := os.Getenv
	tlsDefault, _ := strconv.ParseBool(env(EnvTLS))
	fs.BoolVar(&s.TLS, "kafka-tls", tlsDefault, fmt.Sprintf("connect to Kafka with TLS (implied by the other --kafka-tls-* flags) [$%s]", EnvTLS))
	fs.StringVar(&s.CAFile, "kafka-tls-ca", env(EnvTLSCA), fmt.Sprintf("PEM file of the CAs to trust for Kafka (default the system's) [$%s]", EnvTLSCA))
	fs.StringVar(&s.CertFile, "kafka-tls-cert", env(EnvTLSCert), fmt.Sprintf("PEM client certificate for Kafka (mutual TLS) [$%s]", EnvTLSCert))
	fs.StringVar(&s.KeyFile, "kafka-tls-key", env(EnvTLSKey), fmt.Sprintf("PEM key of --kafka-tls-cert [$%s]", EnvTLSKey))
	fs.StringVar(&s.ServerName, "kafka-tls-server-name", env(EnvTLSServerName), fmt.Sprintf("name to check the brokers' certificates against (default the host dialled) [$%s]", EnvTLSServerName))
	fs.BoolVar(&s.InsecureSkipVerify, FlagInsecureSkipCheck, false, "accept any Kafka broker certificate: anyone on the network path can read and change the traffic; for tests only")
	fs.StringVar(&s.SASLMechanism, "kafka-sasl-mechanism", env(EnvSASLMechanism),
		fmt.Sprintf("SASL mechanism for Kafka: %s, %s, %s or %s [$%s]", SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer, EnvSASLMechanism))
	fs.StringVar(&s.SASLUser, "kafka-sasl-user", env(EnvSASLUser), fmt.Sprintf("SASL user for Kafka [$%s]", EnvSASLUser))
	fs.StringVar(&s.SASLPasswordFile, "kafka-sasl-password-file", env(EnvSASLPasswordFile),
		fmt.Sprintf("file holding the SASL password for Kafka (or set $%s; never a flag) [$%s]", EnvSASLPassword, EnvSASLPasswordFile))
	fs.StringVar(&s.SASLTokenFile, "kafka-sasl-token-file", env(EnvSASLTokenFile),
		fmt.Sprintf("file holding the OAUTHBEARER token for Kafka, re-read at each connection (or set $%s) [$%s]", EnvSASLToken, EnvSASLTokenFile))
	return s
}
