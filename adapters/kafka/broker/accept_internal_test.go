package broker

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingListener fails its first accepts with EMFILE, as a process out of
// file descriptors does, then hands out conns.
type failingListener struct {
	net.Listener
	mu       sync.Mutex
	failures int
	conns    chan net.Conn
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.failures > 0 {
		l.failures--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	l.mu.Unlock()
	conn, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return conn, nil
}

func (l *failingListener) Close() error { return nil }

// TestListenerOutOfFilesLogsAndGoesOn: accept errors (EMFILE) stopped the
// broker's accept loop without a log line. They are logged and the
// listener goes on accepting once descriptors are free again.
func TestListenerOutOfFilesLogsAndGoesOn(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	inner := &failingListener{failures: 3, conns: make(chan net.Conn, 1)}
	l := newBrokerListener(inner, nil)
	l.logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	defer l.Close()
	l.openToClients()
	client, server := net.Pipe()
	defer client.Close()
	inner.conns <- server
	conn, err := l.Accept()
	require.NoError(t, err, "kfake never sees the accept error, which would stop its loop")
	assert.Equal(t, server, conn)
	assert.EqualValues(t, 3, l.acceptFailures.Load())
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, logs.String(), "kafka listener cannot accept a connection")
	assert.Contains(t, logs.String(), "too many open files")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
