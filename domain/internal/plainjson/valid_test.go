package plainjson_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sagaengine/saga/domain/internal/plainjson"
)

var validSeeds = []string{``, ` `, `{}`, `[]`, `{ }`, `[ ]`, `{"a":1}`, ` {"a" : [1, 2.5e-3, -0, "x\u00e9\n", true, false, null, {}]} `,
	`{"a":1,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`, `01`, `-`, `-0`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`,
	`.5`, `+1`, `1x`, `tru`, `truex`, `nul`, `"\x"`, `"\u12"`, `"\u12g4"`, `"\uABCD"`, "\"\x01\"", "\"\xff\"", `"abc`, `"a\"`,
	`{"a":[}`, `[{]}`, `]`, `}`, `1 2`, `"a" "b"`, "\t\n\r1\t", `{"a":{"b":{"c":[[[]]]}}}`, `[[[[`, `{"a":"}"}`, `["\\"]`}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := plainjson.Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid says %v", s, got, want)
		}
	}
	for _, depth := range []int{9999, 10000, 10001} {
		for _, open := range []string{"[", `{"a":`} {
			closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
			s := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(closing, depth))
			if got, want := plainjson.Valid(s), json.Valid(s); got != want {
				t.Errorf("nested %d deep in %s: Valid %v, json.Valid %v", depth, open, got, want)
			}
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := plainjson.Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	data := []byte(`{"orderId":"order-000123","customer":"c-17","amount":129.5,"items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"note":"leave at the door"}`)
	b.Run("plainjson", func(b *testing.B) {
		for b.Loop() {
			plainjson.Valid(data)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			json.Valid(data)
		}
	})
}
