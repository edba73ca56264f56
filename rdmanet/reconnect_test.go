package rdmanet

import (
	"io"
	"net"
	"testing"
)

// rstream's pattern: one listener, a connection for the latency runs,
// closed by both sides, then a new one for the bandwidth runs, with the
// data checked across both.
func TestReconnect(t *testing.T) {
	devices(t)
	l, err := ListenConfig("rdma", addrB+":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var fmtC, verC, fmtS, verS byte
	send := func(c net.Conn, n int, f *byte) {
		b := make([]byte, n)
		for i := range b {
			b[i] = *f
			*f++
		}
		if _, err := c.Write(b); err != nil {
			t.Error(err)
		}
	}
	recv := func(c net.Conn, n int, v *byte) {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Error(err)
			return
		}
		for i := range b {
			if b[i] != *v {
				t.Fatalf("byte %d of %d: %d, want %d", i, n, b[i], *v)
			}
			*v++
		}
	}
	for round, cfg := range []*Config{{Inline: 64, RecvBuffer: 1 << 20, SendBuffer: 1 << 20}, {Inline: -1, RecvBuffer: 1 << 20, SendBuffer: 1 << 20}} {
		size, count := 64, 2000
		if round == 0 {
			size, count = 1<<20, 20
		}
		l.SetConfig(cfg)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s, err := l.Accept()
			if err != nil {
				t.Error(err)
				return
			}
			recv(s, 16, &verS)
			send(s, 16, &fmtS)
			for i := 0; i < count; i++ {
				recv(s, size, &verS)
				if round == 0 {
					send(s, size, &fmtS)
				}
			}
			for i := 0; i < count && round > 0; i++ {
				send(s, size, &fmtS)
			}
			s.Close()
		}()
		d := Dialer{Config: cfg}
		c, err := d.Dial("rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		send(c, 16, &fmtC)
		recv(c, 16, &verC)
		for i := 0; i < count; i++ {
			send(c, size, &fmtC)
			if round == 0 {
				recv(c, size, &verC)
			}
		}
		for i := 0; i < count && round > 0; i++ {
			recv(c, size, &verC)
		}
		c.Close()
		<-done
		t.Logf("round %d ok", round)
	}
}
