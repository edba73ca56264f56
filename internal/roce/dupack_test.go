package roce

import (
	"testing"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// TestDuplicateAckedWithoutAckReq: a duplicate SEND or WRITE packet is
// acknowledged again whether or not it asks for an ACK, as rxe does
// (C9-105). A requester that retransmits from the middle of a message
// sends packets without AckReq; answering only AckReq left such a
// requester (rxe's, resending its last messages after an ACK was lost)
// without the ACK that ends its retries.
func TestDuplicateAckedWithoutAckReq(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	c := f.dev.tr.(*capture)
	qpn := f.rc.QPNum()
	first := func(psn wire.PSN, ackReq bool) []byte {
		return buildPacket(wire.RCWriteFirst, wire.BTHFields{DestQP: qpn, PSN: psn, AckReq: ackReq}, make([]byte, 256), func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 512})
		})
	}
	last := func(psn wire.PSN) []byte {
		return buildPacket(wire.RCWriteLast, wire.BTHFields{DestQP: qpn, PSN: psn, AckReq: true}, make([]byte, 256), nil)
	}
	sent := func() [][]byte { c.mu.Lock(); defer c.mu.Unlock(); return append([][]byte(nil), c.sent...) }
	send := func(pkt []byte) { f.handle([]transport.Datagram{{Buf: pkt, Peer: f.peer, ICRC: transport.ICRCOK}}) }

	send(first(100, false))
	send(last(101)) // the message is complete: one ACK for PSN 101
	if n := len(sent()); n != 1 {
		t.Fatalf("%d packets after a two-packet WRITE, want its ACK", n)
	}
	send(first(100, false)) // the requester resends from the message's first packet
	out := sent()
	if len(out) != 2 || f.dev.Counters.DuplicateRequest.Load() != 1 {
		t.Fatalf("a duplicate without AckReq: %d packets sent in all, duplicate_request %d; want a second ACK and 1", len(out), f.dev.Counters.DuplicateRequest.Load())
	}
	b := wire.BTH(out[1])
	if b.Opcode() != wire.RCAck || b.PSN() != 101 {
		t.Fatalf("answer to the duplicate: opcode %v PSN %d, want an ACK of PSN 101 (the last one received)", b.Opcode(), b.PSN())
	}
}
