package integration_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// shopEnv makes the test binary run the shop service: the remote services
// of a user's own workflow, in a process of their own.
const shopEnv = "SAGA_TEST_SHOP"

// shopState is what the shop service did, for a test to check.
type shopState struct {
	Reservations map[string]string `json:"reservations"` // idempotency key to reservation id
	Payments     map[string]string `json:"payments"`     // idempotency key to payment id
	Shipments    map[string]string `json:"shipments"`
	Emails       map[string]int    `json:"emails"`
	// Refunds and Releases are the ids they were asked to undo, in order.
	Refunds  []string `json:"refunds"`
	Releases []string `json:"releases"`
	// Refused lists undo calls that named an id the shop never issued.
	Refused []string `json:"refused"`
	// Calls is every call in order: "path key".
	Calls []string `json:"calls"`
}

// runShop serves the shop on a loopback port and prints its URL. Its
// services honour the Idempotency-Key header, and its undo actions check
// that they are asked to undo something they did.
func runShop() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	st := shopState{Reservations: map[string]string{}, Payments: map[string]string{}, Shipments: map[string]string{}, Emails: map[string]int{}}
	type body struct {
		Order struct {
			Amount         float64 `json:"amount"`
			RefuseShipping bool    `json:"refuseShipping"`
		} `json:"order"`
		PaymentID     string `json:"paymentId"`
		ReservationID string `json:"reservationId"`
	}
	read := func(r *http.Request) (body, string) {
		var b body
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(raw, &b)
		return b, r.Header.Get("Idempotency-Key")
	}
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reserve", func(w http.ResponseWriter, r *http.Request) {
		_, key := read(r)
		mu.Lock()
		defer mu.Unlock()
		st.Calls = append(st.Calls, "reserve "+key)
		if _, ok := st.Reservations[key]; !ok {
			st.Reservations[key] = fmt.Sprintf("res-%d", len(st.Reservations)+1)
		}
		reply(w, map[string]string{"reservationId": st.Reservations[key]})
	})
	mux.HandleFunc("POST /charge", func(w http.ResponseWriter, r *http.Request) {
		b, key := read(r)
		mu.Lock()
		defer mu.Unlock()
		st.Calls = append(st.Calls, "charge "+key)
		if _, ok := st.Payments[key]; !ok {
			st.Payments[key] = fmt.Sprintf("pay-%d-%.2f", len(st.Payments)+1, b.Order.Amount)
		}
		reply(w, map[string]any{"paymentId": st.Payments[key], "amount": b.Order.Amount})
	})
	mux.HandleFunc("POST /ship/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, key := read(r)
		mu.Lock()
		defer mu.Unlock()
		st.Calls = append(st.Calls, "ship "+key)
		if b.Order.RefuseShipping {
			http.Error(w, "we do not ship there", http.StatusUnprocessableEntity)
			return
		}
		st.Shipments[key] = "track-" + r.PathValue("id")
		reply(w, map[string]string{"trackingId": st.Shipments[key]})
	})
	mux.HandleFunc("POST /email", func(w http.ResponseWriter, r *http.Request) {
		_, key := read(r)
		mu.Lock()
		defer mu.Unlock()
		st.Calls = append(st.Calls, "email "+key)
		st.Emails[key]++
		w.WriteHeader(http.StatusNoContent)
	})
	undo := func(kind string, issued func() map[string]string, field func(body) string, done *[]string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, key := read(r)
			mu.Lock()
			defer mu.Unlock()
			st.Calls = append(st.Calls, kind+" "+key)
			id := field(b)
			for _, known := range issued() {
				if known == id {
					*done = append(*done, id)
					reply(w, map[string]string{"undone": id})
					return
				}
			}
			st.Refused = append(st.Refused, kind+" "+id)
			http.Error(w, "no such "+kind+" id "+id, http.StatusUnprocessableEntity)
		}
	}
	mux.HandleFunc("POST /refund", undo("refund", func() map[string]string { return st.Payments }, func(b body) string { return b.PaymentID }, &st.Refunds))
	mux.HandleFunc("POST /release", undo("release", func() map[string]string { return st.Reservations }, func(b body) string { return b.ReservationID }, &st.Releases))
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		reply(w, st)
	})
	fmt.Println("http://" + lis.Addr().String())
	_ = http.Serve(lis, mux)
}

// startShop runs the shop service as a separate process and returns its URL.
func startShop(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), shopEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "the shop service did not start")
	url := strings.TrimSpace(lines.Text())
	require.True(t, strings.HasPrefix(url, "http://"), url)
	return url
}

// shopStateOf reads what the shop service did.
func shopStateOf(t *testing.T, url string) shopState {
	t.Helper()
	resp, err := http.Get(url + "/state")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st shopState
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}
