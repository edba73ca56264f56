package roce

import (
	"time"

	"github.com/softrdma/softrdma/wire"
)

// rttEstimator measures a QP's round trip, request to acknowledgement,
// so that its local ACK timer never fires before an acknowledgement
// could have come back (RFC 6298's estimator, Karn's rule).
//
// The QP's timeout attribute (IBTA 4.096 µs × 2^timeout) is a floor, and
// on an idle network the round trip is far below it, so nothing changes
// there. Behind a congested queue the round trip is the queue's delay:
// perftest's default (14: 67 ms) is shorter than 32 packets queued at
// 4 Mbit/s, and a fixed timer then fires while the acknowledgements are
// still on their way: every expiry resends the whole flight (go-back-N)
// into the same full queue, and seven of them in a row take the QP to
// the error state with nothing lost to the peer. IBTA lets the timer
// run longer than the attribute; RoCE NICs adapt it as well.
//
// Each expiry in a row without progress doubles the timer (RFC 6298
// 5.5), until an acknowledgement comes: the first flight into a slow link
// queues behind itself, and its acknowledgements come later than any
// fixed timer; a resend then waits behind the data already queued. Only
// a peer that has acknowledged something on the QP gets that patience:
// one that never answered fails after (1 + retry_cnt) timeouts of the
// QP's attribute, as IBTA counts them.
//
// One PSN is timed at a time: the last new PSN of a send, taken when
// none is timed; its acknowledgement gives the sample. A go-back-N
// rewind forgets the timed PSN, for the acknowledgement of a resent PSN
// cannot say which copy it answers (Karn).
type rttEstimator struct {
	probe   wire.PSN
	probeAt time.Time // zero: no PSN timed
	srtt    time.Duration
	rttvar  time.Duration // zero srtt: no sample yet
	backoff uint8         // expiries in a row without progress: the timer doubles per expiry
	heard   bool          // the peer acknowledged something: expiries may back off
}

// maxRTO bounds the measured part of the timer, so that a peer that is
// gone is still found within the retries (8 expiries: 16 s at most).
const maxRTO = 2 * time.Second

// onSent times psn, a new PSN sent at now, unless one is timed already.
func (e *rttEstimator) onSent(psn wire.PSN, now time.Time) {
	if e.probeAt.IsZero() && !now.IsZero() {
		e.probe, e.probeAt = psn, now
	}
}

// onAcked takes a sample when the acknowledged PSNs (everything before
// next) include the timed one.
func (e *rttEstimator) onAcked(next wire.PSN, now time.Time) {
	e.heard = true
	e.backoff = 0 // the peer is answering: the next expiry is a loss, not the queue
	if e.probeAt.IsZero() || now.IsZero() || !e.probe.Less(next) {
		return
	}
	r := max(now.Sub(e.probeAt), 0)
	e.probeAt = time.Time{}
	if e.srtt == 0 {
		e.srtt, e.rttvar = max(r, 1), r/2
		return
	}
	d := e.srtt - r
	if d < 0 {
		d = -d
	}
	e.rttvar += (d - e.rttvar) / 4
	e.srtt += (r - e.srtt) / 8
}

// onRewind forgets the timed PSN: it may be sent again (Karn). After an
// expiry of the timer (expired), the next waits twice as long.
func (e *rttEstimator) onRewind(expired bool) {
	e.probeAt = time.Time{}
	if expired && e.heard && e.backoff < maxBackoff {
		e.backoff++
	}
}

// maxBackoff bounds the doubling: 2^6 times the timer at most.
const maxBackoff = 6

// timeout is the local ACK timeout to use: the QP's t, or the measured
// RTO (srtt + 4 rttvar) when that is longer, doubled per expiry since
// the last sample; beyond t, never more than maxRTO.
func (e *rttEstimator) timeout(t time.Duration) time.Duration {
	rto := t
	if e.srtt != 0 {
		rto = max(t, e.srtt+4*e.rttvar)
	}
	rto <<= e.backoff
	return max(t, min(rto, maxRTO))
}
