package demo_test

import (
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
