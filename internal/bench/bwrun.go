package bench

// Bandwidth measurement, as perftest 4.5's run_iter_bw (WRITE, READ, atomic
// and the SEND client), run_iter_bw_server (the SEND server) and run_iter_bi
// (bidirectional SEND) do it:
//
//	post ──► keep up to tx depth messages outstanding per QP, round robin
//	         over the QPs; one in every cq_mod messages (and each QP's last)
//	         is signaled; tposted[i] = clock at the post of message i
//	poll ──► up to 16 completions at a time; each counts cq_mod messages;
//	         tcompleted[j] = clock when the completion covering message j
//	         was polled
//
// then perftest.ComputeBW turns tposted/tcompleted into the peak, average
// and message rate. Messages of at most half a page step through the page
// in cache-line slots, the local and remote addresses in lockstep.

import (
	"context"
	"fmt"
	"time"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// bwQP is the per-QP state of a measurement: its send and receive work
// requests and counters (ctx->wr, ctx->scnt, ctx->ccnt, ...).
type bwQP struct {
	qp  verbs.QP
	wr  verbs.SendWR
	sge [1]verbs.SGE
	// list and lsge are the chain of Test.PostList requests posted at
	// once with -l (nil without): fixed addresses, stepped along the
	// chain, one signaled every cq_mod.
	list []verbs.SendWR
	lsge []verbs.SGE
	// myAddr and remAddr are slot 0's addresses, where the slots wrap.
	myAddr, remAddr uint64
	scnt, ccnt      uint64 // messages posted; messages completed (by cq_mod)
	sigPosted       uint64 // signaled messages posted
	sigDone         uint64 // their completions

	rwr    verbs.RecvWR
	rsge   [1]verbs.SGE
	rxAddr uint64
	rcnt   uint64 // receives completed
	posted uint64 // receives posted
	unused uint64 // completed receives not yet reposted
}

// BWRun is one bandwidth measurement of one message size at one end.
type BWRun struct {
	t    *Test
	ep   *Endpoint
	size uint64
	qps  []bwQP

	iters  uint64 // per QP; 0 in duration mode
	cqMod  uint64
	noPeak bool
	dur    bool
	ph     *Phases
	sample uint64 // messages counted in the sampled interval (-D)

	// --run_infinitely: the next report is due at nextReport (ticks);
	// lastSample and lastReport are the count and clock of the previous;
	// Test.Ctx is looked at again at nextCheck.
	nextReport, lastSample, lastReport, nextCheck uint64

	tposted, tcompleted []uint64
	wcs                 []verbs.WC
	rwcs                []verbs.WC
}

// NewBWRun prepares a bandwidth measurement of t at ep. The caller
// prepares the sends (SetSendWQEs) on a sending end and the receives
// (SetRecvWQEs) on a SEND receiver, then runs Run, RunServer or RunBi.
func NewBWRun(t *Test, ep *Endpoint) *BWRun {
	b := &BWRun{t: t, ep: ep, size: t.Size, qps: make([]bwQP, len(ep.QPs)),
		iters: t.Iters, cqMod: uint64(t.CQMod), noPeak: t.NoPeak, dur: t.dur(),
		wcs: make([]verbs.WC, PollBatch), rwcs: make([]verbs.WC, max(t.RxDepth, 1))}
	n := b.iters * uint64(len(ep.QPs))
	if b.noPeak || n == 0 {
		n = 1
	}
	b.tposted, b.tcompleted = make([]uint64, n), make([]uint64, n)
	for i := range b.qps {
		b.qps[i].qp = ep.QPs[i]
	}
	return b
}

// SetSendWQEs prepares each QP's send request (ctx_set_send_reg_wqes).
func (b *BWRun) SetSendWQEs() {
	verb := b.t.Verb
	for i := range b.qps {
		q := &b.qps[i]
		rem := b.ep.Remote[i]
		q.sge[0] = verbs.SGE{Addr: b.ep.sendAddr(i), Length: uint32(b.size), LKey: b.ep.lkey(i)}
		q.wr = verbs.SendWR{WRID: uint64(i), SGList: q.sge[:]}
		q.myAddr, q.remAddr = q.sge[0].Addr, rem.VAddr
		switch verb {
		case perftest.Write:
			q.wr.Opcode = verbs.WRRDMAWrite
		case perftest.Read:
			q.wr.Opcode = verbs.WRRDMARead
		case perftest.Send:
			q.wr.Opcode = verbs.WRSend
		case perftest.Atomic:
			q.wr.Opcode = verbs.WRAtomicFetchAndAdd
			q.wr.CompareAdd = 1 // ATOMIC_ADD_VALUE
			if b.t.AtomicOp == perftest.CmpAndSwap {
				q.wr.Opcode = verbs.WRAtomicCmpAndSwp
				q.wr.CompareAdd, q.wr.Swap = 0, 0 // ATOMIC_SWAP_VALUE
			}
		}
		if verb != perftest.Send {
			q.wr.RemoteAddr, q.wr.RKey = rem.VAddr, rem.RKey
		}
		if rem.AH != nil {
			q.wr.AH, q.wr.RemoteQPN, q.wr.RemoteQKey = rem.AH, rem.QPN, rem.QKey
		}
		if b.cqMod == 1 {
			q.wr.SendFlags = verbs.SendSignaled
		}
		if (verb == perftest.Send || verb == perftest.Write) && b.size <= uint64(b.t.Inline) {
			q.wr.SendFlags |= verbs.SendInline
		}
		q.scnt, q.ccnt, q.sigPosted, q.sigDone = 0, 0, 0, 0
		q.list, q.lsge = nil, nil
		if pl := b.postList(); pl > 1 {
			b.setList(q, pl)
		}
	}
}

// postList is the -l post list size: 1 without one.
func (b *BWRun) postList() uint64 { return uint64(max(b.t.PostList, 1)) }

// setList builds q's chain of n requests from q.wr (ctx_set_send_reg_wqes
// with post_list > 1): request j uses slot j, locally and remotely, and
// is signaled when (j+1) is a multiple of cq_mod.
func (b *BWRun) setList(q *bwQP, n uint64) {
	stride, slots := b.ep.Slots(b.size)
	q.list, q.lsge = make([]verbs.SendWR, n), make([]verbs.SGE, n)
	for j := range q.list {
		off := uint64(0)
		if stride != 0 {
			off = uint64(j) % slots * stride
		}
		q.lsge[j] = q.sge[0]
		q.lsge[j].Addr += off
		w := q.wr
		w.SGList = q.lsge[j : j+1]
		if b.t.Verb != perftest.Send {
			w.RemoteAddr += off
		}
		w.SendFlags &^= verbs.SendSignaled
		if uint64(j+1)%b.cqMod == 0 {
			w.SendFlags |= verbs.SendSignaled
		}
		q.list[j] = w
	}
	for j := range q.list[:n-1] {
		q.list[j].Next = &q.list[j+1]
	}
}

// SetRecvWQEs posts each QP's receives (ctx_set_recv_wqes): rx depth of
// them, stepping through the slots of the QP's receive region.
func (b *BWRun) SetRecvWQEs() error {
	stride, n := b.ep.Slots(b.size)
	for i := range b.qps {
		q := &b.qps[i]
		q.rxAddr = b.ep.recvAddr(i) + b.ep.RecvShift
		q.rsge[0] = verbs.SGE{Addr: q.rxAddr, Length: uint32(b.size) + b.ep.RecvExtra, LKey: b.ep.lkey(i)}
		q.rwr = verbs.RecvWR{WRID: uint64(i), SGList: q.rsge[:]}
		for j := uint64(0); j < uint64(b.t.RxDepth); j++ {
			if err := q.qp.PostRecv(&q.rwr); err != nil {
				return fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
			b.credit()
			b.stepRecv(q, stride, n, j)
		}
		q.rsge[0].Addr = q.rxAddr
		q.rcnt, q.posted, q.unused = 0, uint64(b.t.RxDepth), 0
	}
	return nil
}

// stepRecv moves a receive request to the next slot (increase_loc_addr).
func (b *BWRun) stepRecv(q *bwQP, stride, n, cnt uint64) {
	if stride == 0 {
		return
	}
	q.rsge[0].Addr += stride
	if (cnt+1)%n == 0 {
		q.rsge[0].Addr = q.rxAddr
	}
}

// stepSend moves a send request to the next slot, locally and (except for
// SEND) remotely (increase_loc_addr, increase_rem_addr).
func (b *BWRun) stepSend(q *bwQP, stride, n uint64) {
	if stride == 0 {
		return
	}
	wrap := (q.scnt+1)%n == 0
	q.sge[0].Addr += stride
	if wrap {
		q.sge[0].Addr = q.myAddr
	}
	if b.t.Verb != perftest.Send {
		q.wr.RemoteAddr += stride
		if wrap {
			q.wr.RemoteAddr = q.remAddr
		}
	}
}

// post posts q's next message with perftest's signaling rule: a message is
// signaled when its index is cq_mod−1 modulo cq_mod, or it is the QP's last.
func (b *BWRun) post(q *bwQP, i int, totscnt uint64, stride, n uint64) error {
	if q.list != nil {
		return b.postChain(q, i, totscnt)
	}
	if b.cqMod > 1 && q.scnt%b.cqMod == 0 && !(!b.dur && q.scnt == b.iters-1) {
		q.wr.SendFlags &^= verbs.SendSignaled
	}
	if !b.noPeak {
		b.tposted[totscnt] = Ticks()
	}
	if err := q.qp.PostSend(&q.wr); err != nil {
		return fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, q.scnt, err)
	}
	if q.wr.SendFlags&verbs.SendSignaled != 0 {
		q.sigPosted++
	}
	b.stepSend(q, stride, n)
	q.scnt++
	if q.scnt%b.cqMod == b.cqMod-1 || (!b.dur && q.scnt == b.iters-1) {
		q.wr.SendFlags |= verbs.SendSignaled
	}
	return nil
}

// postChain posts q's post list in one PostSend (post_send_method with
// post_list > 1). Every message of the chain gets the post time, so the
// peak is computed over real times (perftest leaves them 0).
func (b *BWRun) postChain(q *bwQP, i int, totscnt uint64) error {
	n := uint64(len(q.list))
	if !b.noPeak {
		now := Ticks()
		for j := totscnt; j < min(totscnt+n, uint64(len(b.tposted))); j++ {
			b.tposted[j] = now
		}
	}
	if err := q.qp.PostSend(&q.list[0]); err != nil {
		return fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, q.scnt, err)
	}
	q.sigPosted += n / b.cqMod
	q.scnt += n
	return nil
}

// postWindow posts, round robin over the QPs, as many messages as each
// QP's tx depth lets it have outstanding, until its iterations (or the
// duration) are over; totscnt counts them over all QPs.
func (b *BWRun) postWindow(totscnt *uint64, txDepth, stride, n uint64) error {
	pl := b.postList()
	if len(b.qps) > 1 && b.ep.Ctx != nil {
		// Posts to several QPs leave together (verbs.DoorbellBatcher).
		defer verbs.HoldDoorbells(b.ep.Ctx)()
	}
	for i := range b.qps {
		q := &b.qps[i]
		for (b.dur || q.scnt < b.iters) && q.scnt-q.ccnt+pl <= txDepth {
			if b.dur && b.ph.At(Ticks()) == PhaseEnd {
				break
			}
			if !b.takeCredit() {
				break
			}
			if err := b.post(q, i, *totscnt, stride, n); err != nil {
				return err
			}
			*totscnt += pl
		}
	}
	return nil
}

// sendCompletions handles polled send completions (each covers cq_mod
// messages).
func (b *BWRun) sendCompletions(wcs []verbs.WC, totccnt *uint64, totIters uint64) error {
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(b.qps)) {
			return compError("client", wc, fmt.Sprintf("ccnt=%d", *totccnt))
		}
		q := &b.qps[wc.WRID]
		q.ccnt += b.cqMod
		q.sigDone++
		*totccnt += b.cqMod
		now := Ticks()
		if !b.noPeak {
			j := min(*totccnt, totIters)
			b.tcompleted[j-1] = now
		}
		if b.dur && b.ph.At(now) == PhaseSample {
			b.sample += b.cqMod
		}
	}
	return nil
}

// Run is run_iter_bw: WRITE, READ and atomic bandwidth (both sides in
// duplex tests) and the SEND client.
func (b *BWRun) Run() error {
	nq := uint64(len(b.qps))
	totIters := b.iters * nq
	txDepth := uint64(b.t.TxDepth)
	stride, n := b.ep.Slots(b.size)
	if b.dur {
		b.ph = newPhases(b.t, Ticks())
	}
	if !b.dur && b.noPeak {
		b.tposted[0] = Ticks()
	}
	w := newWatch(b.t, b.ep)
	var totscnt, totccnt uint64
	b.startReports()
	for totscnt < totIters || totccnt < totIters || (b.dur && b.ph.At(Ticks()) != PhaseEnd) {
		if err := b.reportInterval(); err != nil {
			return err
		}
		if err := b.postWindow(&totscnt, txDepth, stride, n); err != nil {
			return err
		}
		if totccnt < totIters || (b.dur && totccnt < totscnt) {
			got, err := w.poll(b.ep.SendCQ, b.wcs)
			if err != nil {
				return fmt.Errorf("poll CQ failed: %w", err)
			}
			if got == 0 {
				if err := w.wait(b.ep.SendCQ); err != nil {
					return err
				}
				continue
			}
			w.progress()
			if err := b.sendCompletions(b.wcs[:got], &totccnt, totIters); err != nil {
				return err
			}
		}
	}
	if !b.dur && b.noPeak {
		b.tcompleted[0] = Ticks()
	}
	return b.drain()
}

// drain waits for the completions of every signaled message still
// outstanding (perftest leaves them in the CQ; a following message size
// must not count them). A duration run has one size and stops at its end
// as perftest does, leaving the messages in flight to the QPs' teardown:
// a full send queue of large messages behind a slow or congested link
// takes far longer than the run to complete, and the peer waiting at the
// closing barrier does not wait for ever.
func (b *BWRun) drain() error {
	if b.dur {
		return nil
	}
	w := newWatch(b.t, b.ep)
	for {
		pending := false
		for i := range b.qps {
			if b.qps[i].sigDone < b.qps[i].sigPosted {
				pending = true
			}
		}
		if !pending {
			return nil
		}
		got, err := w.poll(b.ep.SendCQ, b.wcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if got == 0 {
			if err := w.wait(b.ep.SendCQ); err != nil {
				return err
			}
			continue
		}
		w.progress()
		for _, wc := range b.wcs[:got] {
			if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(b.qps)) {
				return compError("client", &wc, "while draining")
			}
			b.qps[wc.WRID].sigDone++
		}
	}
}

// recvCompletions handles polled receive completions, reposting receives
// while more messages are due (run_iter_bw_server, run_iter_bi).
func (b *BWRun) recvCompletions(wcs []verbs.WC, totrcnt *uint64) error {
	stride, n := b.ep.Slots(b.size)
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(b.qps)) {
			return compError("server", wc, fmt.Sprintf("rcnt=%d", *totrcnt))
		}
		q := &b.qps[wc.WRID]
		q.rcnt++
		q.unused++
		*totrcnt++
		if b.dur && b.ph.At(Ticks()) == PhaseSample {
			b.sample++
		}
		if (b.dur || q.posted+1 <= b.iters) && q.unused >= 1 {
			if err := q.qp.PostRecv(&q.rwr); err != nil {
				return fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", wc.WRID, q.rcnt, err)
			}
			b.credit()
			q.unused--
			q.posted++
			b.stepRecv(q, stride, n, q.posted)
		}
	}
	return nil
}

// RunServer is run_iter_bw_server: the SEND server counts receives; the
// clock starts at the first one.
func (b *BWRun) RunServer() error {
	totIters := b.iters * uint64(len(b.qps))
	w := newWatch(b.t, b.ep)
	first := true
	lastEmpty := Ticks()
	var totrcnt uint64
	if b.t.infinite() {
		// run_iter_bw_infinitely_server: the clock starts at once.
		first = false
		b.ph = newPhases(b.t, Ticks())
		b.startReports()
	}
	for totrcnt < totIters || (b.dur && b.ph.At(Ticks()) != PhaseEnd) {
		if err := b.reportInterval(); err != nil {
			return err
		}
		got, err := w.poll(b.ep.RecvCQ, b.rwcs[:min(PollBatch, len(b.rwcs))])
		if err != nil {
			return fmt.Errorf("Poll Receive CQ failed: %w", err)
		}
		if got == 0 {
			if first {
				lastEmpty = Ticks()
			}
			if err := w.wait(b.ep.RecvCQ); err != nil {
				return err
			}
			continue
		}
		w.progress()
		if first {
			first = false
			if b.dur {
				b.ph = newPhases(b.t, Ticks())
			} else {
				// perftest stamps its first non-empty poll, which its
				// busy loop makes the first arrival. A goroutine can be
				// off its CPU while the whole run arrives (UD on
				// loopback: 500 GB/s); the last poll that found the CQ
				// empty is the latest time known to precede it.
				b.tposted[0] = lastEmpty
			}
		}
		if err := b.recvCompletions(b.rwcs[:got], &totrcnt); err != nil {
			return err
		}
	}
	if !b.dur {
		b.tcompleted[0] = Ticks()
	}
	return nil
}

// RunBi is run_iter_bi: bidirectional SEND. The client sends at once, the
// server once its first message arrives.
func (b *BWRun) RunBi() error {
	nq := uint64(len(b.qps))
	totIters := b.iters * nq
	txDepth := uint64(b.t.TxDepth)
	stride, n := b.ep.Slots(b.size)
	if b.noPeak {
		b.tposted[0] = Ticks()
	}
	beforeFirstRx := b.t.Role == perftest.Server
	if !beforeFirstRx && b.dur {
		b.ph = newPhases(b.t, Ticks())
	}
	w := newWatch(b.t, b.ep)
	var totscnt, totccnt, totrcnt uint64
	for (b.dur && b.ph.At(Ticks()) != PhaseEnd) || totccnt < totIters || totrcnt < totIters {
		if !beforeFirstRx {
			if err := b.postWindow(&totscnt, txDepth, stride, n); err != nil {
				return err
			}
		}
		got, err := b.ep.RecvCQ.Poll(b.rwcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if got > 0 {
			if beforeFirstRx {
				beforeFirstRx = false
				if b.dur {
					b.ph = newPhases(b.t, Ticks())
				}
			}
			if err := b.recvCompletions(b.rwcs[:got], &totrcnt); err != nil {
				return err
			}
		}
		sent, err := b.ep.SendCQ.Poll(b.wcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if err := b.sendCompletions(b.wcs[:sent], &totccnt, totIters); err != nil {
			return err
		}
		if got == 0 && sent == 0 {
			// Both CQs empty: with -e, sleep until either has an event
			// (perftest's run_iter_bi waits before its receive poll).
			if err := w.waitAny(b.ep.RecvCQ); err != nil {
				return err
			}
		} else {
			w.progress()
		}
	}
	if b.noPeak && !b.dur {
		b.tcompleted[0] = Ticks()
	}
	return b.drain()
}

// startReports starts the clock of --run_infinitely's reports.
func (b *BWRun) startReports() {
	if !b.t.infinite() {
		return
	}
	now := Ticks()
	b.lastReport, b.nextReport = now, now+uint64(b.t.Interval)
}

// reportInterval passes Test.Report the result of the last interval once
// it is over (print_bw_infinite_mode): the messages completed since the
// previous report over the time since then. Like perftest, a
// bidirectional WRITE or READ counts both directions.
func (b *BWRun) reportInterval() error {
	if !b.t.infinite() {
		return nil
	}
	now := Ticks()
	if now >= b.nextCheck && b.t.Ctx != nil {
		// A run that makes progress never reaches the watch's checks.
		if b.t.Ctx.Err() != nil {
			return context.Cause(b.t.Ctx)
		}
		b.nextCheck = now + uint64(10*time.Millisecond)
	}
	if now < b.nextReport {
		return nil
	}
	rep := perftest.BWReport{Size: b.size} // an interval without completions: a row of zeros
	if n := b.sample - b.lastSample; n > 0 {
		p := perftest.BWParams{Size: b.size, Iters: n, NumQPs: 1, CQMod: int(b.cqMod),
			NoPeak: true, TicksPerUsec: TicksPerUsec, Gbits: b.t.Gbits}
		var err error
		if rep, err = perftest.ComputeBW([]uint64{b.lastReport}, []uint64{now}, p); err != nil {
			return err
		}
	}
	if b.t.Duplex && b.t.Verb != perftest.Send {
		rep.BWAvg, rep.MsgRate = 2*rep.BWAvg, 2*rep.MsgRate
	}
	b.lastSample, b.lastReport, b.nextReport = b.sample, now, now+uint64(b.t.Interval)
	if b.t.Report != nil {
		return b.t.Report(rep)
	}
	return nil
}

// Report computes this end's result (print_report_bw).
func (b *BWRun) Report() (perftest.BWReport, error) {
	p := perftest.BWParams{Size: b.size, Iters: b.iters, NumQPs: len(b.qps), CQMod: int(b.cqMod),
		NoPeak: b.noPeak, TicksPerUsec: TicksPerUsec, Gbits: b.t.Gbits}
	tposted, tcompleted := b.tposted, b.tcompleted
	if b.dur {
		if b.ph == nil || b.sample == 0 {
			return perftest.BWReport{}, fmt.Errorf("no messages completed in the %d s measured", b.t.Duration-2*b.t.Margin)
		}
		// The iteration count of a duration run is already the total.
		p.Iters, p.NumQPs, p.NoPeak = b.sample, 1, true
		tposted, tcompleted = []uint64{b.ph.SampleStart}, []uint64{b.ph.SampleEnd}
		rep, err := perftest.ComputeBW(tposted, tcompleted, p)
		rep.CPUUtil = b.ph.cpuUtil()
		return rep, err
	}
	return perftest.ComputeBW(tposted, tcompleted, p)
}

// Posted returns how many messages QP i posted.
func (b *BWRun) Posted(i int) uint64 { return b.qps[i].scnt }

// takeCredit claims a receive of the peer for a SEND, when Test.Credits
// is set; it reports false when none is left.
func (b *BWRun) takeCredit() bool {
	c := b.t.Credits
	if c == nil || b.t.Verb != perftest.Send {
		return true
	}
	if c.Load() <= 0 {
		return false
	}
	c.Add(-1) // only the sending goroutine takes credits
	return true
}

// credit announces a posted receive, when Test.Credits is set.
func (b *BWRun) credit() {
	if c := b.t.Credits; c != nil {
		c.Add(1)
	}
}
