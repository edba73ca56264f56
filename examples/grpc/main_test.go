package main

import (
	"net"
	"testing"
)

func TestGRPCOverRDMA(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 74, 1)})
	if err != nil {
		t.Skip(err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	if err := run("127.0.74.1", "127.0.74.2", port, 5); err != nil {
		t.Fatal(err)
	}
}
