package audittest

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// update makes Golden rewrite the golden files: go test ./PKG -update.
var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Golden compares got with the golden file testdata/name of the test's
// package, or writes got there when the tests run with -update.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run the package's tests with -update to create %s", path)
	assert.Equal(t, string(want), string(got))
}
