package roce

import (
	"bytes"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestGSI: a MAD sent from QP1 of one device reaches the handler of the
// other's QP1 with the sender's GID and QP1 as its source; a MAD with the
// wrong Q_Key, or with no handler installed, is dropped and counted.
func TestGSI(t *testing.T) {
	ta, tb := udpPair(t)
	a, b := newDevice(t, Config{Transport: ta}), newDevice(t, Config{Transport: tb})
	go serve(a, ta)
	go serve(b, tb)
	defer a.Close()
	defer b.Close()
	type got struct {
		src verbs.MADSource
		mad []byte
	}
	ch := make(chan got, 4)
	must(t, b.HandleMADs(1, func(src verbs.MADSource, mad []byte) { ch <- got{src, bytes.Clone(mad)} }))
	mad := make([]byte, 256)
	mad[0], mad[1], mad[2], mad[3] = 1, 7, 2, 3 // base version, class CM, class version, method Send
	bg, _ := b.QueryGID(1, 1)
	ag, _ := a.QueryGID(1, 1)
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, mad))
	select {
	case g := <-ch:
		if g.src.GID != ag || g.src.QPN != 1 || !bytes.Equal(g.mad, mad) {
			t.Fatalf("received %+v, %d bytes; want from %v QP1 the MAD sent", g.src, len(g.mad), ag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no MAD arrived")
	}
	must(t, a.SendMAD(1, bg, 1, 0x1234, mad)) // wrong Q_Key
	must(t, b.HandleMADs(1, nil))
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, mad)) // no handler
	deadline := time.Now().Add(5 * time.Second)
	for b.Counters.DropQKey.Load() != 1 || b.Counters.DropNoMADHandler.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("drops: qkey %d, no handler %d; want 1 and 1", b.Counters.DropQKey.Load(), b.Counters.DropNoMADHandler.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if len(ch) != 0 {
		t.Fatal("a MAD that should have been dropped was delivered")
	}
}

// TestGSIUnhandled: a device with no MAD handler answers as the kernel
// does for one with no listener: a CM REQ gets REJ "invalid service ID"
// (reason 8) with the REQ's comm ID and transaction ID, a SIDR_REQ gets
// SIDR_REP "unsupported service", a Get of another class its response
// with status "unsupported class or version".
func TestGSIUnhandled(t *testing.T) {
	ta, tb := udpPair(t)
	a, b := newDevice(t, Config{Transport: ta}), newDevice(t, Config{Transport: tb})
	go serve(a, ta)
	go serve(b, tb)
	defer a.Close()
	defer b.Close()
	ch := make(chan []byte, 4)
	must(t, a.HandleMADs(1, func(_ verbs.MADSource, mad []byte) { ch <- bytes.Clone(mad) }))
	bg, _ := b.QueryGID(1, 1)
	next := func() wire.MAD {
		t.Helper()
		select {
		case m := <-ch:
			return wire.MAD(m)
		case <-time.After(5 * time.Second):
			t.Fatal("no answer")
		}
		return nil
	}

	req := make([]byte, wire.MADLen)
	wire.EncodeCMHeader(req, wire.CMReqAttr, 0x1122334455667788)
	r := wire.CMReq{LocalCommID: 0xCAFE, ServiceID: 0x0106000000004E20, Transport: wire.CMTransportRC}
	r.Encode(req[wire.MADHeaderLen:])
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, req))
	m := next()
	rej, err := wire.ParseCMRej(m.Data())
	if err != nil || wire.CMAttr(m.AttrID()) != wire.CMRejAttr || m.TransactionID() != 0x1122334455667788 || rej.Reason != wire.RejInvalidServiceID || rej.RemoteCommID != 0xCAFE {
		t.Fatalf("answer to a REQ: attr %#x tid %#x %+v", m.AttrID(), m.TransactionID(), rej)
	}

	sreq := make([]byte, wire.MADLen)
	wire.EncodeCMHeader(sreq, wire.CMSIDRReqAttr, 7)
	s := wire.CMSIDRReq{RequestID: 42, ServiceID: 0x0111000000004E20}
	s.Encode(sreq[wire.MADHeaderLen:])
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, sreq))
	m = next()
	rep, err := wire.ParseCMSIDRRep(m.Data())
	if err != nil || wire.CMAttr(m.AttrID()) != wire.CMSIDRRepAttr || rep.RequestID != 42 || rep.Status != wire.SIDRUnsupportedService {
		t.Fatalf("answer to a SIDR_REQ: attr %#x %+v", m.AttrID(), rep)
	}

	get := make([]byte, wire.MADLen)
	wire.MAD(get).Encode(&wire.MADFields{BaseVersion: 1, MgmtClass: 0x03, ClassVersion: 2, Method: wire.MADMethodGet, TransactionID: 9, AttrID: 0x0011})
	must(t, a.SendMAD(1, bg, 1, verbs.GSIQKey, get))
	m = next()
	if m.Method() != wire.MADMethodGetResp || m.Status() != wire.MADStatusBadVers || m.TransactionID() != 9 || m.MgmtClass() != 0x03 {
		t.Fatalf("answer to a Get of class 3: %+v", m.Fields())
	}
	if b.Counters.MADsAnswered.Load() != 3 {
		t.Fatalf("mads_answered %d, want 3", b.Counters.MADsAnswered.Load())
	}
}
