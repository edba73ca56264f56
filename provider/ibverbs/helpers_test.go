//go:build ibverbs && cgo && linux

package ibverbs

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// The tests need a kernel RDMA device: SOFTRDMA_IBVERBS_DEVICE names it
// (default: the first one). Without one they skip; the interop VM's rxe0
// is where they run (test/interop/ibverbs_cases.sh).

func deviceName() string { return os.Getenv("SOFTRDMA_IBVERBS_DEVICE") }

// openOrSkip opens the test device, closed by t.Cleanup.
func openOrSkip(t testing.TB) *Context {
	t.Helper()
	c, err := Open(Config{Name: deviceName()})
	if errors.Is(err, verbs.ErrNotFound) || errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("no kernel RDMA device: %v", err)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// roceIndex returns the GID index of port 1's first RoCE v2 IPv4 entry,
// or of its first entry on other link layers.
func roceIndex(t testing.TB, c *Context) int {
	t.Helper()
	pa, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		e, err := c.QueryGIDEntry(1, i)
		if err != nil {
			continue
		}
		if pa.LinkLayer != verbs.LinkLayerEthernet {
			return i
		}
		if e.Type == GIDTypeRoCEv2 && e.GID.Addr().Is4() {
			return i
		}
	}
	t.Skip("port 1 has no RoCE v2 IPv4 GID")
	return 0
}

// end is one end of an RC connection on one context.
type end struct {
	ctx verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	mr  verbs.MR
	qp  verbs.QP
	gid verbs.GID
}

func newEnd(t testing.TB, c *Context, gidIndex int, typ verbs.QPType, depth uint32) *end {
	t.Helper()
	return newEndCh(t, c, gidIndex, typ, depth, nil)
}

// newEndCh is newEnd with a CQ that delivers its events to ch.
func newEndCh(t testing.TB, c *Context, gidIndex int, typ verbs.QPType, depth uint32, ch *verbs.CompChannel) *end {
	t.Helper()
	e := &end{ctx: c}
	var err error
	if e.pd, err = c.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = c.CreateCQ(int(2*depth), ch); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	if e.gid, err = c.QueryGID(1, gidIndex); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.qp.Destroy()
		e.mr.Dereg()
		e.cq.Destroy()
		e.pd.Dealloc()
	})
	return e
}

// pair connects two QPs of type typ on c to each other.
func pair(t testing.TB, c *Context, typ verbs.QPType, depth uint32) (a, b *end) {
	t.Helper()
	return pairCh(t, c, typ, depth, nil)
}

// pairCh is pair with b's CQ delivering its events to ch.
func pairCh(t testing.TB, c *Context, typ verbs.QPType, depth uint32, ch *verbs.CompChannel) (a, b *end) {
	t.Helper()
	gi := roceIndex(t, c)
	a, b = newEnd(t, c, gi, typ, depth), newEndCh(t, c, gi, typ, depth, ch)
	p := cm.DefaultParams()
	p.SGIDIndex = uint8(gi)
	p.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	p.MaxRdAtomic, p.MaxDestRdAtomic = 4, 4
	ea := cm.Endpoint{QPN: a.qp.QPNum(), PSN: 0x100, GID: a.gid}
	eb := cm.Endpoint{QPN: b.qp.QPNum(), PSN: 0x200, GID: b.gid}
	if err := cm.Connect(a.qp, ea, eb, &p); err != nil {
		t.Fatal(err)
	}
	if err := cm.Connect(b.qp, eb, ea, &p); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// wait polls cq until one completion arrives, with Wait in between.
func wait(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}
}
