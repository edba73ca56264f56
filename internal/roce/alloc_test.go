package roce

import (
	"testing"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// buildPacket makes a request or response packet as a peer would send it.
func buildPacket(op wire.Opcode, bth wire.BTHFields, payload []byte, ext func(b []byte, info *wire.OpInfo)) []byte {
	info := op.Info()
	pad := wire.PadFor(len(payload))
	b := make([]byte, info.Length+len(payload)+pad+wire.ICRCLen)
	bth.Opcode, bth.PadCount, bth.PKey = op, pad, 0xFFFF
	wire.BTH(b).Encode(&bth)
	copy(b[info.Length:], payload)
	if ext != nil {
		ext(b, info)
	}
	return b
}

// TestZeroAllocs: posting, polling, and the per-packet receive and send
// paths allocate nothing in steady state.
func TestZeroAllocs(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	f.dev.tr.(*capture).discard = true
	qp := f.rc.(*QP)
	wcs := make([]verbs.WC, 4)

	// Requester: post a signaled WRITE, feed the ACK, poll the completion.
	wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 512)}, RemoteAddr: 0x1000, RKey: 0x77}
	ack := buildPacket(wire.RCAck, wire.BTHFields{DestQP: qp.qpn}, nil, func(b []byte, info *wire.OpInfo) {
		wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F)})
	})
	batch := []transport.Datagram{{Buf: ack, Peer: f.peer, ICRC: transport.ICRCOK}}
	round := func() {
		qp.mu.Lock()
		last := qp.req.psn.Add(1) // the WRITE of 512 bytes at MTU 256 takes 2 PSNs
		qp.mu.Unlock()
		if err := f.rc.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wire.BTH(ack).SetPSN(last)
		f.handle(batch)
		if n, _ := f.cq.Poll(wcs); n != 1 || wcs[0].Status != verbs.WCSuccess {
			t.Fatalf("poll: %d %+v", n, wcs[0])
		}
	}
	round()
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Errorf("post WRITE + receive ACK + poll: %.1f allocations per operation, want 0", a)
	}

	// Responder: an incoming RDMA WRITE ONLY with AckReq, answered by an ACK.
	req := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qp.qpn, AckReq: true}, make([]byte, 200), func(b []byte, info *wire.OpInfo) {
		wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 200})
	})
	rbatch := []transport.Datagram{{Buf: req, Peer: f.peer, ICRC: transport.ICRCOK}}
	recv := func() {
		qp.mu.Lock()
		psn := qp.resp.psn
		qp.mu.Unlock()
		wire.BTH(req).SetPSN(psn)
		f.handle(rbatch)
	}
	recv()
	sent := f.dev.tr.(*capture).count
	if a := testing.AllocsPerRun(200, recv); a != 0 {
		t.Errorf("receive WRITE + send ACK: %.1f allocations per packet, want 0", a)
	}
	if f.dev.tr.(*capture).count == sent {
		t.Error("the responder sent no ACKs")
	}

	// PostRecv and a SEND that consumes it.
	rwr := &verbs.RecvWR{SGList: []verbs.SGE{f.mr.SGE(0, 256)}}
	send := buildPacket(wire.RCSendOnly, wire.BTHFields{DestQP: qp.qpn, AckReq: true}, make([]byte, 100), nil)
	sbatch := []transport.Datagram{{Buf: send, Peer: f.peer, ICRC: transport.ICRCOK}}
	for f.rc.PostRecv(rwr) == nil { // fill, then drain one per round
	}
	for {
		if n, _ := f.cq.Poll(wcs); n == 0 {
			break
		}
	}
	sendRound := func() {
		qp.mu.Lock()
		wire.BTH(send).SetPSN(qp.resp.psn)
		qp.mu.Unlock()
		f.handle(sbatch)
		if n, _ := f.cq.Poll(wcs); n != 1 || wcs[0].Status != verbs.WCSuccess {
			t.Fatalf("recv poll: %d %+v", n, wcs[0])
		}
		if err := f.rc.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
	}
	sendRound()
	if a := testing.AllocsPerRun(200, sendRound); a != 0 {
		t.Errorf("receive SEND + post receive + poll: %.1f allocations per message, want 0", a)
	}
}
