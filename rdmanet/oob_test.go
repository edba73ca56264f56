package rdmanet

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/verbs"
)

// connectPair connects two devices with Connect over a net.Pipe (which
// has no buffering: the exchange must not need any).
func connectPair(t testing.TB, a, b verbs.Context, cfg Config) (*Conn, *Conn) {
	t.Helper()
	sa, sb := net.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		cb := cfg
		cb.Context = b
		c, err := Connect(ctx, sb, &cb)
		ch <- res{c, err}
	}()
	ca := cfg
	ca.Context = a
	c, err := Connect(ctx, sa, &ca)
	r := <-ch
	if err != nil || r.err != nil {
		t.Fatalf("Connect: %v; peer: %v", err, r.err)
	}
	return c, r.c
}

// shmDevices opens two shared-memory devices (one process plays both
// sides; each device is what a process would open).
func shmDevices(t testing.TB) (*shm.Device, *shm.Device) {
	t.Helper()
	a, err := shm.Open(shm.Config{})
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("no shared-memory provider here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := shm.Open(shm.Config{})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

// Connect works over the shared-memory provider (no CM) and over soft
// devices: data both ways, half-close, Close, nothing left behind.
func TestConnect(t *testing.T) {
	for _, prov := range []string{"shm", "soft"} {
		t.Run(prov, func(t *testing.T) {
			var a, b verbs.Context
			if prov == "shm" {
				checkGoroutines(t) // after the devices close
				a, b = shmDevices(t)
			} else {
				a, b = devices(t)
				checkGoroutines(t)
			}
			c, s := connectPair(t, a, b, Config{})
			go func() {
				io.Copy(s, s)
				s.CloseWrite()
			}()
			want := make([]byte, 1<<20+77)
			rand.Read(want)
			errc := make(chan error, 1)
			go func() {
				_, err := c.Write(want)
				if err == nil {
					err = c.CloseWrite()
				}
				errc <- err
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("echo: %d bytes back of %d, or different", len(got), len(want))
			}
			if err := c.Close(); err != nil {
				t.Error(err)
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// The peer closing its stream is a disconnect: Read returns EOF, Write
// fails.
func TestConnectPeerGone(t *testing.T) {
	checkGoroutines(t)
	a, b := shmDevices(t)
	c, s := connectPair(t, a, b, Config{})
	defer c.Close()
	s.Write([]byte("last"))
	s.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last" {
		t.Fatalf("after the peer's Close: %q, %v; want \"last\", EOF", got, err)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("Write to a closed peer succeeded")
	}
}

// A peer that is not an rdmanet Connect is refused, and ctx bounds the
// exchange.
func TestConnectBadPeer(t *testing.T) {
	checkGoroutines(t)
	a, _ := shmDevices(t)
	sa, sb := net.Pipe()
	defer sb.Close()
	defer sa.Close()
	go func() {
		io.CopyN(io.Discard, sb, oobHelloLen)
		sb.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 5))
	}()
	if _, err := Connect(context.Background(), sa, &Config{Context: a}); !errors.Is(err, errProtocol) {
		t.Errorf("Connect to a non-rdmanet peer: %v, want errProtocol", err)
	}
	sc, sd := net.Pipe()
	defer sc.Close()
	defer sd.Close()
	go io.Copy(io.Discard, sd) // reads the hello, never answers
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Connect(ctx, sc, &Config{Context: a}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Connect to a silent peer: %v, want context.DeadlineExceeded", err)
	}
	if _, err := Connect(context.Background(), sc, nil); err == nil {
		t.Error("Connect without a device succeeded")
	}
}

func FuzzHello(f *testing.F) {
	var d connData
	d.Version, d.Credits = 1, 16
	d.TargetSGL = sge{Addr: 0x1000, Key: 7, Length: sglSize}
	d.DataBuf = sge{Addr: 0x2000, Key: 8, Length: 4096}
	seed := make([]byte, oobHelloLen)
	encodeHello(seed, cm.Endpoint{QPN: 0x123, PSN: 0x456}, d)
	f.Add(seed)
	f.Add([]byte("RSOB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, cd, err := decodeHello(b)
		if err != nil {
			return
		}
		again := make([]byte, oobHelloLen)
		encodeHello(again, e, cd)
		e2, cd2, err := decodeHello(again)
		if err != nil || e2 != e || cd2 != cd {
			t.Fatalf("round trip: %+v %+v %v, want %+v %+v", e2, cd2, err, e, cd)
		}
	})
}
