package integration_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionCommands builds sagad and sagactl as a release does, stamping
// the version with the linker, and as a developer does, with nothing
// stamped; both print the version, commit, build time and Go version, and
// exit 0.
func TestVersionCommands(t *testing.T) {
	stamp := "-X main.version=v9.8.7 -X main.commit=0123456789abcdef0123456789abcdef01234567 -X main.date=2026-03-04T05:06:07Z"
	for _, cmd := range []string{"sagad", "sagactl"} {
		t.Run(cmd, func(t *testing.T) {
			dir := t.TempDir()
			stamped, plain := filepath.Join(dir, cmd+"-release"), filepath.Join(dir, cmd+"-dev")
			out, err := exec.Command("go", "build", "-trimpath", "-ldflags", stamp, "-o", stamped, "../cmd/"+cmd).CombinedOutput()
			require.NoError(t, err, string(out))
			out, err = exec.Command("go", "build", "-trimpath", "-o", plain, "../cmd/"+cmd).CombinedOutput()
			require.NoError(t, err, string(out))

			out, err = exec.Command(stamped, "version").CombinedOutput()
			require.NoError(t, err, "exit status 0 expected; output:\n%s", out)
			assert.Equal(t, "version: v9.8.7\n"+
				"commit: 0123456789abcdef0123456789abcdef01234567\n"+
				"built: 2026-03-04T05:06:07Z\n"+
				"go: "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n", string(out))

			out, err = exec.Command(plain, "version").CombinedOutput()
			require.NoError(t, err, "exit status 0 expected; output:\n%s", out)
			// Without stamps: devel, and a commit only when Go stamped VCS
			// settings (GOFLAGS=-buildvcs=false turns them off).
			assert.Regexp(t, regexp.MustCompile(`^version: devel\ncommit: (unknown|[0-9a-f]{40}( \(modified\))?( of \S+)?)\nbuilt: unknown\ngo: go\S+ \S+/\S+\n$`), string(out))
		})
	}
}
