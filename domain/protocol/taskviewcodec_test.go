package protocol_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// The task view stores the JSON AppendTaskView and AppendTaskSummary write
// and the API serves it as stored: it must be what json.Marshal writes,
// byte for byte.

// checkTaskViewEncodesAsMarshal fails unless AppendTaskView and
// AppendTaskSummary append to a buffer what json.Marshal gives for v and
// for v.Summary(), and fail exactly when json.Marshal does.
func checkTaskViewEncodesAsMarshal(t *testing.T, v *protocol.TaskView) {
	t.Helper()
	check := func(what string, want []byte, wantErr error, appendJSON func([]byte, *protocol.TaskView) ([]byte, error)) {
		t.Helper()
		got, gotErr := appendJSON([]byte("prefix"), v)
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("%s: json.Marshal error %v, the encoder's %v", what, wantErr, gotErr)
		}
		if wantErr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%s:\n json.Marshal %s\n the encoder  %s", what, want, got[len("prefix"):])
		}
	}
	want, err := json.Marshal(v)
	check("view", want, err, protocol.AppendTaskView)
	if v != nil && !slicesContainNil(v.Steps) { // Summary needs every step
		want, err = json.Marshal(v.Summary())
		check("summary", want, err, protocol.AppendTaskSummary)
	}
}

func slicesContainNil(steps []*protocol.StepView) bool {
	for _, s := range steps {
		if s == nil {
			return true
		}
	}
	return false
}

func TestAppendTaskViewEncodesAsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 11, 26, 5, 0, 1, 123456789, time.UTC)
	tricky := []string{"", "a b", "x<y>z", "a&b", `q"t`, `back\slash`, "line\nfeed\r", "tab\t", "\b\f", "\x00\x01\x1f\x7f",
		"é", "日本語", "\u2028 and \u2029", "\xff", "a\xc3", "\xed\xa0\x80", "\ufffd", "emoji 😀", strings.Repeat("z", 300)}
	zones := []*time.Location{time.UTC, time.FixedZone("CET", 3600), time.FixedZone("west", -(9*3600 + 30*60)),
		time.FixedZone("seconds", 3600+7), time.FixedZone("far", 30*3600), time.Local}
	base := func() *protocol.TaskView {
		return protocol.ViewOf(exampleTask())
	}
	cases := map[string]func(v *protocol.TaskView){
		"example":    func(v *protocol.TaskView) {},
		"nil steps":  func(v *protocol.TaskView) { v.Steps = nil },
		"no steps":   func(v *protocol.TaskView) { v.Steps = []*protocol.StepView{} },
		"a nil step": func(v *protocol.TaskView) { v.Steps = append(v.Steps, nil) },
		"empty step": func(v *protocol.TaskView) { v.Steps = []*protocol.StepView{{}} },
		"zero view":  func(v *protocol.TaskView) { *v = protocol.TaskView{} },
		"zero times": func(v *protocol.TaskView) { v.SubmittedAt, v.UpdatedAt = time.Time{}, time.Time{} },
		"large ints": func(v *protocol.TaskView) {
			v.Revision, v.LeaseTerm, v.WorkflowVersion = math.MaxInt64, math.MinInt64, math.MinInt
		},
		"negative ints":    func(v *protocol.TaskView) { v.Revision, v.Steps[0].Attempt, v.Steps[0].Tries = -1, -2, -3 },
		"year 10000":       func(v *protocol.TaskView) { v.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"year -1":          func(v *protocol.TaskView) { v.SubmittedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) },
		"result bytes set": func(v *protocol.TaskView) { v.Steps[1].ResultBytes = 12 },
		"empty result":     func(v *protocol.TaskView) { v.Steps[0].Result = json.RawMessage{} },
		"invalid result":   func(v *protocol.TaskView) { v.Steps[0].Result = json.RawMessage(`{"a":`) },
		"every pointer": func(v *protocol.TaskView) {
			s := v.Steps[1]
			s.NotBefore, s.DispatchedAt, s.WaitingSince, s.DelayedUntil = &at, &at, &at, &at
			s.Awaiting = &domain.AwaitingFor{Topic: "t<", Value: "v\n", Until: at}
			s.Compensation = &protocol.LegView{CompleteBy: &at, DispatchedAt: &at, WaitingSince: &at, NotBefore: &at}
		},
		"zero pointed times": func(v *protocol.TaskView) {
			var zero time.Time
			v.Steps[1].DelayedUntil, v.Steps[1].CompleteBy = &zero, &zero
			v.Steps[1].Awaiting = &domain.AwaitingFor{}
		},
	}
	for i, s := range tricky {
		cases[fmt.Sprintf("string %d %q", i, s)] = func(v *protocol.TaskView) {
			v.ID, v.Workflow, v.State, v.Priority, v.Reason = s, s, domain.TaskState(s), domain.Priority(s), s
			st := v.Steps[0]
			st.Name, st.Agent, st.LastError, st.LockedBy, st.WaitReason, st.LastReturn, st.Instance = s, s, s, s, s, s, s
			st.State, st.LastFailure = domain.StepState(s), domain.FailureKind(s)
			st.Compensation.LastError, st.Compensation.IdempotencyKey = s, s
		}
		cases[fmt.Sprintf("string %d %q in a result", i, s)] = func(v *protocol.TaskView) {
			raw, err := json.Marshal(map[string]string{s: s})
			require.NoError(t, err)
			v.Steps[0].Result = raw
			// encoding/json reads a raw result's strings as they are, <>& and
			// U+2028 unescaped, and invalid UTF-8 too.
			v.Steps[1].Result = json.RawMessage(` { "k" : "` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`,
				"\b", `\b`, "\f", `\f`, "\x00", `\u0000`, "\x01", `\u0001`, "\x1f", `\u001f`).Replace(s) + "\" ,\n\t\"n\":[ 1 , 2.5e3 ,true,null ] }\r\n")
		}
	}
	for _, z := range zones {
		cases["zone "+z.String()] = func(v *protocol.TaskView) {
			v.SubmittedAt, v.UpdatedAt = at.In(z), at.Add(-at.Sub(at.Truncate(time.Second))).In(z)
			v.Steps[1].CompleteBy = new(at.Add(time.Millisecond).In(z))
		}
	}
	for _, raw := range []string{`1`, `-0.5e-7`, `"s"`, `null`, `true`, `[]`, `{}`, `[ ]`, "\t[1,\n{}]", `{"a":"\u003c\u2028"}`,
		`12345678901234567890123`, `{"a":1}x`, `{"a":1,}`, `nul`, `"`, ` `} {
		cases["result "+raw] = func(v *protocol.TaskView) { v.Steps[0].Result = json.RawMessage(raw) }
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			v := base()
			change(v)
			checkTaskViewEncodesAsMarshal(t, v)
		})
	}
	checkTaskViewEncodesAsMarshal(t, nil)
}

// fillDistinct sets every field reachable from v (structs, pointers,
// slices of two elements) to a value no other field has, so that a field
// the encoder leaves out, writes twice or writes under another field's
// name shows.
func fillDistinct(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillDistinct(v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			at := time.Date(2026, 11, 26, 5, 0, *n, *n*1001, time.FixedZone("", (*n%24)*3600-11*3600))
			v.Set(reflect.ValueOf(at))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			fillDistinct(v.Field(i), n)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(fmt.Sprintf(`{ "x%d": [%d, "<&>"] }`, *n, *n)))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fillDistinct(v.Index(0), n)
		fillDistinct(v.Index(1), n)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d<\"é\u2028", *n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n) * 1000003)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n) * 1000003)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		key, value := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillDistinct(key, n)
		fillDistinct(value, n)
		v.SetMapIndex(key, value)
	default:
		panic("fillDistinct: add " + v.Kind().String())
	}
}

// TestAppendTaskViewWritesEveryField fails when a field is added to
// TaskView, StepView, LegView or what they hold and AppendTaskView is not
// taught to write it: every field is set, to a value json.Marshal writes.
func TestAppendTaskViewWritesEveryField(t *testing.T) {
	var v protocol.TaskView
	n := 0
	fillDistinct(reflect.ValueOf(&v).Elem(), &n)
	requireNoZeroField(t, reflect.ValueOf(v), "TaskView")
	checkTaskViewEncodesAsMarshal(t, &v)
	buf := make([]byte, 0, 16<<10)
	allocs := testing.AllocsPerRun(10, func() {
		b, _ := protocol.AppendTaskView(buf[:0], &v)
		_, _ = protocol.AppendTaskSummary(b, &v)
	})
	require.Zero(t, allocs, "the encoder wrote it, not json.Marshal, which allocates")

	full, err := json.Marshal(&v)
	require.NoError(t, err)
	var back protocol.TaskView
	require.NoError(t, json.Unmarshal(full, &back))
	requireNoZeroField(t, reflect.ValueOf(back), "TaskView decoded") // json.Marshal wrote every field
}

// requireNoZeroField fails if a field reachable from v is zero.
func requireNoZeroField(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	require.False(t, v.IsZero(), "%s is zero", path)
	switch v.Kind() {
	case reflect.Pointer:
		requireNoZeroField(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			requireNoZeroField(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			return
		}
		for i := 0; i < v.Len(); i++ {
			requireNoZeroField(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func TestAppendTaskViewAllocatesNothingIntoRoom(t *testing.T) {
	v := protocol.ViewOf(exampleTask())
	v.Steps[0].LastError = `Post "http://inventory/reserve": dial tcp: connection refused`
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		b, _ := protocol.AppendTaskView(buf[:0], v)
		_, _ = protocol.AppendTaskSummary(b, v)
	}); n != 0 {
		t.Fatalf("AppendTaskView and AppendTaskSummary allocated %v times a task", n)
	}
}

func FuzzAppendTaskView(f *testing.F) {
	f.Add("o-1", "payment", "late", []byte(`{"paymentId":"p-1"}`), int64(1795000000), int64(123456789), 60, int64(7), uint8(0))
	f.Add("", "", "", []byte(nil), int64(0), int64(0), 0, int64(0), uint8(0xff))
	f.Add("x<y>&z", "\u2028\xff", "a\"b\\c\n\x01", []byte(" {\"a\" :\n[1, \"<\u2029>\"]}\t"), int64(-62135596800), int64(1), -570, int64(math.MaxInt64), uint8(0x55))
	f.Add("日本", "é", "\t", []byte(`{"a":`), int64(253402300800), int64(999999999), 1800, int64(math.MinInt64), uint8(0xaa))
	f.Add("s", "t", "u", []byte(`[]`), int64(1), int64(0), 24*60, int64(-1), uint8(3))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, result []byte, sec, nsec int64, zoneMinutes int, n int64, flags uint8) {
		zone := time.FixedZone(s2, zoneMinutes*60+int(flags%3)-1)
		if flags&0x80 == 0 {
			zone = time.FixedZone(s2, zoneMinutes*60)
		}
		at := time.Unix(sec, nsec).In(zone)
		leg := protocol.LegView{State: domain.StepState(s1), Attempt: int(n), LockedBy: s2, FailureCount: int(n >> 3), LastError: s3,
			LastFailure: domain.FailureKind(s2), IdempotencyKey: s1 + s3, Tries: int(flags), Instance: s3}
		if flags&1 != 0 {
			leg.CompleteBy, leg.DispatchedAt = &at, &at
		}
		if flags&2 != 0 {
			leg.NotBefore, leg.WaitingSince, leg.WaitReason = &at, &at, s1
		}
		step := &protocol.StepView{Name: s1, Agent: s2, LegView: leg, Result: result, EndedRevision: n}
		if flags&4 != 0 {
			step.Compensation = &leg
			step.Awaiting = &domain.AwaitingFor{Topic: s3, Value: s1, Until: at}
		}
		if flags&8 != 0 {
			step.DelayedUntil = &at
			step.ResultBytes = int(n)
		}
		v := &protocol.TaskView{ID: s1, Workflow: s2, WorkflowVersion: int(flags), State: domain.TaskState(s3), Priority: domain.Priority(s2),
			ReplyTo: s3, Reason: s3, FailedStep: s1, Compensating: flags&16 != 0, CancelledBy: s2, TraceParent: s1, LeaseTerm: n,
			Revision: -n, SubmittedAt: at, UpdatedAt: at.Add(time.Duration(n))}
		switch {
		case flags&32 != 0:
			v.Steps = []*protocol.StepView{step, {Name: s2}, step}
		case flags&64 != 0:
			v.Steps = []*protocol.StepView{}
		}
		checkTaskViewEncodesAsMarshal(t, v)
	})
}

func BenchmarkAppendTaskView(b *testing.B) {
	v := protocol.ViewOf(exampleTask())
	v.Steps[1].Result = json.RawMessage(`{"shipmentId":"s-000123","carrier":"dhl"}`)
	v.Steps[0].LastError = `Post "http://inventory/reserve": dial tcp: connection refused`
	b.Run("AppendTaskView+Summary", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = protocol.AppendTaskView(buf[:0], v)
			buf, _ = protocol.AppendTaskSummary(buf, v)
		}
	})
	b.Run("json.Marshal+Summary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(v)
			_, _ = json.Marshal(v.Summary())
		}
	})
}
