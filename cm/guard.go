package cm

// What the CM agent does with MADs from a peer it does not trust. Every
// CM MAD can be sent by anyone who can reach QP1 (UDP port 4791), with
// any source address the network lets through, so the agent:
//
//   - acts on a message that names a connection only if it comes from
//     that connection's peer: its source GID, the peer's comm ID (once
//     the peer told it), for a DREQ the QPN, and only in a state in which
//     the message is legal (acceptsLocked);
//   - brings the timers and retry counts a REQ or MRA asks for within
//     bounds (clampReq, clampMRA), so that a peer cannot leave this side's
//     QP without an ACK timeout or stretch retransmissions and TIMEWAIT to
//     hours;
//   - answers messages that name nothing here (a REQ for a port nobody
//     listens on, a DREQ for an unknown comm ID, a duplicate REQ) at most
//     answerRate times a second (answerBucket), so a spoofed flood is not
//     reflected one for one to the address it names;
//   - finds the connection a MAD names through maps keyed by what the MAD
//     carries, and its retransmissions through a heap of deadlines, so
//     the cost of a MAD does not grow with the connections held.
//
// What is refused is counted ([Stats]).

import (
	"container/heap"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Bounds on what a REQ or MRA asks of this side (IBA time codes: 4.096 µs
// × 2^code). Linux takes the codes as they come; a peer can then ask for
// no ACK timeout at all (code 0 means "infinite") or for hours.
const (
	// minACKTimeout and maxACKTimeout bound the local ACK timeout a
	// REQ's primary path gives the passive side's QP: 12 ≈ 16.8 ms,
	// 22 ≈ 17 s (rdma_cm on RoCE sends 19 ≈ 2.1 s; cm.DefaultParams has
	// 14 ≈ 67 ms). TIMEWAIT lasts the same code, so at most 16 s.
	minACKTimeout = 12
	maxACKTimeout = 22
	// minCMTimeout and maxCMTimeout bound the REQ's local CM response
	// timeout, which is how long the passive side waits for the RTU per
	// REP it sends (and how long a DREQ waits per try): 16 ≈ 256 ms,
	// 23 ≈ 33 s (rdma_cm sends 20 ≈ 4 s). With at most 15 retries a REP
	// is resent for at most about 8 minutes; Accept's context ends it
	// sooner.
	minCMTimeout = 16
	maxCMTimeout = 23
	// maxMRAServiceTimeout bounds the service timeout an MRA asks to
	// wait, once per message: 24 ≈ 69 s, what rdma_cm itself sends
	// (CMA_CM_MRA_SETTING).
	maxMRAServiceTimeout = 24
)

// clampReq brings r's timers within the bounds above and reports whether
// it changed anything. The REQ's retry counts fit their fields (3 bits of
// retry count, 7 meaning 7 tries; 4 bits of CM retries) and are taken as
// they are; an RNR retry count of 7 (infinite) is rdma_cm's and rsocket's
// default and stays allowed: a peer that never posts receives stalls only
// the sends addressed to itself.
func clampReq(r *wire.CMReq) bool {
	changed := false
	clamp := func(v *uint8, lo, hi uint8) {
		if *v < lo {
			*v, changed = lo, true
		} else if *v > hi {
			*v, changed = hi, true
		}
	}
	clamp(&r.Primary.LocalACKTimeout, minACKTimeout, maxACKTimeout)
	clamp(&r.LocalCMTimeout, minCMTimeout, maxCMTimeout)
	clamp(&r.RemoteCMTimeout, minCMTimeout, maxCMTimeout)
	return changed
}

// clampMRA bounds the wait an MRA asks for.
func clampMRA(m *wire.CMMRA) bool {
	if m.ServiceTimeout > maxMRAServiceTimeout {
		m.ServiceTimeout = maxMRAServiceTimeout
		return true
	}
	return false
}

// AgentStats counts what the CM agent of a device refused or changed.
type AgentStats struct {
	// Unmatched counts MADs that named a connection here but were not
	// acted on: from another source GID than its peer's, naming another
	// peer comm ID or QPN, or not legal in the connection's state (a REJ
	// after the RTU, say). They are dropped without an answer.
	Unmatched uint64
	// RateLimited counts answers not sent because more than answerRate a
	// second were due: REJs to REQs for ports nobody listens on or when
	// the backlog is full, DREPs to DREQs for unknown comm IDs, MRAs and
	// REJs to duplicate REQs, SIDR_REPs to unknown services.
	RateLimited uint64
	// Clamped counts REQs and MRAs whose timers were brought within
	// bounds (an ACK timeout of 0, a response timeout of hours).
	Clamped uint64
	// ProofFailed counts RTUs that did not prove the dialer holds the
	// listener's pre-shared key (Options.SecurityPSK): a replayed or
	// forged handshake. The connection is not established.
	ProofFailed uint64
}

type agentStats struct {
	unmatched, rateLimited, clamped, proofFailed atomic.Uint64
}

// Stats returns the counters of ctx's CM agent (zero if cm never used
// ctx). It is safe for concurrent use.
func Stats(ctx verbs.Context) AgentStats {
	agents.mu.Lock()
	a := agents.m[ctx]
	agents.mu.Unlock()
	if a == nil {
		return AgentStats{}
	}
	return a.stats.snapshot()
}

func (s *agentStats) snapshot() AgentStats {
	return AgentStats{Unmatched: s.unmatched.Load(), RateLimited: s.rateLimited.Load(),
		Clamped: s.clamped.Load(), ProofFailed: s.proofFailed.Load()}
}

// answerRate and answerBurst shape the token bucket of unsolicited
// answers: a legitimate peer needs one now and then (a dial to a closed
// port); a flood of spoofed REQs gets at most answerRate answers a second
// in all, whatever addresses it names.
const (
	answerRate  = 100
	answerBurst = 50
)

// answerBucket is a token bucket driven by the agent's clock.
type answerBucket struct {
	tokens float64
	last   time.Time
}

// take reports whether an answer may go out at now, and spends a token.
func (b *answerBucket) take(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = answerBurst
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(answerBurst, b.tokens+d.Seconds()*answerRate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// mayAnswerLocked spends a token for an unsolicited answer, counting the
// refusal.
func (a *agent) mayAnswerLocked() bool {
	if a.answers.take(a.now()) {
		return true
	}
	a.stats.rateLimited.Add(1)
	return false
}

// fromPeer reports whether a MAD from src that gives peerCommID as its
// sender's comm ID comes from id's peer: the GID id talks to, and the
// comm ID the peer gave (unknown only before its first answer to a REQ).
func fromPeer(id *cmID, src verbs.MADSource, peerCommID uint32) bool {
	return src.GID == id.peer && (id.remoteID == 0 || peerCommID == id.remoteID)
}

// unmatchedLocked counts a MAD that named id but is not acted on.
func (a *agent) unmatchedLocked() { a.stats.unmatched.Add(1) }

// rejAccepted reports whether a REJ is legal for id in its state, as in
// cm.c's cm_rej_handler (a REJ before we answered a REQ is left to the
// REP that Accept sends: the dialer's agent rejects that), except that an established connection takes a
// REJ only on the active side and only for the REP: that is the passive
// side giving up because our RTU was lost. On the passive side, the RTU
// proved the peer took our REP, and IBTA has no REJ after it (cm.c takes
// one while no LAP is pending, which lets a forged REJ end a connection).
func rejAccepted(id *cmID, r *wire.CMRej) bool {
	switch id.state {
	case stateReqSent, stateMRAReqRcvd, stateRepSent, stateMRARepRcvd, stateRepRcvd, stateDReqSent:
		return true
	case stateEstablished:
		return !id.passive && r.MessageRejected == wire.CMMsgREP
	}
	return false
}

// deadlines is a min-heap of retransmission and TIMEWAIT deadlines.
// Entries are not removed when a deadline changes: an entry whose cmID
// has another deadline now, or is gone, is skipped when it comes up.
type deadlines []deadlineEntry

type deadlineEntry struct {
	at time.Time
	id *cmID
}

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlines) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlines) Push(x any)        { *h = append(*h, x.(deadlineEntry)) }
func (h *deadlines) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = deadlineEntry{}
	*h = old[:len(old)-1]
	return e
}

// live reports whether e is id's current deadline.
func (a *agent) live(e deadlineEntry) bool {
	return a.ids[e.id.localID] == e.id && !e.id.deadline.IsZero() && e.id.deadline.Equal(e.at)
}

// armLocked sets id's deadline (zero: none).
func (a *agent) armLocked(id *cmID, at time.Time) {
	id.deadline = at
	if at.IsZero() {
		return
	}
	heap.Push(&a.deadlines, deadlineEntry{at: at, id: id})
	if len(a.deadlines) > 2*len(a.ids)+64 {
		// Mostly stale entries: keep the live ones.
		live := a.deadlines[:0]
		for _, e := range a.deadlines {
			if a.live(e) {
				live = append(live, e)
			}
		}
		clear(a.deadlines[len(live):])
		a.deadlines = live
		heap.Init(&a.deadlines)
	}
}

// timeoutsLocked resends what is due, fails what ran out of retries, ends
// TIMEWAITs, and returns the next deadline (zero: none).
func (a *agent) timeoutsLocked(now time.Time) time.Time {
	for len(a.deadlines) > 0 {
		e := a.deadlines[0]
		if !a.live(e) {
			heap.Pop(&a.deadlines)
			continue
		}
		if now.Before(e.at) {
			return e.at
		}
		heap.Pop(&a.deadlines)
		a.expireLocked(e.id, now)
	}
	return time.Time{}
}
