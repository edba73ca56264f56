package main

import (
	"net"
	"testing"

	"github.com/softrdma/softrdma/examples/internal/readme"
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
// under "## Sockets over RDMA") is this example's README lines.
func TestREADMEShowsThisCode(t *testing.T) { readme.Check(t, "Sockets over RDMA") }
