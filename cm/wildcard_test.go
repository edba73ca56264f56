package cm_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// testIfProvider lists, while on, the device of a pretend network
// interface "wildtest0" as soft's provider lists one per interface:
// unopened, opened by whoever wants it.
type testIfProvider struct{}

var testIf struct {
	mu     sync.Mutex
	on     bool
	opened *soft.Device
}

func (testIfProvider) Name() string { return "cm-wildcard-test" }
func (testIfProvider) Devices() ([]verbs.Device, error) {
	testIf.mu.Lock()
	defer testIf.mu.Unlock()
	if !testIf.on || (testIf.opened != nil && !testIf.opened.Closed()) {
		return nil, nil
	}
	return []verbs.Device{testIfDevice{}}, nil
}

type testIfDevice struct{}

func (testIfDevice) Name() string { return "softrdma_wildtest0" }
func (testIfDevice) GUID() uint64 { return 0 }
func (testIfDevice) Open() (verbs.Context, error) {
	d, err := soft.Open(soft.Config{Name: "softrdma_wildtest0", Addr: netip.MustParseAddr("127.0.64.3"), Port: freePort})
	if err != nil {
		return nil, err
	}
	testIf.mu.Lock()
	testIf.opened = d
	testIf.mu.Unlock()
	return d, nil
}

// TestListenEveryDevice: a listener on ":port" accepts on every device
// of the host, each request names the device it came to, and Close
// closes the devices the listener opened.
func TestListenEveryDevice(t *testing.T) {
	checkGoroutines(t)
	defer cm.SetInterfaces(func() ([]net.Interface, error) {
		return []net.Interface{{Index: 999, Name: "wildtest0", Flags: net.FlagUp}}, nil
	})()
	verbs.Register(testIfProvider{})
	testIf.mu.Lock()
	testIf.on = true
	testIf.mu.Unlock()
	defer func() {
		testIf.mu.Lock()
		testIf.on = false
		testIf.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	da, db := openPair(t, "127.0.64.1", "127.0.64.2")
	defer da.Close()
	defer db.Close()

	for _, address := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		t.Run(address, func(t *testing.T) {
			ln, err := cm.Listen("rdma", address, nil)
			if err != nil {
				t.Fatal(err)
			}
			if a := ln.Addr(); !a.Addr().IsUnspecified() || a.Port() == 0 {
				t.Errorf("Addr() = %v, want the unspecified address and the port", a)
			}
			devs := ln.Devices()
			if !slices.Contains(devs, verbs.Context(da)) || !slices.Contains(devs, verbs.Context(db)) {
				t.Fatalf("the listener is not on the opened devices: %v", names(devs))
			}
			testIf.mu.Lock()
			opened := testIf.opened
			testIf.mu.Unlock()
			if opened == nil || !slices.Contains(devs, verbs.Context(opened)) {
				t.Fatalf("the listener did not open the interface's device: %v", names(devs))
			}
			accepted := make(chan error, 3)
			go func() {
				for {
					req, err := ln.Accept(ctx)
					if err != nil {
						return
					}
					c, err := req.Accept(ctx, &cm.Options{PrivateData: []byte(req.Context().Device().Name())})
					if err == nil {
						go func() { <-c.Done(); c.Close() }()
					}
					accepted <- err
				}
			}()
			var kept *cm.Conn // a connection to the listener's own device
			for _, dev := range []verbs.Context{da, db, opened} {
				to := netip.AddrPortFrom(dev.(*soft.Device).LocalAddr(), ln.Addr().Port())
				from := db
				if dev == verbs.Context(db) {
					from = da
				}
				c, err := cm.Dial(ctx, "rdma", to.String(), &cm.Options{Context: from})
				if err != nil {
					t.Fatalf("dial %v: %v", to, err)
				}
				if got := string(bytes.TrimRight(c.PeerPrivateData, "\x00")); got != dev.Device().Name() {
					t.Errorf("dial %v: accepted on %q, want %q", to, got, dev.Device().Name())
				}
				if err := <-accepted; err != nil {
					t.Fatalf("accept on %s: %v", dev.Device().Name(), err)
				}
				if dev == verbs.Context(opened) {
					kept = c
				} else {
					c.Close()
				}
			}
			ln.Close()
			// The connection accepted on the device the listener opened
			// outlives the listener; the device closes after it.
			time.Sleep(50 * time.Millisecond)
			if opened.Closed() || kept.Err() != nil {
				t.Fatalf("closing the listener ended its connection (%v)", kept.Err())
			}
			kept.Close()
			for deadline := time.Now().Add(5 * time.Second); !opened.Closed() && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if !opened.Closed() {
				t.Error("the listener's own device stays open after the listener and its connections closed")
			}
			if da.Closed() || db.Closed() {
				t.Error("Close closed a device the program opened")
			}
		})
	}
}

func names(cs []verbs.Context) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Device().Name())
	}
	return out
}
