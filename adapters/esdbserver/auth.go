package esdbserver

import (
	"bufio"
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// AdminsGroup is the group whose members may read $all and system streams
// ($-prefixed, stream metadata included), write system streams and delete
// or tombstone streams, as EventStoreDB's $admins.
const AdminsGroup = "$admins"

// The default account of a secure server given no users file: EventStoreDB's
// own default, known to everyone, so the server says loudly that it runs
// with it.
const (
	DefaultAdminUser     = "admin"
	DefaultAdminPassword = "changeit"
)

// pbkdf2Iterations is the work factor of stored password hashes.
const pbkdf2Iterations = 210_000

// hashScheme prefixes stored password hashes.
const hashScheme = "pbkdf2-sha256"

// ErrBadUsersFile is the cause of every problem LoadUsers reports.
var ErrBadUsersFile = errors.New("bad users file")

// User is an account of the event store.
type User struct {
	Name string
	// Hash is the stored form of the password (HashPassword).
	Hash   string
	Groups []string
}

// Admin reports whether the user is in AdminsGroup.
func (u User) Admin() bool { return slices.Contains(u.Groups, AdminsGroup) }

// HashPassword returns the stored form of a password:
// pbkdf2-sha256$ITERATIONS$SALT$KEY, salt and key in unpadded base64.
func HashPassword(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", errors.Wrap(err, "password salt")
	}
	key, err := pbkdf2.Key(sha256.New, password, salt, pbkdf2Iterations, 32)
	if err != nil {
		return "", errors.Wrap(err, "hash password")
	}
	enc := base64.RawStdEncoding
	return fmt.Sprintf("%s$%d$%s$%s", hashScheme, pbkdf2Iterations, enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// checkPassword reports whether password matches a stored hash.
func checkPassword(hash, password string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 4 || parts[0] != hashScheme {
		return false
	}
	iter, err := strconv.Atoi(parts[1])
	if err != nil || iter <= 0 {
		return false
	}
	enc := base64.RawStdEncoding
	salt, err1 := enc.DecodeString(parts[2])
	want, err2 := enc.DecodeString(parts[3])
	if err1 != nil || err2 != nil {
		return false
	}
	got, err := pbkdf2.Key(sha256.New, password, salt, iter, len(want))
	return err == nil && subtle.ConstantTimeCompare(got, want) == 1
}

// FormatUser is a users-file line: NAME:HASH:GROUP,GROUP.
func FormatUser(u User) string { return u.Name + ":" + u.Hash + ":" + strings.Join(u.Groups, ",") }

// LoadUsers reads a users file: one user a line, NAME:HASH[:GROUPS], HASH
// as HashPassword makes it (sagad eventstore-user writes lines), GROUPS
// comma-separated ($admins for administrators); blank lines and lines
// starting with # are skipped.
func LoadUsers(path string) ([]User, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Wrap(err, "open users file")
	}
	defer f.Close()
	var users []User
	seen := map[string]bool{}
	lines := bufio.NewScanner(f)
	for n := 1; lines.Scan(); n++ {
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) < 2 || len(fields) > 3 || fields[0] == "" || !strings.HasPrefix(fields[1], hashScheme+"$") {
			return nil, errors.Wrapf(ErrBadUsersFile, "%s:%d: want NAME:%s$...[:GROUPS]", path, n, hashScheme)
		}
		if seen[fields[0]] {
			return nil, errors.Wrapf(ErrBadUsersFile, "%s:%d: user %s appears twice", path, n, fields[0])
		}
		seen[fields[0]] = true
		u := User{Name: fields[0], Hash: fields[1]}
		if len(fields) == 3 && fields[2] != "" {
			u.Groups = strings.Split(fields[2], ",")
		}
		users = append(users, u)
	}
	if err := lines.Err(); err != nil {
		return nil, errors.Wrap(err, "read users file")
	}
	if len(users) == 0 {
		return nil, errors.Wrapf(ErrBadUsersFile, "%s has no user", path)
	}
	return users, nil
}

// authenticator checks the HTTP basic credentials every call of a secure
// server carries, and what the caller may do.
type authenticator struct {
	users map[string]User
	// verified remembers the SHA-256 of each user's password once checked
	// against its slow hash, so that later calls cost a hash, not a key
	// derivation.
	mu       sync.Mutex
	verified map[string][32]byte
}

func newAuthenticator(users []User) *authenticator {
	a := &authenticator{users: map[string]User{}, verified: map[string][32]byte{}}
	for _, u := range users {
		a.users[u.Name] = u
	}
	return a
}

type userKey struct{}

// authenticate returns the caller's user, or Unauthenticated.
func (a *authenticator) authenticate(ctx context.Context) (User, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) == 0 {
		return User{}, status.Error(codes.Unauthenticated, "authentication required: this event store refuses anonymous calls; connect over TLS with a user and password (esdb://USER:PASSWORD@HOST:PORT?tls=true)")
	}
	encoded, ok := strings.CutPrefix(values[0], "Basic ")
	raw, err := base64.StdEncoding.DecodeString(encoded)
	name, password, ok2 := strings.Cut(string(raw), ":")
	if !ok || err != nil || !ok2 {
		return User{}, status.Error(codes.Unauthenticated, "authentication required: malformed authorization header, want Basic credentials")
	}
	bad := status.Error(codes.Unauthenticated, "bad user name or password")
	u, known := a.users[name]
	sum := sha256.Sum256([]byte(password))
	a.mu.Lock()
	prev, cached := a.verified[name]
	a.mu.Unlock()
	switch {
	case !known:
		return User{}, bad
	case cached && subtle.ConstantTimeCompare(prev[:], sum[:]) == 1:
		return u, nil
	case !checkPassword(u.Hash, password):
		return User{}, bad
	}
	a.mu.Lock()
	a.verified[name] = sum
	a.mu.Unlock()
	return u, nil
}

// methods callable without credentials: discovery, as EventStoreDB allows.
var anonymousMethods = map[string]bool{
	"/event_store.client.server_features.ServerFeatures/GetSupportedMethods": true,
}

func denied(u User, what string) error {
	return status.Errorf(codes.PermissionDenied, "access denied: user %s may not %s (members of %s only)", u.Name, what, AdminsGroup)
}

// systemStream reports whether a stream is reserved to administrators:
// $-prefixed streams, which include the metadata streams $$NAME.
func systemStream(name string) bool { return strings.HasPrefix(name, "$") }

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if anonymousMethods[info.FullMethod] {
		return handler(ctx, req)
	}
	u, err := a.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	switch r := req.(type) {
	case *streams.DeleteReq:
		if !u.Admin() {
			return nil, denied(u, "delete stream "+string(r.GetOptions().GetStreamIdentifier().GetStreamName()))
		}
	case *streams.TombstoneReq:
		if !u.Admin() {
			return nil, denied(u, "tombstone stream "+string(r.GetOptions().GetStreamIdentifier().GetStreamName()))
		}
	}
	return handler(context.WithValue(ctx, userKey{}, u), req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if anonymousMethods[info.FullMethod] {
		return handler(srv, ss)
	}
	u, err := a.authenticate(ss.Context())
	if err != nil {
		if info.IsClientStream {
			drainRefused(ss)
		}
		return err
	}
	return handler(srv, &checkedStream{ServerStream: ss, user: u, ctx: context.WithValue(ss.Context(), userKey{}, u)})
}

// drainRefused reads what a refused client-streaming call (an append) has
// already sent, up to a bound, before the refusal is returned: a client
// whose send meets a stream the server has closed sees a bare EOF and
// reports that instead of the server's Unauthenticated (the official Go
// client does). The bounds (messages and time) keep a refused caller from
// making the server read without end; the time is generous so that a
// client slowed by a busy machine still hears the refusal.
func drainRefused(ss grpc.ServerStream) {
	const maxMessages, maxWait = 64, 5 * time.Second
	ctx, cancel := context.WithTimeout(ss.Context(), maxWait)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range maxMessages {
			var m emptypb.Empty
			if err := ss.RecvMsg(&m); err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// checkedStream checks the first message of a read or an append, which
// names the stream, against the caller's rights. Its context carries the
// caller's user, for BatchAppend, whose every append names a stream of its
// own and is checked by the handler.
type checkedStream struct {
	grpc.ServerStream
	user    User
	ctx     context.Context
	checked bool
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.checked {
		return err
	}
	s.checked = true
	if s.user.Admin() {
		return nil
	}
	switch r := m.(type) {
	case *streams.ReadReq:
		switch so := r.GetOptions().GetStreamOption().(type) {
		case *streams.ReadReq_Options_All:
			return denied(s.user, "read $all")
		case *streams.ReadReq_Options_Stream:
			if name := string(so.Stream.GetStreamIdentifier().GetStreamName()); systemStream(name) {
				return denied(s.user, "read system stream "+name)
			}
		}
	case *streams.AppendReq:
		if name := string(r.GetOptions().GetStreamIdentifier().GetStreamName()); systemStream(name) {
			// An append is client-streaming: read what the client sends
			// before refusing, or its next send meets a closed stream and
			// it reports a bare EOF instead of the refusal.
			drainRefused(s.ServerStream)
			return denied(s.user, "write system stream "+name)
		}
	}
	return nil
}
