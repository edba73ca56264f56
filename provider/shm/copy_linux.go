package shm

// One-sided operations on memory a peer cannot map: RegMR'd Go memory.
// The owner's GRANT_RESP says grantCopy, and from then on the requester
// carries each operation over the device's socket and the owner's conn
// reader applies it, a copy through the owner's CPU:
//
//	requester (holds its QP's mu)               owner's conn reader
//	WRITE   COPY_WRITE chunk (≤ 32 KiB) ───────► check QP, PD, rkey, access,
//	READ    COPY_READ  offset, length ─────────►   bounds of the whole op
//	atomic  COPY_ATOMIC addr, operands ────────► under the MR's lock: copy
//	                                               in, copy out, or the atomic
//	complete or fail ◄── COPY_RESP status (+ the data read, the original value)
//
// Each chunk is one round trip, applied once (a message is never
// resent); at most copyWindow requests of a conn await their answers. The
// requester executes its WQEs in order and waits for each one's answers,
// so a copy is ordered with the QP's other one-sided operations as a
// mapped one is. The owner checks what a responder checks on a RETH on
// every message, not once per grant: there is no mapping to revoke, and a
// DeregMR (which takes the MR's lock and marks it dead) or a SEND_WITH_INV
// is seen by the next message. The checks use the whole operation's
// range, so a WRITE out of bounds places no byte.
//
// process_vm_writev would spare the owner's CPU but needs ptrace
// permission over the owner (Yama's ptrace_scope 1, Ubuntu's default,
// refuses it between siblings) and could not wait out a DeregMR: the
// owner could not know when a peer's write ends.

import (
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

// copyChunk is the most data one COPY_WRITE or COPY_RESP carries: far
// below a Unix socket's default send buffer (208 KiB).
const copyChunk = 32 << 10

// copyWindow is how many COPY_* requests a conn may have awaiting their
// answers, over all its QPs: a 64 KiB WRITE costs about one round trip,
// not two. It also bounds what is in flight in each direction of the
// socket — our requests' data and our answers to the peer's READs, each at
// most copyWindow × copyChunk — below a Unix socket's default send buffer
// (208 KiB), so a conn reader that answers never waits for buffer space
// the other reader, itself answering, would have to free.
const copyWindow = 2

// copyTimeout bounds the wait for an owner's answer; a peer that does not
// answer fails the request as a transport timeout would.
const copyTimeout = 10 * time.Second

// Atomic kinds in COPY_ATOMIC's d.
const (
	copyFetchAdd = 0
	copyCmpSwap  = 1
)

// --- requester ---

// copyCallLocked sends one COPY_* request for w and waits for the answer.
func (qp *QP) copyCallLocked(m *ctrl, payload []byte) (ctrlReply, verbs.WCStatus) {
	m.a, m.b = qp.qpn, qp.destQPN.Load()
	c := qp.conn
	c.copySlots <- struct{}{}
	r, err := c.call(m, payload, copyTimeout)
	<-c.copySlots
	return r, copyStatus(r, err)
}

// copyStatus is the completion status an owner's answer (or its absence)
// gives a request.
func copyStatus(r ctrlReply, err error) verbs.WCStatus {
	if err != nil {
		return verbs.WCRetryExcErr // the peer is gone or silent
	}
	switch r.m.d {
	case grantOK:
		return verbs.WCSuccess
	case grantInvReq:
		return verbs.WCRemInvReqErr
	case grantAccess:
		return verbs.WCRemAccessErr
	}
	return verbs.WCRemOpErr // an answer no owner gives: the peer is broken
}

// copyWriteLocked carries a WRITE to the owner in chunks, as many in
// flight as the conn's copy slots allow: the owner's reader applies them
// in order, and a failed chunk fails the WRITE (chunks after it may land
// or not, as the bytes of a WRITE that fails at a responder).
func (qp *QP) copyWriteLocked(w *sendWQE) {
	if w.length > 1<<31 {
		w.status, w.localError = verbs.WCLocLenErr, true
		return
	}
	if qp.copyBuf == nil {
		qp.copyBuf = make([]byte, copyChunk)
	}
	c := qp.conn
	var window [copyWindow]pendingCall
	head, tail := 0, 0 // window[head%copyWindow .. tail%copyWindow] await answers, one slot each
	st, local := verbs.WCSuccess, false
	finishOne := func() {
		r, err := c.finish(window[head%copyWindow], copyTimeout)
		<-c.copySlots
		head++
		if s := copyStatus(r, err); st == verbs.WCSuccess {
			st = s
		}
	}
	for off := uint64(0); off < w.length && st == verbs.WCSuccess; {
		if head == tail {
			c.copySlots <- struct{}{} // holding none, waiting cannot deadlock
		} else {
			select {
			case c.copySlots <- struct{}{}:
			default:
				finishOne() // never wait for a slot while holding one
				continue
			}
		}
		chunk := qp.copyBuf[:min(copyChunk, w.length-off)]
		if w.isInline {
			copy(chunk, w.inline[off:])
		} else if !w.sgl.gather(qp.pd, off, chunk) {
			<-c.copySlots
			st, local = verbs.WCLocProtErr, true
			break
		}
		m := ctrl{typ: mCopyWrite, a: qp.qpn, b: qp.destQPN.Load(), c: w.rkey, x: w.raddr, y: w.length, e: uint32(off)}
		p, err := c.start(&m, chunk) // the kernel has the chunk when start returns
		if err != nil {
			<-c.copySlots
			st = verbs.WCRetryExcErr
			break
		}
		window[tail%copyWindow] = p
		tail++
		off += uint64(len(chunk))
	}
	for head != tail {
		finishOne()
	}
	if st != verbs.WCSuccess {
		w.status, w.localError = st, local
	}
}

// copyReadLocked fetches a READ's data from the owner in chunks.
func (qp *QP) copyReadLocked(w *sendWQE) {
	if w.length > 1<<31 {
		w.status, w.localError = verbs.WCLocLenErr, true
		return
	}
	for off := uint64(0); off < w.length; {
		n := min(copyChunk, w.length-off)
		m := ctrl{typ: mCopyRead, c: w.rkey, x: w.raddr, y: w.length, e: uint32(off), d: uint32(n)}
		r, st := qp.copyCallLocked(&m, nil)
		if st == verbs.WCSuccess && uint64(len(r.payload)) != n {
			st = verbs.WCRemOpErr // the owner answered with the wrong length
		}
		if st != verbs.WCSuccess {
			w.status = st
			return
		}
		if !w.sgl.scatter(qp.pd, off, r.payload) {
			w.status, w.localError = verbs.WCLocProtErr, true
			return
		}
		off += n
	}
}

// copyAtomicLocked has the owner execute an atomic; the caller checked
// the alignment.
func (qp *QP) copyAtomicLocked(w *sendWQE) {
	m := ctrl{typ: mCopyAtomic, c: w.rkey, x: w.raddr, y: w.cmpAdd, d: copyFetchAdd}
	var swap [8]byte
	if w.opcode == verbs.WRAtomicCmpAndSwp {
		m.d = copyCmpSwap
		binary.LittleEndian.PutUint64(swap[:], w.swap)
	}
	r, st := qp.copyCallLocked(&m, swap[:])
	if st == verbs.WCSuccess && len(r.payload) != 0 {
		st = verbs.WCRemOpErr
	}
	if st != verbs.WCSuccess {
		w.status = st
		return
	}
	var orig [8]byte
	binary.LittleEndian.PutUint64(orig[:], r.m.x)
	if !w.sgl.scatter(qp.pd, 0, orig[:]) {
		w.status, w.localError = verbs.WCLocProtErr, true
	}
}

// --- owner ---

// applyCopy checks and applies a peer's COPY_* request and answers it. It
// returns false, dropping the connection, for a message no requester
// sends (a chunk outside its operation, a READ chunk too long, an atomic
// without its operand); a request RDMA's rules refuse is answered with
// its status instead.
func (c *conn) applyCopy(m *ctrl, payload []byte) bool {
	var want verbs.Access
	var start, n uint64 // the bytes of the region this message touches
	switch m.typ {
	case mCopyWrite:
		want, start, n = verbs.AccessRemoteWrite, uint64(m.e), uint64(len(payload))
		if len(payload) == 0 || start+n > m.y {
			return false
		}
	case mCopyRead:
		want, start, n = verbs.AccessRemoteRead, uint64(m.e), uint64(m.d)
		if len(payload) != 0 || n == 0 || n > copyChunk || start+n > m.y {
			return false
		}
	case mCopyAtomic:
		want, start, n = verbs.AccessRemoteAtomic, 0, 8
		if len(payload) != 8 || m.d > copyCmpSwap {
			return false
		}
	}
	resp := ctrl{typ: mCopyResp, reqID: m.reqID}
	var data []byte
	mr, st := c.copyTarget(m, want, m.typ == mCopyAtomic)
	if st == grantOK {
		// The whole operation must lie in the region (checked before any
		// byte of its first chunk lands, as a responder checks a RETH).
		total := m.y
		if m.typ == mCopyAtomic {
			total = 8
		}
		off := m.x - mr.addr
		if m.x < mr.addr || off > uint64(len(mr.buf)) || total > uint64(len(mr.buf))-off {
			st = grantAccess
		} else {
			b := mr.buf[off+start : off+start+n]
			switch m.typ {
			case mCopyWrite:
				copy(b[:n-1], payload)
				atomicStoreByte(&b[n-1], payload[n-1]) // the last byte last, as a mapped WRITE
			case mCopyRead:
				data = b
			case mCopyAtomic:
				p := (*uint64)(unsafe.Pointer(&b[0]))
				if m.d == copyFetchAdd {
					resp.x = atomic.AddUint64(p, m.y) - m.y
				} else {
					swap := binary.LittleEndian.Uint64(payload)
					for {
						resp.x = atomic.LoadUint64(p)
						if resp.x != m.y || atomic.CompareAndSwapUint64(p, resp.x, swap) {
							break
						}
					}
				}
			}
		}
	}
	if st == grantOK && m.typ != mCopyRead {
		// Release what we wrote to whoever consumes the requester's
		// next ring slot (consumeLocked): an application that learns of
		// the data from a completion is then ordered after it, also for
		// the race detector.
		c.dev.copies.Add(1)
	}
	resp.d = st
	c.refused(m, st)
	c.send(&resp, data, -1, false)
	if mr != nil {
		mr.mu.Unlock()
	}
	return true
}

// copyTarget finds the MR a COPY_* request names and checks it as
// answerGrant does: the QP connected to the asker and allowing want, the
// rkey naming a live MR of its PD that allows want. On success it returns
// the MR with mr.mu locked (exclusively: a local reader of the region
// that takes the lock, and DeregMR, are ordered with the copy), else the
// status. An atomic must be 8-byte aligned.
func (c *conn) copyTarget(m *ctrl, want verbs.Access, isAtomic bool) (*MR, uint32) {
	d := c.dev
	d.mu.Lock()
	qp := d.qpByNum[m.b]
	d.mu.Unlock()
	switch {
	case qp == nil || qp.typ != verbs.QPTypeRC || qp.peer.Load() != c.peerID || qp.destQPN.Load() != m.a || !qp.serving():
		return nil, grantInvReq
	case verbs.Access(qp.access.Load())&want != want:
		return nil, grantInvReq
	case isAtomic && m.x%8 != 0:
		return nil, grantInvReq
	}
	d.mrMu.RLock()
	mr := d.mrs[m.c]
	d.mrMu.RUnlock()
	if mr == nil {
		return nil, grantAccess
	}
	mr.mu.Lock()
	if mr.dead || mr.pd != qp.pd || mr.access&want != want {
		mr.mu.Unlock()
		return nil, grantAccess
	}
	return mr, grantOK
}
