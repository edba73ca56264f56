package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
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

// TestREADMEShowsThisCode: the README's Go example is the code between
// "README begin" and "README end" here, line for line, so it compiles.
func TestREADMEShowsThisCode(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		switch strings.TrimSpace(l) {
		case "// README begin":
			in = true
		case "// README end":
			in = false
		default:
			if in {
				want = append(want, strings.TrimPrefix(l, "\t"))
			}
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README.md has no ```go block")
	}
	got := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README.md's Go example differs from examples/quickstart/main.go's README lines; README:\n%s\nmain.go:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
