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
	b [MaxPacketSize]byte
}

// txq is a QP's outgoing batch. It is used only under the QP's mutex, so
// a QP's packets reach the transport in the order they were built. The
// four arrays are parallel; slot i < n holds a packet, its buffer, the MR
// its payload is gathered from (pinned, or nil) and whether it is a
// requester's packet (req) or a responder's (an ACK, NAK, READ response or
// atomic ACK). Slots at n and beyond are always empty: every way a packet
// leaves the queue (sent, dropped, moved to the receive path's stage) goes
// through the methods below, which keep that so.
//
// While the receive path holds the QP (attach), the queue's responses go
// to the receive batch's stage when it flushes, so that they leave with
// every other QP's responses of the batch, in order; its requests leave
// at once.
type txq struct {
	pkts  [txBatch]transport.Datagram
	bufs  [txBatch]*pktBuf
	mrs   [txBatch]*MR
	req   [txBatch]bool
	n     int
	stage *txStage // set between attach and detach
	// sealed: the packets below it carry their trailer (a protected QP
	// seals the packets it built when it flushes: only then are they
	// complete).
	sealed int
}

// attach routes the queue's responses to st until detach.
func (t *txq) attach(st *txStage) { t.stage = st }

// detach ends attach.
func (t *txq) detach() { t.stage = nil }

// push appends a packet; the caller has made room (n < txBatch).
func (t *txq) push(p transport.Datagram, b *pktBuf, mr *MR, req bool) {
	i := t.n
	t.pkts[i], t.bufs[i], t.mrs[i], t.req[i] = p, b, mr, req
	t.n++
}

// pinsMemory reports whether a queued packet gathers its payload from an
// MR.
func (t *txq) pinsMemory() bool {
	for _, mr := range t.mrs[:t.n] {
		if mr != nil {
			return true
		}
	}
	return false
}

// unqueueLast releases the packet pushed last (one that could not be
// completed).
func (t *txq) unqueueLast(d *Device) {
	t.n--
	t.clear(d, t.n)
	t.sealed = min(t.sealed, t.n)
}

// clear releases slot i's buffer and pin and empties the slot.
func (t *txq) clear(d *Device, i int) {
	release(d, &t.pkts[i], &t.bufs[i], &t.mrs[i])
	t.req[i] = false
}

// drop discards queued packets without sending them.
func (t *txq) drop(d *Device) {
	for i := 0; i < t.n; i++ {
		t.clear(d, i)
	}
	t.n, t.sealed = 0, 0
}

// sealLocked fills the trailer of the queued packets not yet sealed, if
// the QP protects its packets.
func (qp *QP) sealLocked() {
	t := &qp.tx
	if qp.sec == nil {
		return
	}
	for ; t.sealed < t.n; t.sealed++ {
		qp.sec.seal(t.pkts[t.sealed].Buf)
	}
}

// What compact does with the packets it does not keep.
type compactMode uint8

const (
	dropRequests  compactMode = iota // keep responses, release requests
	stageRespones                    // keep requests, move responses to a stage
	keepUnsent                       // keep what TrySend did not send, release the rest
	stageAll                         // move every packet to a stage
)

// compact keeps, in order, the packets mode keeps, and disposes of the
// others: released (counted as sent or refused for keepUnsent, refused
// being sendErr) or, for stageRespones, moved to st. One loop, no
// closures: it runs for every QP of every receive batch.
func (t *txq) compact(d *Device, mode compactMode, st *txStage, sendErr error) {
	k := 0
	for i := 0; i < t.n; i++ {
		var keep bool
		switch mode {
		case dropRequests:
			keep = !t.req[i]
		case stageRespones:
			keep = t.req[i]
		case keepUnsent:
			keep = !t.pkts[i].Sent && sendErr == nil
		}
		if !keep {
			switch mode {
			case stageRespones, stageAll:
				st.add(d, t.pkts[i], t.bufs[i], t.mrs[i])
			case keepUnsent:
				d.countSent(t.pkts[i].Sent)
				release(d, &t.pkts[i], &t.bufs[i], &t.mrs[i])
			default:
				release(d, &t.pkts[i], &t.bufs[i], &t.mrs[i])
			}
			t.pkts[i], t.bufs[i], t.mrs[i], t.req[i] = transport.Datagram{}, nil, nil, false
			continue
		}
		if k != i {
			t.pkts[k], t.bufs[k], t.mrs[k], t.req[k] = t.pkts[i], t.bufs[i], t.mrs[i], t.req[i]
			t.pkts[i], t.bufs[i], t.mrs[i], t.req[i] = transport.Datagram{}, nil, nil, false
		}
		k++
	}
	t.n = k
	t.sealed = k // callers seal before they compact
}

// keepResponses drops the queued request packets and keeps the responses
// (ACKs, NAKs, READ responses, atomic ACKs), in order.
func (t *txq) keepResponses(d *Device) { t.compact(d, dropRequests, nil, nil) }

// stageResponses moves the queued responses to st, in order, and keeps the
// requests.
func (t *txq) stageResponses(d *Device, st *txStage) {
	for i := 0; i < t.n; i++ {
		if !t.req[i] {
			t.compact(d, stageRespones, st, nil)
			return
		}
	}
}

// trySend hands the transport what it takes now (transport.TrySender)
// and keeps the rest, in order. It reports whether the queue is empty.
func (t *txq) trySend(d *Device) bool {
	sent, err := d.trySender.TrySend(t.pkts[:t.n])
	if err == nil && sent == t.n {
		d.Counters.SentPkts.Add(uint64(sent))
		t.drop(d)
		return true
	}
	t.compact(d, keepUnsent, nil, err)
	return t.n == 0
}

// countSent counts a packet the transport took (sent) or refused.
func (d *Device) countSent(sent bool) {
	if sent {
		d.Counters.SentPkts.Add(1)
	} else {
		d.Counters.SendErr.Add(1)
	}
}

// send hands the queued packets to the transport and releases them.
func (t *txq) send(d *Device) {
	if t.n == 0 {
		return
	}
	sent, err := d.tr.Send(t.pkts[:t.n])
	d.Counters.SentPkts.Add(uint64(sent))
	if err != nil || sent < t.n {
		d.Counters.SendErr.Add(uint64(t.n - sent))
	}
	t.drop(d)
}

// gatherMin is the smallest payload a packet gathers from its MR rather
// than copies into the packet (transport.Gatherer): below it the copy is
// cheaper than the kernel's extra iovecs.
const gatherMin = 1024

// gatherMinMessage is the smallest request (the WQE's whole length) whose
// packets gather. A gathered packet leaves at once (DeregMR waits for it),
// so a smaller request that gathered went out in a system call of its own
// even while the QP had packets in flight, where a copied one waits for
// the doorbell batch (kickLocked). On loopback (softrdma ib_write_bw, 3
// runs each, MB/s gathered against copied): 1 KiB 142-157 against
// 401-814, 4 KiB 610-648 against 2598-2841, 16 KiB 1456-1563 against
// 2390-2819, 32 KiB 2207-2388 against 2163-2285, 64 KiB 3287-3549 against
// 3146-3431, 1 MiB 3592-3746 against 3231-3474: below 32 KiB the batch is
// worth far more than the copy it saves.
const gatherMinMessage = 32 << 10

// txStage gathers, while the receive path processes one batch, the
// responder packets (ACKs, NAKs, READ responses, atomic ACKs) of every QP
// it touches, so that they leave in one transport call at the end of the
// batch instead of one call per QP: with many QPs, each with little
// traffic, that is the difference between one system call per ACK and
// one per batch. Requester packets never wait here: a QP's requests may
// also be sent by PostSend on another goroutine, and must not overtake
// earlier ones. Used under the device's rxMu only.
//
// A stage that must not block (noBlock: a busy poller receives) sends what
// the transport takes now (transport.TrySender) and keeps the rest, in
// order, for the next flush; it grows past stageCap rather than wait.
type txStage struct {
	pkts    []transport.Datagram
	bufs    []*pktBuf
	mrs     []*MR // pinned by gathered READ responses
	noBlock bool
}

const stageCap = 256

func newTxStage() *txStage {
	return &txStage{pkts: make([]transport.Datagram, 0, stageCap), bufs: make([]*pktBuf, 0, stageCap), mrs: make([]*MR, 0, stageCap)}
}

func (s *txStage) add(d *Device, p transport.Datagram, b *pktBuf, mr *MR) {
	if len(s.pkts) == cap(s.pkts) {
		s.flush(d) // if it must not block, what stays makes the stage grow
	}
	s.pkts = append(s.pkts, p)
	s.bufs = append(s.bufs, b)
	s.mrs = append(s.mrs, mr)
}

// flush sends the staged packets, in the order they were staged. If the
// stage must not block, the packets the transport cannot take now stay.
func (s *txStage) flush(d *Device) {
	if s == nil || len(s.pkts) == 0 {
		return
	}
	if s.noBlock && d.trySender != nil {
		sent, err := d.trySender.TrySend(s.pkts)
		if err == nil && sent == len(s.pkts) {
			d.Counters.SentPkts.Add(uint64(sent))
			for i := range s.pkts {
				release(d, &s.pkts[i], &s.bufs[i], &s.mrs[i])
			}
			s.pkts, s.bufs, s.mrs = s.pkts[:0], s.bufs[:0], s.mrs[:0]
			return
		}
		k := 0
		for i := range s.pkts {
			if s.pkts[i].Sent || err != nil {
				d.countSent(s.pkts[i].Sent)
				release(d, &s.pkts[i], &s.bufs[i], &s.mrs[i])
				continue
			}
			s.pkts[k], s.bufs[k], s.mrs[k] = s.pkts[i], s.bufs[i], s.mrs[i]
			if k != i {
				s.pkts[i], s.bufs[i], s.mrs[i] = transport.Datagram{}, nil, nil
			}
			k++
		}
		s.pkts, s.bufs, s.mrs = s.pkts[:k], s.bufs[:k], s.mrs[:k]
		return
	}
	sent, err := d.tr.Send(s.pkts)
	d.Counters.SentPkts.Add(uint64(sent))
	if err != nil || sent < len(s.pkts) {
		d.Counters.SendErr.Add(uint64(len(s.pkts) - sent))
	}
	for i := range s.pkts {
		release(d, &s.pkts[i], &s.bufs[i], &s.mrs[i])
	}
	s.pkts, s.bufs, s.mrs = s.pkts[:0], s.bufs[:0], s.mrs[:0]
}

// release returns a sent or dropped packet's buffer, unpins the MR its
// payload was gathered from, if any, and clears the slots.
func release(d *Device, p *transport.Datagram, b **pktBuf, mr **MR) {
	d.bufPool.Put(*b)
	if *mr != nil {
		(*mr).unpin()
	}
	*p, *b, *mr = transport.Datagram{}, nil, nil
}

// route is where a packet goes: from one of the device's addresses (a
// GID it can send from; zero: the transport's first) to a peer.
type route struct {
	src    netip.Addr
	dst    netip.AddrPort
	tclass uint8 // the IP traffic class byte (cc.go tclassFor)
}

// route is where the QP's packets go (RC, UC: the address vector's).
func (qp *QP) route() route { return route{src: qp.src, dst: qp.dest, tclass: qp.tclass} }

// newPacketLocked appends a packet with opcode op and payloadLen bytes of
// payload to the QP's batch, flushing first if the batch is full. It writes
// the BTH and zeroes the pad; the caller writes the extension headers at the
// offsets op.Info() gives and the payload at b[info.Length:]. It returns the
// whole packet, ICRC included (the transport fills the ICRC).
func (qp *QP) newPacketLocked(dst route, op wire.Opcode, bth *wire.BTHFields, payloadLen int) []byte {
	return qp.appendPacketLocked(dst, op, bth, payloadLen, nil, nil)
}

// newGatherPacketLocked is newPacketLocked for a packet (a request or a
// READ response) whose payload stays in mr, pinned by the caller: the
// transport gathers it from there (transport.Datagram.Payload). It returns
// the packet's headers; the caller writes the extension headers as for
// newPacketLocked. The packet unpins mr once sent or dropped.
func (qp *QP) newGatherPacketLocked(dst route, op wire.Opcode, bth *wire.BTHFields, payload []byte, mr *MR) []byte {
	return qp.appendPacketLocked(dst, op, bth, len(payload), payload, mr)[:op.Info().Length]
}

// appendPacketLocked builds the packet of newPacketLocked, with the
// payload in the buffer (gathered nil) or, gathered, after the headers
// on the wire (transport.Datagram.Split).
func (qp *QP) appendPacketLocked(dst route, op wire.Opcode, bth *wire.BTHFields, payloadLen int, gathered []byte, mr *MR) []byte {
	if qp.tx.n == txBatch {
		qp.flushLocked()
		if qp.tx.n == txBatch {
			// Requests the transport cannot take now fill the queue
			// (the requester stops short of this; a responder packet
			// can still get here): wait for room rather than drop.
			qp.tx.send(qp.dev)
		}
	}
	info := op.Info()
	pad := wire.PadFor(payloadLen)
	inBuf := payloadLen
	if gathered != nil {
		inBuf = 0
	}
	total := info.Length + inBuf + pad + wire.ICRCLen
	if qp.sec != nil {
		total += secTrailerLen
	}
	pb := qp.dev.bufPool.Get().(*pktBuf)
	b := pb.b[:total]
	bth.Opcode = op
	bth.PadCount = pad
	bth.PKey = defaultPKey
	wire.BTH(b).Encode(bth)
	clear(b[info.Length+inBuf : info.Length+inBuf+pad])
	qp.tx.push(transport.Datagram{Buf: b, Payload: gathered, Split: info.Length, Peer: dst.dst, Local: dst.src, Flow: qp.qpn, TClass: dst.tclass}, pb, mr, info.Has(wire.FlagRequest))
	return b
}

// flushLocked hands the QP's queued packets on: while the receive path
// holds the QP, responses to its stage (attach), the rest to the
// transport. If the receive path must not block, requests the transport
// cannot take now stay queued and the QP joins the device's backlog,
// which the driver flushes (Device.FlushBacklog).
func (qp *QP) flushLocked() {
	t := &qp.tx
	if t.n == 0 {
		return
	}
	d := qp.dev
	qp.sealLocked()
	if t.stage != nil {
		t.stageResponses(d, t.stage)
		if t.stage.noBlock && d.trySender != nil {
			if t.n > 0 && !t.trySend(d) {
				qp.backlogLocked()
			}
			return
		}
	}
	t.send(d)
}
