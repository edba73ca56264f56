package rdmanet

import (
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
)

// Two soft devices on loopback addresses, shared by the package's tests
// (opening one binds a UDP port).
var (
	devOnce    sync.Once
	devA, devB *soft.Device
	devErr     error
	devPort    uint16 // the devices' UDP port
)

const addrA, addrB = "127.0.71.1", "127.0.71.2"

func devices(t testing.TB) (*soft.Device, *soft.Device) {
	t.Helper()
	devOnce.Do(func() {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(addrA)})
		if err != nil {
			devErr = err
			return
		}
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c.Close()
		devPort = port
		if devA, devErr = soft.Open(soft.Config{Addr: netip.MustParseAddr(addrA), Port: port}); devErr != nil {
			return
		}
		devB, devErr = soft.Open(soft.Config{Addr: netip.MustParseAddr(addrB), Port: port})
	})
	if devErr != nil {
		t.Skipf("no loopback soft devices: %v", devErr)
	}
	// One connection first, so that the CM agents (per device, for the
	// process's life) exist before any test counts goroutines.
	warmOnce.Do(func() {
		c, s := pair(t, nil)
		c.Close()
		s.Close()
	})
	return devA, devB
}

var warmOnce sync.Once

var _ = cm.Detach

// pair returns a connected (client, server) pair; the listener is closed.
func pair(t testing.TB, cfg *Config) (*Conn, *Conn) {
	t.Helper()
	l, err := ListenConfig("rdma", addrB+":0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	d := Dialer{Timeout: 10 * time.Second, Config: cfg}
	c, err := d.Dial("rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return c.(*Conn), r.c.(*Conn)
}

// checkGoroutines fails if goroutines started during the test outlive it.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}
