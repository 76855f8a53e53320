package httpapi

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/cockroachdb/errors"
)

// Role is what a token may do.
type Role string

// The roles: a viewer reads, an operator also acts (retry, cancel, register
// workflows, rebuild the view).
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// ErrTokensFile is returned for a tokens file that cannot be used.
var ErrTokensFile = errors.New("invalid tokens file")

// Token is one API credential: who holds it, what it may do, and the
// SHA-256 of its secret (the secret itself is never stored).
type Token struct {
	Identity string
	Role     Role
	hash     [sha256.Size]byte
}

// Tokens are the API credentials. The zero value (none) turns
// authentication off: every caller may read and act, as in the loopback
// development mode.
type Tokens struct {
	tokens []Token
}

// LoadTokens reads a tokens file: one token a line, "IDENTITY ROLE
// sha256:HEX", with # comments. NewToken makes a line.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "open tokens file %s", path)
	}
	defer f.Close()
	var t Tokens
	lines := bufio.NewScanner(f)
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, errors.Wrapf(ErrTokensFile, "%s line %d: want IDENTITY ROLE sha256:HEX", path, n)
		}
		role := Role(fields[1])
		if role != RoleViewer && role != RoleOperator {
			return nil, errors.Wrapf(ErrTokensFile, "%s line %d: role %q is neither viewer nor operator", path, n, fields[1])
		}
		hexHash, ok := strings.CutPrefix(fields[2], "sha256:")
		raw, err := hex.DecodeString(hexHash)
		if !ok || err != nil || len(raw) != sha256.Size {
			return nil, errors.Wrapf(ErrTokensFile, "%s line %d: the hash must be sha256: and 64 hex digits", path, n)
		}
		tok := Token{Identity: fields[0], Role: role}
		copy(tok.hash[:], raw)
		t.tokens = append(t.tokens, tok)
	}
	if err := lines.Err(); err != nil {
		return nil, errors.Wrapf(err, "read tokens file %s", path)
	}
	if len(t.tokens) == 0 {
		return nil, errors.Wrapf(ErrTokensFile, "%s holds no token", path)
	}
	return &t, nil
}

// NewToken makes a random secret for identity and role, and the line of the
// tokens file that accepts it. Give the secret to its holder; store only
// the line.
func NewToken(identity string, role Role) (secret, line string, err error) {
	if identity == "" || strings.ContainsAny(identity, " \t\n#") {
		return "", "", errors.New("an identity is one word")
	}
	if role != RoleViewer && role != RoleOperator {
		return "", "", errors.Newf("role %q is neither viewer nor operator", role)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", "", errors.Wrap(err, "make a token")
	}
	secret = "saga_" + base64.RawURLEncoding.EncodeToString(buf)
	sum := sha256.Sum256([]byte(secret))
	return secret, identity + " " + string(role) + " sha256:" + hex.EncodeToString(sum[:]), nil
}

// Enabled reports whether tokens are required.
func (t *Tokens) Enabled() bool { return t != nil && len(t.tokens) > 0 }

// lookup finds the token whose secret this is, comparing every hash in
// constant time.
func (t *Tokens) lookup(secret string) (Token, bool) {
	sum := sha256.Sum256([]byte(secret))
	var found Token
	ok := false
	for _, tok := range t.tokens {
		if subtle.ConstantTimeCompare(sum[:], tok.hash[:]) == 1 {
			found, ok = tok, true
		}
	}
	return found, ok
}

type identityKey struct{}

// identity is who the request's token belongs to, when tokens are on.
func identity(r *http.Request) (string, bool) {
	id, ok := r.Context().Value(identityKey{}).(string)
	return id, ok
}

// SessionCookie is the cookie in which a browser presents its token: the
// console's login form sets it (HttpOnly, SameSite=Strict) and the guard
// reads it when a request has no Authorization header.
const SessionCookie = "saga_token"

// CSRFHeader is the header that a request authenticated by the session
// cookie must carry to act, holding CSRFToken of the cookie's secret.
const CSRFHeader = "X-Saga-CSRF"

// LoginPath is where the console's login form posts; the guard lets it
// through without a token (it is how a browser gets one) but, as every
// request that acts, only from the API's own origin.
const LoginPath = "/ui/login"

// CSRFToken is the anti-forgery token of a session: derived from the
// secret, so nothing is stored, and unknown to another origin, which can
// read neither the HttpOnly cookie nor the console's pages.
func CSRFToken(secret string) string {
	sum := sha256.Sum256([]byte("saga-csrf\x00" + secret))
	return hex.EncodeToString(sum[:16])
}

// Identify returns the token whose secret this is, if any.
func (t *Tokens) Identify(secret string) (Token, bool) {
	if !t.Enabled() {
		return Token{}, false
	}
	return t.lookup(secret)
}

// guard checks every request before the API's handlers:
//   - without tokens, or with hosts configured, the Host header must be
//     allowed by hosts (421), but for /healthz and /readyz, which probes
//     reach by any name: a page on a name rebound to the API's address
//     reads and acts on nothing;
//   - a POST must say Content-Type: application/json (415), which a
//     cross-origin form or text/plain request cannot, and must come from no
//     other origin than the API's own, by an allowed name when hosts are
//     checked (403): browsers' simple requests
//     cannot act; the console's login form is the one form allowed;
//   - with tokens on, every request but /healthz, /readyz, the login and
//     the console's static files needs a valid bearer token or session
//     cookie (401; a page of the console redirects to the login instead),
//     and a POST one of role operator (403); a POST authenticated by the
//     cookie also needs CSRFHeader (403).
//
// No CORS headers are ever sent, so browsers keep other origins out.
func guard(tokens *Tokens, hosts AllowedHosts, next http.Handler) http.Handler {
	checkHosts := hosts.checksHosts(tokens)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		open := probe || r.URL.Path == LoginPath || strings.HasPrefix(r.URL.Path, "/ui/static/")
		acts := r.Method != http.MethodGet && r.Method != http.MethodHead
		if checkHosts && !probe && !hosts.Allows(r.Host) {
			refuseHost(w, r.Host)
			return
		}
		if acts && !probe {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); r.URL.Path != LoginPath && (err != nil || mt != "application/json") {
				writeError(w, http.StatusUnsupportedMediaType, "a request that acts must send Content-Type: application/json")
				return
			}
			if origin := r.Header.Get("Origin"); origin != "" && !(checkHosts && hosts.allowsOrigin(origin, r.Host) || !checkHosts && sameOrigin(origin, r.Host)) {
				writeError(w, http.StatusForbidden, "requests from another origin are refused")
				return
			}
		}
		if !tokens.Enabled() || open {
			next.ServeHTTP(w, r)
			return
		}
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		fromCookie := false
		if !ok {
			if c, err := r.Cookie(SessionCookie); err == nil {
				secret, ok, fromCookie = c.Value, true, true
			}
		}
		secret = strings.TrimSpace(secret)
		tok, known := tokens.lookup(secret)
		if !ok || !known {
			if !acts && strings.HasPrefix(r.URL.Path, "/ui") {
				http.Redirect(w, r, LoginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="saga"`)
			writeError(w, http.StatusUnauthorized, "a valid bearer token is required")
			return
		}
		if acts && fromCookie && subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(CSRFToken(secret))) != 1 {
			writeError(w, http.StatusForbidden, "a request that acts with the session cookie must send "+CSRFHeader)
			return
		}
		if acts && tok.Role != RoleOperator {
			writeError(w, http.StatusForbidden, "token of "+tok.Identity+" may read, not act (role viewer)")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, tok.Identity)))
	})
}

func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host == host
}
