//go:build ibverbs && cgo && linux

package ibverbs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// Every entry point of a closed device, and of the objects its Close
// destroyed, fails with the closed-device sentinel (cm.ErrDeviceClosed
// for cm, verbs.ErrDestroyed for verbs) and a message that says the
// device was closed, never ErrNotFound for want of an address.
func TestClosedDeviceEntryPoints(t *testing.T) {
	c := openOrSkip(t)
	addr := cmAddr(t, c)
	gi := roceIndex(t, c)
	a, b := pair(t, c, verbs.QPTypeRC, 16)
	ud := newEnd(t, c, gi, verbs.QPTypeUD, 16)
	srq, err := a.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := ud.pd.CreateAH(&verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(gi), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	name := c.Device().Name()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sge := []verbs.SGE{a.mr.SGE(0, 8)}
	for _, tc := range []struct {
		name string
		cm   bool // want cm.ErrDeviceClosed, else verbs.ErrDestroyed
		call func() error
	}{
		{"cm.Dial", true, func() error {
			_, err := cm.Dial(ctx, "rdma", netip.AddrPortFrom(addr, 7471).String(), &cm.Options{Context: c})
			return err
		}},
		{"cm.Dial UD", true, func() error {
			_, err := cm.Dial(ctx, "rdma", netip.AddrPortFrom(addr, 7471).String(), &cm.Options{Context: c, QPType: verbs.QPTypeUD})
			return err
		}},
		{"cm.Listen", true, func() error {
			_, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: c})
			return err
		}},
		{"CMDial", false, func() error {
			_, err := c.CMDial(ctx, &verbs.CMParams{QPType: verbs.QPTypeRC, Dst: netip.AddrPortFrom(addr, 7471)})
			return err
		}},
		{"CMListen", false, func() error {
			_, err := c.CMListen(netip.AddrPortFrom(addr, 0), verbs.QPTypeRC, 1)
			return err
		}},
		{"QueryDevice", false, func() error { _, err := c.QueryDevice(); return err }},
		{"QueryPort", false, func() error { _, err := c.QueryPort(1); return err }},
		{"QueryGID", false, func() error { _, err := c.QueryGID(1, 0); return err }},
		{"QueryGIDEntry", false, func() error { _, err := c.QueryGIDEntry(1, 0); return err }},
		{"AllocPD", false, func() error { _, err := c.AllocPD(); return err }},
		{"CreateCQ", false, func() error { _, err := c.CreateCQ(16, nil); return err }},
		{"CreateCQ with a CompChannel", false, func() error { _, err := c.CreateCQ(16, verbs.NewCompChannel(1)); return err }},
		{"AllocMR", false, func() error { _, err := a.pd.AllocMR(4096, verbs.AccessLocalWrite); return err }},
		{"RegMR", false, func() error { _, err := a.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite); return err }},
		{"CreateQP", false, func() error {
			_, err := a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: a.cq, RecvCQ: a.cq, QPType: verbs.QPTypeRC,
				Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		}},
		{"CreateSRQ", false, func() error { _, err := a.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1}); return err }},
		{"CreateAH", false, func() error {
			_, err := ud.pd.CreateAH(&verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(gi)}})
			return err
		}},
		{"PD.Dealloc", false, a.pd.Dealloc},
		{"MR.Dereg", false, a.mr.Dereg},
		{"CQ.Poll", false, func() error { _, err := a.cq.Poll(make([]verbs.WC, 1)); return err }},
		{"CQ.Wait", false, func() error { return a.cq.Wait(ctx) }},
		{"CQ.ReqNotify", false, func() error { return a.cq.ReqNotify(false) }},
		{"CQ.Destroy", false, a.cq.Destroy},
		{"QP.PostSend", false, func() error {
			return a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: sge})
		}},
		{"QP.PostRecv", false, func() error { return a.qp.PostRecv(&verbs.RecvWR{SGList: sge}) }},
		{"QP.Modify", false, func() error {
			return a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
		}},
		{"QP.Query", false, func() error { _, _, err := a.qp.Query(); return err }},
		{"QP.Destroy", false, a.qp.Destroy},
		{"SRQ.PostRecv", false, func() error { return srq.PostRecv(&verbs.RecvWR{SGList: sge}) }},
		{"SRQ.Query", false, func() error { _, err := srq.Query(); return err }},
		{"SRQ.Destroy", false, srq.Destroy},
		{"AH.Destroy", false, ah.Destroy},
	} {
		err := tc.call()
		want := verbs.ErrDestroyed
		if tc.cm {
			want = cm.ErrDeviceClosed
		}
		if !errors.Is(err, want) {
			t.Errorf("%s on a closed device: %v; want %v", tc.name, err, want)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "closed") || !strings.Contains(msg, name) && !strings.Contains(msg, "context") {
			t.Errorf("%s on a closed device: %q does not say that the device was closed", tc.name, msg)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("a second Close: %v; want nil", err)
	}
	select {
	case _, ok := <-c.AsyncEvents():
		if ok {
			t.Error("an asynchronous event after Close")
		}
	default:
		t.Error("AsyncEvents is still open after Close")
	}
}
