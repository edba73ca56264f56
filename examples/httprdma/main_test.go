package main

import (
	"net"
	"os"
	"strings"
	"testing"
)

func TestHTTPOverRDMA(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 73, 1)})
	if err != nil {
		t.Skip(err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	if err := run("127.0.73.1", "127.0.73.2", port, 5); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEShowsThisCode: the README's rdmanet example (the Go block
// under "## Sockets over RDMA") is the code between "README begin" and
// "README end" here, line for line, so it compiles.
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
	_, section, ok := strings.Cut(string(readme), "\n## Sockets over RDMA\n")
	var block string
	if ok {
		_, block, ok = strings.Cut(section, "```go\n")
	}
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README.md has no ```go block under \"## Sockets over RDMA\"")
	}
	got := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README.md's rdmanet example differs from examples/httprdma/main.go's README lines; README:\n%s\nmain.go:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
