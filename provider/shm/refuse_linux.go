package shm

// A one-sided access the owner refuses fails the owner's QP too.
//
// On a wire, the responder checks a WRITE's, READ's or atomic's RETH and
// on a bad rkey, PD, access or range NAKs it, moves its QP to ERR and
// raises QP_ACCESS_ERR (a request the QP's own access flags refuse:
// QP_REQ_ERR); the requester's WQE completes with the NAK's status.
// Here the responder's checks are split between the two ends:
//
//	requester (holds its QP's mu)            owner's conn reader
//	GRANT_REQ qpn, rkey, access ───────────► QP connected to the asker,
//	                                          access flags, rkey, PD, MR
//	                                          refused: note it on the QP ─┐
//	fail the WQE ◄──── GRANT_RESP status                                 │
//	                                                                      │
//	a granted mapping, refused locally        owner's progress            │
//	(range, or an access the cached grant      the noted refusal: ◄───────┘
//	 does not carry):                          QP to ERR, then the event
//	GRANT_REQ|grantCheck, range ───────────► the same checks and the range
//	fail the WQE ◄──── GRANT_RESP status      (no fd is sent)
//
// COPY_* requests (copy_linux.go) are checked by the owner on every
// message, and a refusal is noted the same way. The reader only notes the
// refusal: moving the QP to ERR takes the QP's mu, which the QP's own
// requester may hold while it waits for this peer's answer to a grant of
// its own, so the progress goroutine does it. The note is taken before
// the answer leaves, so the requester's failure (and the requester-failed
// flag in the ring, which also moves the owner's QP to ERR) comes after
// it, and the event follows the state.

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// grantCheck in a GRANT_REQ's access word asks the owner to check the
// access to the range [x, x+y) of the region and to answer with a status
// only: grantInRange if it allows it, else the refusal, which fails the
// owner's QP as any refused access does. A requester sends it when a
// mapping it holds refuses an access, so the owner learns of it.
const grantCheck = 1 << 31

// grantInRange answers a grantCheck request that the owner finds allowed
// (a requester and its owner that agree never see it).
const grantInRange = 4

// checkTimeout bounds the wait for the answer to a grantCheck request; the
// requester's WQE fails with its own status either way.
const checkTimeout = 2 * time.Second

// refusalEvent is the event a refused access raises at the owner's QP,
// 0 for a status that refuses nothing.
func refusalEvent(st uint32) verbs.AsyncEventType {
	switch st {
	case grantInvReq:
		return verbs.EventQPReqErr
	case grantAccess:
		return verbs.EventQPAccessErr
	}
	return 0
}

// refused notes, before the answer st to the peer's request m goes out,
// that the owner's QP m.b refused an access of the peer's QP m.a: the QP
// moves to ERR with the event (failRefusedLocked). A request that names
// no QP of ours connected to the asker, or a QP that no longer serves
// (RESET, ERR), fails nothing here.
func (c *conn) refused(m *ctrl, st uint32) {
	ev := refusalEvent(st)
	if ev == 0 {
		return
	}
	d := c.dev
	d.mu.Lock()
	qp := d.qpByNum[m.b]
	d.mu.Unlock()
	if qp == nil || qp.typ != verbs.QPTypeRC || qp.peer.Load() != c.peerID || qp.destQPN.Load() != m.a {
		return
	}
	qp.given.mu.Lock()
	if qp.given.open {
		qp.refusal.CompareAndSwap(0, uint32(ev))
	}
	qp.given.mu.Unlock()
	d.kick()
}

// failRefusedLocked moves the QP to ERR after a refused access and then
// raises its event. The QP may be in ERR already: the requester-failed
// flag of the peer's ring can be seen first. Precondition: qp.mu held.
func (qp *QP) failRefusedLocked() {
	ev := verbs.AsyncEventType(qp.refusal.Swap(0))
	if ev == 0 {
		return
	}
	qp.errorLocked()
	qp.dev.event(verbs.AsyncEvent{Type: ev, QP: qp})
}

// checkRefused tells the owner of rkey that a mapping refused the access
// [raddr, raddr+n) with want, so that its QP fails as a responder's would,
// and returns the status the requester's WQE completes with: the owner's
// refusal, or st, the mapping's, if the owner does not answer with one.
func (c *conn) checkRefused(qpn, destQPN, rkey uint32, want verbs.Access, raddr, n uint64, st verbs.WCStatus) verbs.WCStatus {
	r, err := c.call(&ctrl{typ: mGrantReq, a: qpn, b: destQPN, c: rkey, d: uint32(want) | grantCheck, x: raddr, y: n}, nil, checkTimeout)
	if err != nil {
		return st
	}
	switch r.m.d {
	case grantInvReq:
		return verbs.WCRemInvReqErr
	case grantAccess:
		return verbs.WCRemAccessErr
	}
	return st
}

// inRegion reports whether [addr, addr+n) lies in mr. Precondition: mr.mu
// held.
func inRegion(mr *MR, addr, n uint64) bool {
	off := addr - mr.addr
	return addr >= mr.addr && off <= uint64(len(mr.buf)) && n <= uint64(len(mr.buf))-off
}
