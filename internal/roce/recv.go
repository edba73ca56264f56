package roce

// Receive dispatch (IBTA 9.6, rxe_recv.c): every datagram the transport
// hands over passes these checks before any protocol state is touched —
//
//	ICRC verdict → headers parse (length, opcode, pad) → destination QP
//	exists → QP state receives → opcode belongs to the QP's transport →
//	P_Key → for RC/UC, the source address is the QP's peer
//
// — and a failure drops the packet and counts it. Packets that pass are
// grouped per QP: the QP's lock is taken once for a run of its packets, and
// when the run ends the QP sends one coalesced ACK and whatever the
// completer's progress let the requester send, in one batch.

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// grhLen is the size of the network header at the start of a UD receive
// buffer (IBTA 11.4.1.2: a GRH; on RoCEv2 the IP header, right-aligned).
const grhLen = 40

// RxBatch is the receive path's scratch space and the state it keeps
// between batches. The driver owns one per receiving goroutine (or one
// under its receive lock): it is not safe for concurrent use.
type RxBatch struct {
	p wire.Packet
	// stage gathers the responder packets of the batch (see txStage);
	// HandleBatch sends it at the end.
	stage *txStage
	// deferAck lets the batch's ACKs wait for the busy poller that
	// receives it; deferred lists the QPs whose ACK waits.
	deferAck bool
	deferred []*QP
}

// NewRxBatch returns an empty RxBatch.
func NewRxBatch() *RxBatch { return &RxBatch{stage: newTxStage()} }

// DeferAcks says whether the ACKs of the next batches may wait for the
// goroutine that receives them: set it when a busy poller receives inline
// and will come back soon, to post (its next request then carries the
// ACK, in the same system call) or to poll again. An ACK waits only if
// nothing else leaves for its QP in that batch, and the QP gives up
// waiting when its poller keeps coming back to poll rather than to post (a
// stream). The driver must then make sure waiting ACKs leave soon: at the
// poller's next receive (StageDeferredAcks) or after a short delay
// (SendDeferredAcks from a timer) if Waiting reports any.
func (rx *RxBatch) DeferAcks(on bool) { rx.deferAck = on }

// Waiting reports whether ACKs wait for the poller (DeferAcks).
func (rx *RxBatch) Waiting() bool { return len(rx.deferred) > 0 }

// MustNotBlock says whether the batches that follow must be handled
// without waiting for the transport (a busy poller receives: CQ.Poll
// never blocks). The transport then takes what it can (transport.TrySender)
// and the rest waits: responses in the batch's stage (Unsent), requests
// in their QP's queue and the QP on the device's backlog. The driver must
// then send them soon, from a goroutine that may block: FlushStage and
// Device.FlushBacklog with MustNotBlock(false).
func (rx *RxBatch) MustNotBlock(on bool) { rx.stage.noBlock = on }

// Drop discards the responses waiting in the stage and the ACKs waiting
// for a poller, as the driver stops.
func (rx *RxBatch) Drop(d *Device) {
	for i := range rx.stage.pkts {
		release(d, &rx.stage.pkts[i], &rx.stage.bufs[i], &rx.stage.mrs[i])
	}
	rx.stage.pkts, rx.stage.bufs, rx.stage.mrs = rx.stage.pkts[:0], rx.stage.bufs[:0], rx.stage.mrs[:0]
	clear(rx.deferred)
	rx.deferred = rx.deferred[:0]
}

// Unsent reports whether responses wait in the stage for the transport.
func (rx *RxBatch) Unsent() bool { return len(rx.stage.pkts) > 0 }

// SendDeferredAcks sends the ACKs that wait, at once.
func (rx *RxBatch) SendDeferredAcks(d *Device) {
	rx.StageDeferredAcks()
	rx.stage.flush(d)
}

// An ACK waits for the poller only while that pays: a QP whose poller
// came back to poll rather than to post deferMissLimit times in a row (a
// stream, where a late ACK only shrinks the sender's window) sends its
// ACKs at once and tries waiting again once every deferRetry ACKs.
const (
	deferMissLimit = 2
	deferRetry     = 64
)

// deferWorthIt says whether this ACK should wait for the poller.
func (r *responder) deferWorthIt() bool {
	if r.deferMisses < deferMissLimit {
		return true
	}
	r.deferSkips++
	if r.deferSkips < deferRetry {
		return false
	}
	r.deferSkips = 0
	return true
}

// deferAck makes the pending ACK wait for the poller; it reports whether
// it was not waiting yet (the caller lists the QP for StageDeferredAcks).
func (r *responder) deferAck() bool {
	if r.ackDeferred {
		return false
	}
	r.ackDeferred = true
	return true
}

// endDefer ends the ACK's wait for the poller; it reports whether the ACK
// is still pending.
func (r *responder) endDefer() bool {
	r.ackDeferred = false
	return r.ackPending
}

// deferMissed counts a wait for the poller that ended with the ACK still
// pending, up to deferMissLimit (deferWorthIt).
func (r *responder) deferMissed() {
	if r.deferMisses < deferMissLimit {
		r.deferMisses++
	}
}

// flushAckWithPostLocked sends the pending ACK with requests the
// application just posted: the wait for the poller paid, so the miss
// count starts over.
func (r *responder) flushAckWithPostLocked(tx answerTx) {
	r.deferMisses = 0
	r.flushAckLocked(tx)
}

// StageDeferredAcks moves the ACKs that still wait into the batch's
// stage: they leave with the next batch's responses (HandleBatch), or
// with FlushStage.
func (rx *RxBatch) StageDeferredAcks() {
	if len(rx.deferred) == 0 {
		return
	}
	for i, qp := range rx.deferred {
		rx.deferred[i] = nil
		qp.mu.Lock()
		if qp.resp.endDefer() && !qp.destroyed {
			qp.resp.deferMissed() // the poller did not post: the wait bought nothing
			qp.tx.attach(rx.stage)
			qp.resp.flushAckLocked(qp)
			qp.flushLocked()
			qp.tx.detach()
		}
		qp.mu.Unlock()
	}
	rx.deferred = rx.deferred[:0]
}

// FlushStage sends what StageDeferredAcks staged.
func (rx *RxBatch) FlushStage(d *Device) { rx.stage.flush(d) }

// HandleBatch processes received packets, now being the time they arrived.
// rx may be nil (tests, fuzzers): each QP's responses then leave on their
// own and no ACK waits.
func (d *Device) HandleBatch(rx *RxBatch, pkts []transport.Datagram, now time.Time) {
	if len(pkts) == 0 {
		return
	}
	if rx == nil {
		rx = &RxBatch{}
	}
	d.Counters.RcvdPkts.Add(uint64(len(pkts)))
	d.held.hold()
	var cur *QP
	more := false // the completer let cur's requester send more
	for i := range pkts {
		pk := &pkts[i]
		switch pk.ICRC {
		case transport.ICRCOK:
		case transport.ICRCUnverified:
			if !d.cfg.AcceptUnverifiedICRC {
				d.Counters.DropICRCUnverified.Add(1)
				continue
			}
		default:
			d.Counters.DropICRC.Add(1)
			continue
		}
		if len(pk.Buf) < wire.BTHLen+wire.ICRCLen {
			d.Counters.DropMalformed.Add(1)
			continue
		}
		qpn := wire.BTH(pk.Buf).DestQP()
		if qpn == gsiQPN {
			if err := wire.Parse(pk.Buf, &rx.p); err != nil {
				d.Counters.DropMalformed.Add(1)
				continue
			}
			// The MAD handler may call into the device: hold no QP.
			if cur != nil {
				cur.endRxLocked(rx, now, more)
				cur.tx.detach()
				cur.mu.Unlock()
				cur = nil
			}
			d.onGSI(&rx.p, pk)
			continue
		}
		qp := d.qpByNum(qpn)
		if qp == nil {
			d.Counters.DropUnknownQP.Add(1)
			continue
		}
		if qp != cur {
			if cur != nil {
				cur.endRxLocked(rx, now, more)
				cur.tx.detach()
				cur.mu.Unlock()
			}
			qp.mu.Lock()
			qp.tx.attach(rx.stage)
			cur, more = qp, false
		}
		if wire.BTH(pk.Buf).Opcode() == wire.CNPOpcode {
			qp.receiveCNPLocked(pk, now)
			continue
		}
		if qp.sec != nil {
			// A protected QP checks and strips the trailer before it
			// believes anything in the packet; the source check comes
			// first, as it costs nothing and the UDP source is not in
			// the packet: a flood from anywhere but the peer's port then
			// costs no cryptography.
			if !qp.fromPeerLocked(pk) {
				d.Counters.DropWrongSource.Add(1)
				continue
			}
			b, ok := qp.sec.open(pk.Buf, &d.Counters)
			if !ok {
				continue
			}
			pk.Buf = b
		}
		if err := wire.Parse(pk.Buf, &rx.p); err != nil {
			d.Counters.DropMalformed.Add(1)
			continue
		}
		if qp.receiveLocked(&rx.p, pk, now) {
			more = true
		}
	}
	if cur != nil {
		cur.endRxLocked(rx, now, more)
		cur.tx.detach()
		cur.mu.Unlock()
	}
	if rx.stage != nil {
		rx.stage.flush(d)
	}
	d.held.release()
}

// qpService is the wire transport of a QP type.
func qpService(t verbs.QPType) wire.Service {
	switch t {
	case verbs.QPTypeUC:
		return wire.ServiceUC
	case verbs.QPTypeUD:
		return wire.ServiceUD
	}
	return wire.ServiceRC
}

// receiveLocked checks and handles one packet for the QP. It reports
// whether the completer made room for the requester to send more.
func (qp *QP) receiveLocked(p *wire.Packet, pk *transport.Datagram, now time.Time) (sendMore bool) {
	c := &qp.dev.Counters
	if qp.destroyed {
		c.DropUnknownQP.Add(1)
		return false
	}
	st := qp.stateLocked()
	if st == verbs.QPStateReset || st == verbs.QPStateInit || st == verbs.QPStateErr {
		c.DropQPState.Add(1)
		return false
	}
	info := p.Info
	if info.Service != qpService(qp.typ) {
		c.DropWrongTransport.Add(1)
		return false
	}
	if p.BTH.PKey()&0x7FFF != defaultPKey&0x7FFF {
		c.DropPKey.Add(1)
		return false
	}
	if qp.typ != verbs.QPTypeUD {
		// RC and UC take packets from their peer only: its address, and
		// the UDP source port its first packet came from. A peer sends a
		// QP's packets from one port (rxe: 0xC000 + a hash of the QPN;
		// softrdma: the socket its flow maps to), so a packet from another
		// port, even from the peer's host, is not the peer's QP. As rxe
		// checks, the packet must also be addressed to the QP's source
		// GID, not to another address of the device.
		if !qp.fromPeerLocked(pk) {
			c.DropWrongSource.Add(1)
			return false
		}
		qp.heardLocked(now)
	}
	if pk.CE() {
		qp.onCELocked(now) // the notification point (cc.go)
	}
	if st == verbs.QPStateRTR && !qp.commEst {
		// IBTA 11.6.3: the first packet on a QP in RTR establishes it.
		qp.commEst = true
		qp.dev.Event(verbs.AsyncEvent{Type: verbs.EventCommEst, QP: qp})
	}
	if info.Has(wire.FlagRequest) {
		proven := false
		switch qp.typ {
		case verbs.QPTypeRC:
			r := qp.resp.onRequestLocked(&qp.views.resp, p)
			if r.fail {
				qp.errorLocked()
				qp.dev.Event(verbs.AsyncEvent{Type: r.event, QP: qp})
			}
			proven = r.expected
		case verbs.QPTypeUC:
			proven = qp.resp.onUCRequestLocked(&qp.views.resp, p)
		case verbs.QPTypeUD:
			qp.resp.onUDRequestLocked(qp.recvRes(), p, pk)
		}
		qp.learnPeerPortLocked(proven, pk)
		return false
	}
	if st == verbs.QPStateRTR {
		c.DropQPState.Add(1)
		return false
	}
	s := qp.req.sent(qp.sq.next)
	r := qp.comp.onResponse(&qp.views.comp, &s, p, now)
	qp.learnPeerPortLocked(r.inWindow, pk)
	if r.inWindow && qp.dev.cc.delay {
		qp.onDelayResponseLocked(p.BTH.PSN(), now) // cc_delay.go
	}
	return qp.applyCompLocked(r, now)
}

// receiveCNPLocked checks a CNP for the QP and hands it to the reaction
// point (cc.go). A CNP is taken only by an RC or UC QP that sends, from
// its peer (address and pinned port, as any packet); a protected QP
// takes none, since a CNP carries no tag and would let anyone on the
// path slow it.
func (qp *QP) receiveCNPLocked(pk *transport.Datagram, now time.Time) {
	c := &qp.dev.Counters
	switch st := qp.stateLocked(); {
	case qp.destroyed:
		c.DropUnknownQP.Add(1)
	case st != verbs.QPStateRTS && st != verbs.QPStateSQD:
		c.DropQPState.Add(1)
	case qp.typ == verbs.QPTypeUD:
		c.DropWrongTransport.Add(1)
	case !qp.fromPeerLocked(pk):
		c.DropWrongSource.Add(1)
	case qp.sec != nil:
		c.DropAuth.Add(1)
	default:
		if _, ok := wire.ParseCNP(pk.Buf); !ok {
			c.DropMalformed.Add(1)
			return
		}
		qp.onCNPLocked(now)
	}
}

// fromPeerLocked reports whether an RC/UC packet comes from the QP's
// peer: its address, the UDP source port once one is pinned, and (as rxe
// checks) addressed to the QP's source GID.
func (qp *QP) fromPeerLocked(pk *transport.Datagram) bool {
	return pk.Peer.Addr().Unmap() == qp.destAddr && (qp.peerPort == 0 || pk.Peer.Port() == qp.peerPort) &&
		(!pk.Local.IsValid() || !qp.src.IsValid() || pk.Local.Unmap() == qp.src)
}

// learnPeerPortLocked pins an RC/UC QP to the UDP port its peer sends
// from, once a packet has proven to be the peer's (a request with the
// expected PSN, a response inside the PSNs in flight: what a blind
// attacker would have to guess, with the QPN). Until then packets from
// any port of the peer's address are taken; after, only from that port.
func (qp *QP) learnPeerPortLocked(proven bool, pk *transport.Datagram) {
	if proven && qp.peerPort == 0 && qp.typ != verbs.QPTypeUD {
		qp.peerPort = pk.Peer.Port()
	}
}

// endRxLocked ends a run of received packets for the QP: the coalesced
// ACK, then anything the requester may now send (sendMore: the completer
// made room), all in one batch.
func (qp *QP) endRxLocked(rx *RxBatch, now time.Time, sendMore bool) {
	if qp.feed != nil && qp.takeFeedLocked() {
		sendMore = true
	}
	if sendMore {
		qp.runRequesterLocked(now)
	}
	switch {
	case !qp.resp.ackPending:
	case rx.deferAck && qp.tx.n == 0 && qp.resp.deferWorthIt():
		// Nothing leaves now: the ACK waits for the poller (see
		// Config.NoDeferredAck).
		if qp.resp.deferAck() {
			rx.deferred = append(rx.deferred, qp)
		}
	default:
		qp.resp.flushAckLocked(qp)
	}
	qp.flushLocked()
	qp.rearmLocked()
	qp.armFeedLocked()
}

// buildGRH writes the 40-byte network header of a received UD packet:
// for IPv4, 20 zero bytes then the IPv4 header; for IPv6 the IPv6 header.
// udpPayload is the length of the RoCEv2 packet (BTH to ICRC).
func buildGRH(b []byte, pk *transport.Datagram, udpPayload int) {
	clear(b[:grhLen])
	src, dst := pk.Peer.Addr().Unmap(), pk.Local.Unmap()
	if src.Is4() {
		h := b[20:40]
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+8+udpPayload))
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
		h[8] = 64
		h[9] = 17
		s4, d4 := src.As4(), addr4(dst)
		copy(h[12:16], s4[:])
		copy(h[16:20], d4[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(h[i:]))
		}
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return
	}
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(8+udpPayload))
	b[6] = 17
	b[7] = 64
	s16, d16 := src.As16(), dst.As16()
	copy(b[8:24], s16[:])
	copy(b[24:40], d16[:])
}

func addr4(a netip.Addr) [4]byte {
	if a.Is4() {
		return a.As4()
	}
	return [4]byte{}
}
