package roce

// CCDelay: a delay-based alternative to DCQCN, in the spirit of Swift
// (Kumar et al., SIGCOMM 2020) and TIMELY, behind the same pacer.
//
//	requester: no sample out ─► the next packet (not a READ or atomic)
//	           asks for an ACK; its PSN and send time are the sample
//	completer: a response at or past the sample's PSN ─► rtt = now − sent
//	  rtt < TargetDelay: Rc += DelayAIRate (a limited QP; at the line rate
//	                     it is released)
//	  rtt ≥ TargetDelay, and no decrease within the last rtt:
//	                     Rc ·= max(1 − β·(rtt − target)/rtt, 1 − DelayMaxDecrease)
//
// The round trip includes the switch queues on the way there and back,
// so the target is a queueing-delay budget; it needs no ECN marks and no
// CNPs (marks are counted, not answered). One clock read per round trip
// takes the sample; a limited QP is paced as under DCQCN.

import (
	"time"

	"github.com/softrdma/softrdma/wire"
)

// delaySampleLocked makes the packet with PSN psn, about to be built at
// now (zero: read the clock), the round-trip sample if none is out; it
// returns the time used and asks the packet to request an ACK.
func (qp *QP) delaySampleLocked(psn wire.PSN, now time.Time) time.Time {
	s := &qp.cc
	if s.sampling {
		return now
	}
	if now.IsZero() {
		now = qp.dev.clock()
	}
	s.sampling, s.samplePSN, s.sampleAt = true, psn, now
	s.ackDue = true
	return now
}

// onDelayResponseLocked takes a response in the PSN window that
// acknowledges through psn, at now: if it covers the sample, the sample's
// round trip adjusts the rate.
func (qp *QP) onDelayResponseLocked(psn wire.PSN, now time.Time) {
	s := &qp.cc
	if !s.sampling || psn.Less(s.samplePSN) {
		return
	}
	s.sampling = false
	rtt := now.Sub(s.sampleAt)
	if rtt <= 0 {
		return
	}
	s.rtt = rtt
	d := qp.dev
	p := &d.cc
	if rtt < p.target {
		if !s.limited {
			return
		}
		s.rc = min(s.rc+p.delayAI, p.line)
		s.rt = s.rc
		if s.rc >= p.line*lineRateTolerance {
			s.limited, s.paused = false, false
			d.Counters.CCLimitedNanos.Add(uint64(max(now.Sub(s.since), 0)))
			d.Counters.CCLimitedQPs.Add(^uint64(0))
			s.since = time.Time{}
		}
		return
	}
	if !s.lastCut.IsZero() && now.Sub(s.lastCut) < rtt {
		return // at most one decrease per round trip
	}
	if !s.limited {
		s.limited = true
		s.rc, s.since, s.nextTx = p.line, now, now
		d.Counters.CCLimitedQPs.Add(1)
	}
	f := max(1-p.beta*float64(rtt-p.target)/float64(rtt), 1-p.maxMD)
	s.rc = max(s.rc*f, p.min)
	s.rt = s.rc
	s.lastCut = now
	d.Counters.CCRateCuts.Add(1)
}
