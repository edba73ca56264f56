package roce

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestDropReasons: every kind of bad datagram is dropped, counted under its
// own reason, and changes nothing.
func TestDropReasons(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	qpn := f.rc.QPNum()
	good := func() []byte {
		return buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qpn, PSN: 100, AckReq: true}, []byte{1, 2, 3, 4}, func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 4})
		})
	}
	c := &f.dev.Counters
	tests := []struct {
		name    string
		pkt     func() []byte
		peer    netip.AddrPort
		icrc    transport.ICRCStatus
		counter *atomic.Uint64
	}{
		{"bad ICRC", good, f.peer, transport.ICRCBad, &c.DropICRC},
		{"unverified ICRC", good, f.peer, transport.ICRCUnverified, &c.DropICRCUnverified},
		{"truncated", func() []byte { return good()[:10] }, f.peer, transport.ICRCOK, &c.DropMalformed},
		{"unknown opcode", func() []byte { b := good(); b[0] = 0x1f; return b }, f.peer, transport.ICRCOK, &c.DropMalformed},
		{"unknown QP", func() []byte { b := good(); wire.BTH(b).SetDestQP(0xABCDE); return b }, f.peer, transport.ICRCOK, &c.DropUnknownQP},
		{"wrong source", good, netip.MustParseAddrPort("10.9.0.66:4791"), transport.ICRCOK, &c.DropWrongSource},
		{"UD opcode to RC QP", func() []byte {
			return buildPacket(wire.UDSendOnly, wire.BTHFields{DestQP: qpn, PSN: 100}, []byte{1}, nil)
		}, f.peer, transport.ICRCOK, &c.DropWrongTransport},
		{"bad P_Key", func() []byte { b := good(); wire.BTH(b).SetPKey(0x1234); return b }, f.peer, transport.ICRCOK, &c.DropPKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.counter.Load()
			mem := append([]byte(nil), f.mem...)
			f.handle([]transport.Datagram{{Buf: tc.pkt(), Peer: tc.peer, ICRC: tc.icrc}})
			if tc.counter.Load() != before+1 {
				t.Fatalf("counter did not move")
			}
			if string(mem) != string(f.mem) {
				t.Fatal("a dropped packet changed memory")
			}
		})
	}
	// The same packet, well formed, is executed.
	f.handle([]transport.Datagram{{Buf: good(), Peer: f.peer, ICRC: transport.ICRCOK}})
	if string(f.mem[guard:guard+4]) != "\x01\x02\x03\x04" {
		t.Fatal("the good packet was not executed")
	}
	// An unverifiable ICRC is accepted when the device says so (rxe peers).
	f.dev.cfg.AcceptUnverifiedICRC = true
	b := good()
	wire.BTH(b).SetPSN(101)
	wire.RETH(b[wire.RCWriteOnly.Info().RETHOff:]).SetVA(f.mr.Addr() + 8)
	f.handle([]transport.Datagram{{Buf: b, Peer: f.peer, ICRC: transport.ICRCUnverified}})
	if string(f.mem[guard+8:guard+12]) != "\x01\x02\x03\x04" {
		t.Fatal("an unverified packet was dropped with AcceptUnverifiedICRC set")
	}
}

// TestCompChannel: ReqNotify arms the CQ; the next completion delivers one
// event; solicited-only ignores unsolicited completions.
func TestCompChannel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := netsimPair(t, netsim.Config{Seed: 1}, defaultOpts())
		ch := verbs.NewCompChannel(4)
		cq, err := b.dev.CreateCQ(16, ch)
		must(t, err)
		defer cq.Destroy()
		if err := b.scq.ReqNotify(false); !errors.Is(err, verbs.ErrInvalidState) {
			t.Fatalf("ReqNotify without a channel: %v", err)
		}
		// Recreate b's QP on the notifying CQ.
		b.qp.Destroy()
		qp, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.scq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		b.qp = qp
		o := defaultOpts()
		must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState))
		connect(t, a, b, o)
		connect(t, b, a, o)
		for i := 0; i < 4; i++ {
			b.postRecv(uint64(i), 0, 64)
		}
		must(t, cq.ReqNotify(true)) // solicited only
		a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		time.Sleep(time.Millisecond)
		select {
		case <-ch.C():
			t.Fatal("an unsolicited completion woke a solicited-only CQ")
		default:
		}
		a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSolicited, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got, err := ch.GetEvent(ctx)
		if err != nil || got != cq {
			t.Fatalf("GetEvent = %v, %v", got, err)
		}
		if n, _ := cq.Poll(b.wcs); n != 2 {
			t.Fatalf("polled %d completions, want 2", n)
		}
		// Not rearmed: no further event.
		a.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SendFlags: verbs.SendSolicited, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		time.Sleep(time.Millisecond)
		select {
		case <-ch.C():
			t.Fatal("event without ReqNotify")
		default:
		}
		b.qp.Destroy()
		b.qp = nil
	})
}

// TestAPIErrors: misuse gets an error that wraps the right sentinel.
func TestAPIErrors(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	check := func(name string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	_, err := f.pd.RegMR(make([]byte, 8), verbs.AccessRemoteWrite)
	check("remote write without local write", err, verbs.ErrInvalidArgument)
	_, err = f.pd.RegMR(nil, verbs.AccessLocalWrite)
	check("empty MR", err, verbs.ErrInvalidArgument)
	_, err = f.dev.CreateCQ(0, nil)
	check("CQ of 0", err, verbs.ErrInvalidArgument)
	_, err = f.pd.CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq, QPType: verbs.QPTypeRC})
	check("QP without capacity", err, verbs.ErrInvalidArgument)
	qp, err := f.pd.CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	must(t, err)
	check("post in RESET", qp.PostSend(&verbs.SendWR{}), verbs.ErrInvalidState)
	check("post recv in RESET", qp.PostRecv(&verbs.RecvWR{}), verbs.ErrInvalidState)
	check("RESET to INIT", qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags), nil)
	err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU4096, DestQPNum: 1, AHAttr: verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(f.peer.Addr()), SGIDIndex: 1}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	check("path MTU 4096 on a 1500 link", err, verbs.ErrInvalidArgument)
	err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: 1, AHAttr: verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(f.peer.Addr()), SGIDIndex: 0}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	check("source GID index 0", err, verbs.ErrInvalidArgument)
	err = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	check("no GRH", err, verbs.ErrInvalidArgument)
	check("destroy CQ in use", f.cq.Destroy(), verbs.ErrInUse)
	check("dealloc PD in use", f.pd.Dealloc(), verbs.ErrInUse)
	must(t, qp.Destroy())
	check("destroy twice", qp.Destroy(), verbs.ErrDestroyed)
	// A full send queue.
	f.rc.(*QP).mu.Lock()
	sq := f.rc.(*QP).sq
	f.rc.(*QP).mu.Unlock()
	wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{f.mr.SGE(0, 8)}, RemoteAddr: 1, RKey: 1}
	var last error
	for i := uint32(0); i <= sq.max; i++ {
		last = f.rc.PostSend(wr)
	}
	check("full send queue", last, verbs.ErrQueueFull)
	var pe *verbs.PostError
	if !errors.As(last, &pe) {
		t.Errorf("PostSend error %T is not a *PostError", last)
	}
}

// TestErrorSendsNoRequests: when the QP fails, requests still queued (here
// the retransmissions a retry would send) do not leave; the WQEs complete
// as flushed.
func TestErrorSendsNoRequests(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	c := f.dev.tr.(*capture)
	qp := f.rc.(*QP)
	wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 8)}, RemoteAddr: 1, RKey: 1}
	must(t, f.rc.PostSend(wr))
	// A second post while the first is unacknowledged stays queued
	// (doorbell batching); then the QP fails.
	must(t, f.rc.PostSend(wr))
	c.mu.Lock()
	before := len(c.sent)
	c.mu.Unlock()
	qp.mu.Lock()
	queued := qp.tx.n
	qp.failHeadLocked(verbs.WCRemAccessErr)
	qp.mu.Unlock()
	c.mu.Lock()
	after := len(c.sent)
	c.mu.Unlock()
	if queued == 0 {
		t.Fatal("the second post was not queued; the test does not test anything")
	}
	if after != before {
		t.Fatalf("%d request packets left after the QP failed", after-before)
	}
	wcs := make([]verbs.WC, 4)
	// The two sends, then the receive queue flushed too (same CQ).
	if n, _ := f.cq.Poll(wcs); n < 2 || wcs[0].Status != verbs.WCRemAccessErr || wcs[1].Status != verbs.WCWRFlushErr || wcs[1].Opcode != verbs.WCRDMAWrite {
		t.Fatalf("completions %d: %+v", n, wcs[:n])
	}
}
