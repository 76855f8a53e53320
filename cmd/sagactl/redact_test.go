package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMalformedConnectionStringIsRedacted runs sagactl with event store
// connection strings a URL parser misreads: neither its usage (which shows
// $SAGA_EVENTSTORE as the default) nor its errors show the password.
func TestMalformedConnectionStringIsRedacted(t *testing.T) {
	for _, connection := range []string{
		"esdb://admin:hun#ter2@127.0.0.1:1?tls=false",
		"esdb://admin:hun ter2@127.0.0.1:1?tls=false",
		"esdb:/admin:hunter2@127.0.0.1:1?tls=false",
	} {
		for _, args := range [][]string{{"watch", "o-1", "--timeout", "5s"}, {"audit", "o-1"}, {"watch", "-h"}} {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "SAGACTL_TEST_MAIN=1", "SAGA_CONFIG="+os.DevNull, "SAGA_EVENTSTORE="+connection)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run()
			assert.Contains(t, out.String(), "admin:xxxxx@", "%v", args)
			assert.NotContains(t, out.String(), "hun", "%v with %s", args, connection)
			assert.NotContains(t, out.String(), "ter2", "%v with %s", args, connection)
		}
	}
}
