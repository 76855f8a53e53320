package demo_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
)

// TestServiceCountsItsLoad makes eight calls at once to a slow service:
// it saw eight at once, and eight begin within a second.
func TestServiceCountsItsLoad(t *testing.T) {
	s := demo.NewService("payment", nil)
	s.Latency = 200 * time.Millisecond
	require.NoError(t, s.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = s.Close() })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/charge", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "k-"+strconv.Itoa(i))
			resp, err := http.DefaultClient.Do(req)
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 8, s.PeakConcurrent())
	assert.Equal(t, 8, s.MostCallsWithin(time.Second))
	s.ResetPeak()
	assert.Equal(t, 0, s.PeakConcurrent())
}

// TestServiceKeepsKeysForItsRetentionOnly: a repeated key is answered from
// the first call while it is kept, and keys older than KeyRetention are
// forgotten, so a long run does not grow the service without bound.
func TestServiceKeepsKeysForItsRetentionOnly(t *testing.T) {
	var body []byte
	call := func(s *demo.Service, key string) (replayed bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/charge", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp.Header.Get("Idempotent-Replayed") == "true"
	}
	kept := demo.NewService("payment", nil)
	require.NoError(t, kept.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = kept.Close() })
	assert.False(t, call(kept, "k-1"))
	first := body
	assert.True(t, call(kept, "k-1"), "a repeat within the retention is a replay")
	assert.Equal(t, string(first), string(body), "a replay answers what the first call did")
	assert.Equal(t, map[string]int{"charge/k-1": 1}, kept.Effects())

	brief := demo.NewService("payment", nil)
	brief.KeyRetention = time.Nanosecond
	require.NoError(t, brief.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = brief.Close() })
	for i := range 200 {
		call(brief, "k-"+strconv.Itoa(i))
	}
	assert.Equal(t, 1, brief.KeysKept(), "keys past their retention are forgotten")
	assert.False(t, call(brief, "k-0"), "a key repeated after its retention takes effect again")
}

// TestServiceAnswersWithItsNameActionKeyAndTime pins the answer's bytes: the
// members in the order of their names, as the map it was once made from
// was written, with a key json.Marshal escapes.
func TestServiceAnswersWithItsNameActionKeyAndTime(t *testing.T) {
	s := demo.NewService("payment", nil)
	require.NoError(t, s.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = s.Close() })
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/charge", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", `o-1/pay<"&>`)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	var answer struct{ At time.Time }
	require.NoError(t, json.Unmarshal(body, &answer))
	want, _ := json.Marshal(map[string]any{"service": "payment", "action": "charge", "key": `o-1/pay<"&>`, "at": answer.At})
	assert.Equal(t, string(want), string(body))
	assert.Equal(t, time.UTC, answer.At.Location())
}
