package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestStampedValuesWin(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "aaaa"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}}}
	got := get(bi, "v0.2.0", "bbbb", "2026-02-03T04:05:06Z")
	if got.Version != "v0.2.0" || got.Commit != "bbbb" || got.BuildTime != "2026-02-03T04:05:06Z" || got.GoVersion != "go1.26.8" {
		t.Fatalf("got %+v", got)
	}
}

func TestBuildInfoFillsTheRest(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "aaaa"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := get(bi, "", "", "")
	if got.Version != "v0.1.0" || got.Commit != "aaaa" || !got.Modified || got.CommitTime != "2026-01-02T03:04:05Z" || got.BuildTime != "" {
		t.Fatalf("got %+v", got)
	}
	s := got.String()
	for _, want := range []string{"version: v0.1.0\n", "commit: aaaa (modified) of 2026-01-02T03:04:05Z\n", "built: unknown\n", "go: "} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
}

func TestNothingKnownIsDevel(t *testing.T) {
	got := get(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "", "")
	if got.Version != "devel" || !strings.Contains(got.String(), "commit: unknown\n") {
		t.Fatalf("got %+v", got)
	}
}
