package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/softrdma/softrdma/examples/internal/readme"
)

// TestRun runs the example on two loopback addresses of this process's
// own (on Linux all of 127.0.0.0/8 is loopback), so that it does not
// collide with a softrdma bench on 127.0.0.2.
func TestRun(t *testing.T) {
	k := os.Getpid()%200 + 20
	if err := run(fmt.Sprintf("127.%d.8.2", k), fmt.Sprintf("127.%d.8.3", k)); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEShowsThisCode: the README's first Go example is this
// example's README lines.
func TestREADMEShowsThisCode(t *testing.T) { readme.Check(t, "") }
