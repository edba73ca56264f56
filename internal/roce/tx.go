package roce

import (
	"net/netip"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// txBatch is how many packets a QP gathers before it hands them to the
// transport in one call (one sendmmsg on UDP).
const txBatch = 32

// pktBuf is the storage of one outgoing packet; buffers come from the
// device's pool and return to it once the transport has sent them.
type pktBuf struct {
	b [maxPacketSize]byte
}

// txq is a QP's outgoing batch. It is used only under the QP's mutex, so
// a QP's packets reach the transport in the order they were built.
type txq struct {
	pkts [txBatch]transport.Packet
	bufs [txBatch]*pktBuf
	n    int
}

// drop discards queued packets without sending them.
func (t *txq) drop(d *Device) {
	for i := 0; i < t.n; i++ {
		d.bufPool.Put(t.bufs[i])
		t.bufs[i] = nil
		t.pkts[i] = transport.Packet{}
	}
	t.n = 0
}

// newPacketLocked appends a packet with opcode op and payloadLen bytes of
// payload to the QP's batch, flushing first if the batch is full. It writes
// the BTH and zeroes the pad; the caller writes the extension headers at the
// offsets op.Info() gives and the payload at b[info.Length:]. It returns the
// whole packet, ICRC included (the transport fills the ICRC).
func (qp *QP) newPacketLocked(dst netip.AddrPort, op wire.Opcode, bth *wire.BTHFields, payloadLen int) []byte {
	if qp.tx.n == txBatch {
		qp.flushLocked()
	}
	info := op.Info()
	pad := wire.PadFor(payloadLen)
	total := info.Length + payloadLen + pad + wire.ICRCLen
	pb := qp.dev.bufPool.Get().(*pktBuf)
	b := pb.b[:total]
	bth.Opcode = op
	bth.PadCount = pad
	bth.PKey = defaultPKey
	wire.BTH(b).Encode(bth)
	for i := info.Length + payloadLen; i < total-wire.ICRCLen; i++ {
		b[i] = 0
	}
	i := qp.tx.n
	qp.tx.bufs[i] = pb
	qp.tx.pkts[i] = transport.Packet{Buf: b, Peer: dst, Flow: qp.qpn}
	qp.tx.n++
	return b
}

// flushLocked sends the QP's batch.
func (qp *QP) flushLocked() {
	t := &qp.tx
	if t.n == 0 {
		return
	}
	d := qp.dev
	sent, err := d.tr.Send(t.pkts[:t.n])
	d.Counters.SentPkts.Add(uint64(sent))
	if err != nil || sent < t.n {
		d.Counters.SendErr.Add(uint64(t.n - sent))
	}
	t.drop(d)
}

// keepResponses drops the queued request packets and keeps the responses
// (ACKs, NAKs, READ responses, atomic ACKs), in order.
func (t *txq) keepResponses(d *Device) {
	n := 0
	for i := 0; i < t.n; i++ {
		if wire.BTH(t.pkts[i].Buf).Opcode().Info().Has(wire.FlagRequest) {
			d.bufPool.Put(t.bufs[i])
			continue
		}
		t.pkts[n], t.bufs[n] = t.pkts[i], t.bufs[i]
		n++
	}
	for i := n; i < t.n; i++ {
		t.pkts[i], t.bufs[i] = transport.Packet{}, nil
	}
	t.n = n
}
