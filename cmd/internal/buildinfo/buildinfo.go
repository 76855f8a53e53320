// Package buildinfo tells which build of saga a binary is, for the version
// subcommands of sagad and sagactl.
//
// Each command keeps three variables the release build stamps with the
// linker (the Dockerfile does):
//
//	go build -ldflags "-X main.version=v0.2.0 -X main.commit=$(git rev-parse HEAD) -X main.date=$(date -u +%FT%TZ)"
//
// and passes them to Get. What the linker did not stamp comes from the
// binary's own build information: the module version that go install
// records, and the VCS settings Go stamps into a binary built in a git
// checkout (none with -buildvcs=false, or in a container without .git).
//
// This package is internal to saga's commands.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info describes one build.
type Info struct {
	Version    string // v0.2.0, or devel
	Commit     string // full hash, or "" when unknown
	Modified   bool   // built from a working tree with uncommitted changes
	CommitTime string // RFC 3339, or "" when unknown
	BuildTime  string // RFC 3339, or "" when unknown
	GoVersion  string
	Platform   string // GOOS/GOARCH
}

// Get is this binary's build information; version, commit and date are
// what the linker stamped, "" for none.
func Get(version, commit, date string) Info {
	bi, _ := debug.ReadBuildInfo()
	return get(bi, version, commit, date)
}

func get(bi *debug.BuildInfo, version, commit, date string) Info {
	info := Info{Version: version, Commit: commit, BuildTime: date, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				info.CommitTime = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	return info
}

// String is what the version subcommands print: "key: value" lines.
func (i Info) String() string {
	unknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	commit := unknown(i.Commit)
	if i.Modified {
		commit += " (modified)"
	}
	if i.CommitTime != "" {
		commit += " of " + i.CommitTime
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version: %s\n", i.Version)
	fmt.Fprintf(&b, "commit: %s\n", commit)
	fmt.Fprintf(&b, "built: %s\n", unknown(i.BuildTime))
	fmt.Fprintf(&b, "go: %s %s\n", i.GoVersion, i.Platform)
	return b.String()
}
