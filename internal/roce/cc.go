package roce

// Congestion control: DCQCN (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015), as RoCE NICs run it.
//
//	sender (reaction point)           switch            receiver (notification point)
//	packets leave ECT(0) ──────────► queue > Kmin: ───► CE seen (recv.go) ─► at most one
//	                                 mark CE (RED)      CNP per QP per CNPInterval
//	CNP arrives (recv.go) ◄──────────────────────────── BTH opcode 0x81 to the sender's QP
//	  └► cut: Rt = Rc, Rc = Rc·(1 − α/2), α = (1 − g)·α + g
//	every AlphaPeriod without a CNP: α = (1 − g)·α
//	every RateTimer and every ByteCounter bytes sent: an increase event
//	  fast recovery (first F events):     Rc = (Rt + Rc)/2
//	  additive (one counter past F):      Rt += AIRate,     Rc = (Rt + Rc)/2
//	  hyper (both counters past F):       Rt += i·HAIRate,  Rc = (Rt + Rc)/2
//	back at the line rate: the QP is no longer limited
//
// A limited QP's requests are paced (the requester, requester.go): a
// packet may leave once the QP's next transmission time has come, and
// each packet moves that time on by its length at the current rate Rc.
// Retransmissions go through the same requester and so are paced too.
// The engine stays clock-free: CNPs and CE marks carry the receive
// batch's time, the requester reads Config.Clock only while its QP is
// limited, and the α, increase and pacing deadlines share the QP's one
// timer (timers.go). A QP that never saw a CNP pays one branch per packet.
//
// What is not paced: READ responses and atomic ACKs (the responder's
// packets). A READ-heavy peer congests through responses, which its
// CNPs cannot slow; the requester's READ requests are paced.

import (
	"time"

	"github.com/softrdma/softrdma/congestion"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// CCAlgorithm and CCConfig are the congestion package's types, which
// provider/soft exposes as its Config.CC.
type (
	CCAlgorithm = congestion.Algorithm
	CCConfig    = congestion.Config
)

const (
	CCDCQCN = congestion.DCQCN
	CCOff   = congestion.Off
	CCDelay = congestion.Delay
)

// Defaults of CCConfig.
const (
	DefaultCCLineRate       = congestion.DefaultLineRate
	DefaultCCMinRate        = congestion.DefaultMinRate
	DefaultCNPInterval      = congestion.DefaultCNPInterval
	DefaultAlphaG           = congestion.DefaultAlphaG
	DefaultAlphaPeriod      = congestion.DefaultAlphaPeriod
	DefaultRateTimer        = congestion.DefaultRateTimer
	DefaultByteCounter      = congestion.DefaultByteCounter
	DefaultFastRecovery     = congestion.DefaultFastRecovery
	DefaultAIRate           = congestion.DefaultAIRate
	DefaultHAIRate          = congestion.DefaultHAIRate
	DefaultPaceBurst        = congestion.DefaultPaceBurst
	DefaultCNPTClass        = congestion.DefaultCNPTClass
	DefaultTargetDelay      = congestion.DefaultTargetDelay
	DefaultDelayAIRate      = congestion.DefaultDelayAIRate
	DefaultDelayBeta        = congestion.DefaultDelayBeta
	DefaultDelayMaxDecrease = congestion.DefaultDelayMaxDecrease
	defaultInitialAlpha     = congestion.DefaultInitialAlpha
	lineRateTolerance       = 0.999 // a rate this close to the line rate is the line rate
	bitsPerByte             = 8
)

// ccParams is CCConfig with its defaults, rates in bytes per second.
type ccParams struct {
	on                   bool // DCQCN: CNPs are sent and obeyed
	ecn                  bool // packets leave ECT(0) (DCQCN and CCDelay)
	delay                bool // CCDelay
	target               time.Duration
	delayAI, beta, maxMD float64
	tclass, cnpTClass    uint8
	line, min, ai, hai   float64
	cnpInterval          time.Duration
	g, alpha0            float64
	alphaPeriod, timer   time.Duration
	byteCounter          int64
	fastRecovery         int
	burst                float64
}

func newCCParams(c CCConfig) ccParams {
	def := func(v, d int64) float64 {
		if v <= 0 {
			v = d
		}
		return float64(v) / bitsPerByte
	}
	dur := func(v, d time.Duration) time.Duration {
		if v <= 0 {
			return d
		}
		return v
	}
	p := ccParams{
		on:           c.Algorithm == CCDCQCN,
		ecn:          c.Algorithm == CCDCQCN || c.Algorithm == CCDelay,
		delay:        c.Algorithm == CCDelay,
		target:       dur(c.TargetDelay, DefaultTargetDelay),
		delayAI:      def(c.DelayAIRate, DefaultDelayAIRate),
		beta:         c.DelayBeta,
		maxMD:        c.DelayMaxDecrease,
		tclass:       c.TClass &^ transport.ECNMask,
		cnpTClass:    c.CNPTClass &^ transport.ECNMask,
		line:         def(c.LineRate, DefaultCCLineRate),
		min:          def(c.MinRate, DefaultCCMinRate),
		ai:           def(c.AIRate, DefaultAIRate),
		hai:          def(c.HAIRate, DefaultHAIRate),
		cnpInterval:  dur(c.CNPInterval, DefaultCNPInterval),
		g:            c.AlphaG,
		alpha0:       c.InitialAlpha,
		alphaPeriod:  dur(c.AlphaPeriod, DefaultAlphaPeriod),
		timer:        dur(c.RateTimer, DefaultRateTimer),
		byteCounter:  c.ByteCounter,
		fastRecovery: c.FastRecovery,
		burst:        float64(c.PaceBurst),
	}
	if c.CNPTClass == 0 {
		p.cnpTClass = DefaultCNPTClass
	}
	if p.g <= 0 || p.g > 1 {
		p.g = DefaultAlphaG
	}
	if p.alpha0 <= 0 || p.alpha0 > 1 {
		p.alpha0 = defaultInitialAlpha
	}
	if p.byteCounter <= 0 {
		p.byteCounter = DefaultByteCounter
	}
	if p.fastRecovery <= 0 {
		p.fastRecovery = DefaultFastRecovery
	}
	if p.burst <= 0 {
		p.burst = DefaultPaceBurst
	}
	if p.beta <= 0 {
		p.beta = DefaultDelayBeta
	}
	if p.maxMD <= 0 || p.maxMD >= 1 {
		p.maxMD = DefaultDelayMaxDecrease
	}
	p.min = min(p.min, p.line)
	return p
}

// tclassFor is the traffic class byte of packets to an address vector
// whose traffic class is av: av (or the device's default if 0), with
// ECT(0) when congestion control is on; as it is otherwise (rxe copies
// the address vector's byte into the IP header).
func (p *ccParams) tclassFor(av uint8) uint8 {
	if av == 0 {
		av = p.tclass
	}
	if p.ecn {
		return av&^transport.ECNMask | transport.ECNECT0
	}
	return av
}

// ccState is a QP's congestion control state: the notification point's
// (when it last sent a CNP) and the reaction point's (its rate).
type ccState struct {
	lastCNP time.Time // zero: never

	limited        bool    // a CNP cut the rate and it has not recovered
	rc, rt         float64 // current and target rate, bytes/s
	alpha          float64
	alphaAt, incAt time.Time // next α decay, next timer increase event
	bytes          int64     // bytes sent towards the byte counter
	tEvents        int       // timer increase events since the last cut
	bEvents        int       // byte-counter increase events since the last cut
	nextTx         time.Time // the pacer: when the next packet may leave
	paused         bool      // the pacer stopped the requester until nextTx
	lastAckReq     time.Time // when the limited QP last asked for an ACK
	ackDue         bool      // the next packet asks for an ACK (ackDueLocked)

	// CCDelay (cc_delay.go): one round-trip sample at a time.
	sampling  bool
	samplePSN wire.PSN
	sampleAt  time.Time
	lastCut   time.Time
	rtt       time.Duration
	since     time.Time // when the QP became limited
}

// CCState is a QP's congestion control state as QP.CCState reports it.
type CCState struct {
	// Limited says a CNP cut the QP's rate and it has not recovered to
	// the line rate; its requests are paced at Rate.
	Limited bool
	// Rate and Target are the current and target rates in bits per
	// second (the line rate while not limited).
	Rate, Target int64
	// Alpha is DCQCN's estimate of the congestion (0..1).
	Alpha float64
	// Since is when the QP became limited (zero if it is not).
	Since time.Time
	// RTT is the last round trip CCDelay measured (zero otherwise).
	RTT time.Duration
}

// CCState returns the QP's congestion control state.
func (qp *QP) CCState() CCState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	p := &qp.dev.cc
	s := &qp.cc
	if !s.limited {
		return CCState{Rate: int64(p.line * bitsPerByte), Target: int64(p.line * bitsPerByte), RTT: s.rtt}
	}
	return CCState{Limited: true, Rate: int64(s.rc * bitsPerByte), Target: int64(s.rt * bitsPerByte), Alpha: s.alpha, Since: s.since, RTT: s.rtt}
}

// onCELocked is the notification point: a packet for the QP arrived
// marked CE at now. It answers with a CNP unless it sent one less than
// CNPInterval ago.
func (qp *QP) onCELocked(now time.Time) {
	d := qp.dev
	d.Counters.CEPktsRcvd.Add(1)
	if !d.cc.on || qp.typ == verbs.QPTypeUD || qp.sec != nil {
		return
	}
	s := &qp.cc
	if !s.lastCNP.IsZero() && now.Sub(s.lastCNP) < d.cc.cnpInterval {
		return
	}
	s.lastCNP = now
	if qp.tx.n == txBatch {
		qp.flushLocked()
		if qp.tx.n == txBatch {
			qp.tx.send(d)
		}
	}
	pb := d.bufPool.Get().(*pktBuf)
	b := wire.EncodeCNP(pb.b[:], defaultPKey, qp.attr.DestQPNum)
	// From the QP's flow (its source port: the peer pins it) to its peer,
	// as a response: it leaves with the receive batch's ACKs.
	qp.tx.push(transport.Datagram{Buf: b, Peer: qp.dest, Local: qp.src, Flow: qp.qpn, TClass: d.cc.cnpTClass | transport.ECNECT0}, pb, nil, false)
	d.Counters.CNPsSent.Add(1)
}

// onCNPLocked is the reaction point: a CNP for the QP arrived at now.
func (qp *QP) onCNPLocked(now time.Time) {
	d := qp.dev
	p := &d.cc
	if !p.on || qp.typ == verbs.QPTypeUD {
		d.Counters.CNPsIgnored.Add(1)
		return
	}
	d.Counters.CNPsRcvd.Add(1)
	s := &qp.cc
	if !s.limited {
		s.limited = true
		s.rc, s.rt, s.alpha = p.line, p.line, p.alpha0
		s.since = now
		s.nextTx = now
		d.Counters.CCLimitedQPs.Add(1)
	}
	s.rt = s.rc
	s.rc = max(s.rc*(1-s.alpha/2), p.min)
	s.alpha = (1-p.g)*s.alpha + p.g
	s.alphaAt = now.Add(p.alphaPeriod)
	s.incAt = now.Add(p.timer)
	s.bytes, s.tEvents, s.bEvents = 0, 0, 0
	d.Counters.CCRateCuts.Add(1)
	qp.armTimerLocked(s.incAt)
}

// increase is one increase event; the caller has counted it (tEvents or
// bEvents): the first F of each kind are fast recovery.
func (s *ccState) increase(p *ccParams, now time.Time, c *Counters) {
	f := p.fastRecovery
	switch {
	case max(s.tEvents, s.bEvents) <= f:
		// Fast recovery: towards the rate before the cut.
	case min(s.tEvents, s.bEvents) > f:
		s.rt += float64(min(s.tEvents, s.bEvents)-f) * p.hai
	default:
		s.rt += p.ai
	}
	s.rt = min(s.rt, p.line)
	s.rc = min((s.rt+s.rc)/2, p.line)
	if s.rc >= p.line*lineRateTolerance {
		s.limited = false
		s.paused = false
		c.CCLimitedNanos.Add(uint64(max(now.Sub(s.since), 0)))
		c.CCLimitedQPs.Add(^uint64(0))
		s.since = time.Time{}
	}
}

// ccTimerLocked runs the QP's due α decays and timer increase events and
// reports whether the pacer lets a paused requester go on.
func (qp *QP) ccTimerLocked(now time.Time) (resume bool) {
	s := &qp.cc
	if !s.limited {
		return s.paused
	}
	p := &qp.dev.cc
	for p.on && !s.alphaAt.After(now) {
		s.alpha *= 1 - p.g
		s.alphaAt = s.alphaAt.Add(p.alphaPeriod)
	}
	for p.on && s.limited && !s.incAt.After(now) {
		s.tEvents++
		s.incAt = s.incAt.Add(p.timer)
		s.increase(p, now, &qp.dev.Counters)
	}
	if !s.paused {
		return false
	}
	if !s.limited || !s.nextTx.After(now) {
		s.paused = false
		return true
	}
	return false
}

// ccDeadlineLocked is when the QP's congestion control next needs the
// timer (zero: never): its α decay, its increase timer and, paused, its
// next transmission time.
func (qp *QP) ccDeadlineLocked() time.Time {
	s := &qp.cc
	if !s.limited {
		return time.Time{}
	}
	var at time.Time
	if qp.dev.cc.on {
		at = s.alphaAt
		if s.incAt.Before(at) {
			at = s.incAt
		}
	}
	if s.paused && (at.IsZero() || s.nextTx.Before(at)) {
		at = s.nextTx
	}
	return at
}

// paceLocked is the pacer's gate before the requester builds a packet:
// it reports whether the QP may send now, and if not, pauses the
// requester until its next transmission time. now may be zero (read from
// the clock only when the QP is limited); it returns the time it used.
func (qp *QP) paceLocked(now time.Time) (time.Time, bool) {
	s := &qp.cc
	if now.IsZero() {
		now = qp.dev.clock()
	}
	if !s.nextTx.After(now) {
		return now, true
	}
	s.paused = true
	qp.armTimerLocked(s.nextTx)
	return now, false
}

// ackDueLocked says whether the paced QP's next packet must ask for an
// ACK although the requester's rule (ackReqEvery packets) would not: a
// quarter of the local ACK timeout passed since it last asked. Slowed
// down, a QP may take longer than the timeout to send ackReqEvery
// packets, and its oldest packet would time out while its ACK was never
// asked for.
func (qp *QP) ackDueLocked(now time.Time) bool {
	t := wire.LocalACKTimeout(qp.attr.Timeout)
	return t > 0 && now.Sub(qp.cc.lastAckReq) >= t/4
}

// pacedLocked accounts n bytes the limited QP just queued at now: the
// next transmission time moves on by their time at the current rate (a
// QP that was idle gets at most PaceBurst bytes of credit), and the byte
// counter runs.
func (qp *QP) pacedLocked(n int, now time.Time, ackReq bool) {
	s := &qp.cc
	p := &qp.dev.cc
	if ackReq {
		s.lastAckReq = now
	}
	s.ackDue = false
	credit := time.Duration(p.burst / s.rc * float64(time.Second))
	if floor := now.Add(-credit); s.nextTx.Before(floor) {
		s.nextTx = floor
	}
	s.nextTx = s.nextTx.Add(time.Duration(float64(n) / s.rc * float64(time.Second)))
	s.bytes += int64(n)
	for p.on && s.limited && s.bytes >= p.byteCounter {
		s.bytes -= p.byteCounter
		s.bEvents++
		s.increase(p, now, &qp.dev.Counters)
	}
}

// ccResetLocked forgets the QP's congestion state (the QP left RTS or
// was reset).
func (qp *QP) ccResetLocked() {
	if qp.cc.limited {
		qp.dev.Counters.CCLimitedQPs.Add(^uint64(0))
	}
	qp.cc = ccState{}
}

// EachQP calls f for every QP of the device (for reporting, such as
// each QP's CCState). f must not create or destroy QPs.
func (d *Device) EachQP(f func(qp *QP)) { d.qps.each(f) }
