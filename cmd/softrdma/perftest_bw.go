package main

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
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// ptPollBatch is perftest's CTX_POLL_BATCH.
const ptPollBatch = 16

// Duration mode (-D): a run goes through perftest's phases, driven by the
// clock here rather than by SIGALRM: a warm-up margin, the sampled interval,
// a cool-down margin, the end.
const (
	ptPhaseStart = iota
	ptPhaseSample
	ptPhaseStopSample
	ptPhaseEnd
)

// ptPhases are the phase boundaries of a duration-mode run, in ticks.
type ptPhases struct {
	sampleStart, sampleEnd, end uint64
	cpu                         *ptCPUSampler // --cpu_util
}

func newPTPhases(o *ptOptions, now uint64) *ptPhases {
	margin, dur := uint64(o.margin)*1e9, uint64(o.duration)*1e9
	p := &ptPhases{sampleStart: now + margin, sampleEnd: now + dur - margin, end: now + dur}
	if o.cpuUtilOn() {
		p.cpu = startPTCPUSampler(p)
	}
	return p
}

// at returns the phase at now; a run whose phases have not started (nil)
// is in the start phase.
func (p *ptPhases) at(now uint64) int {
	switch {
	case p == nil || now < p.sampleStart:
		return ptPhaseStart
	case now < p.sampleEnd:
		return ptPhaseSample
	case now < p.end:
		return ptPhaseStopSample
	}
	return ptPhaseEnd
}

// ptQP is the per-QP state of a measurement: its send and receive work
// requests and counters (ctx->wr, ctx->scnt, ctx->ccnt, ...).
type ptQP struct {
	qp  verbs.QP
	wr  verbs.SendWR
	sge [1]verbs.SGE
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

// ptBW is one bandwidth measurement of one message size.
type ptBW struct {
	r    *ptRun
	o    *ptOptions
	res  *ptResources
	size uint64
	qps  []ptQP

	iters  uint64 // per QP; 0 in duration mode
	cqMod  uint64
	noPeak bool
	dur    bool
	ph     *ptPhases
	sample uint64 // messages counted in the sampled interval (-D)

	tposted, tcompleted []uint64
	wcs                 []verbs.WC
	rwcs                []verbs.WC
}

func newPTBW(r *ptRun, size uint64) *ptBW {
	o := r.o
	b := &ptBW{r: r, o: o, res: r.res, size: size, qps: make([]ptQP, o.numQPs),
		iters: uint64(o.iters), cqMod: uint64(o.cqMod), noPeak: o.noPeak, dur: o.duration > 0,
		wcs: make([]verbs.WC, ptPollBatch), rwcs: make([]verbs.WC, max(o.rxDepth, 1))}
	n := b.iters * uint64(o.numQPs)
	if b.noPeak || n == 0 {
		n = 1
	}
	b.tposted, b.tcompleted = make([]uint64, n), make([]uint64, n)
	for i := range b.qps {
		b.qps[i].qp = r.res.qps[i]
	}
	return b
}

// setSendWQEs prepares each QP's send request (ctx_set_send_reg_wqes).
func (b *ptBW) setSendWQEs() {
	verb := b.o.test.verb
	for i := range b.qps {
		q := &b.qps[i]
		rem := b.r.remote[i]
		q.sge[0] = verbs.SGE{Addr: b.res.base + b.res.sendOff(i), Length: uint32(b.size), LKey: b.res.mr.LKey()}
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
			if b.o.atomicOp == perftest.CmpAndSwap {
				q.wr.Opcode = verbs.WRAtomicCmpAndSwp
				q.wr.CompareAdd, q.wr.Swap = 0, 0 // ATOMIC_SWAP_VALUE
			}
		}
		if verb != perftest.Send {
			q.wr.RemoteAddr, q.wr.RKey = rem.VAddr, rem.RKey
		}
		if b.cqMod == 1 {
			q.wr.SendFlags = verbs.SendSignaled
		}
		if (verb == perftest.Send || verb == perftest.Write) && b.size <= uint64(b.r.inline) {
			q.wr.SendFlags |= verbs.SendInline
		}
		q.scnt, q.ccnt, q.sigPosted, q.sigDone = 0, 0, 0, 0
	}
}

// setRecvWQEs posts each QP's receives (ctx_set_recv_wqes): rx depth of
// them, stepping through the slots of the QP's receive region.
func (b *ptBW) setRecvWQEs() error {
	stride, n := b.res.slots(b.size)
	for i := range b.qps {
		q := &b.qps[i]
		q.rxAddr = b.res.base + b.res.recvOff(i)
		q.rsge[0] = verbs.SGE{Addr: q.rxAddr, Length: uint32(b.size), LKey: b.res.mr.LKey()}
		q.rwr = verbs.RecvWR{WRID: uint64(i), SGList: q.rsge[:]}
		for j := uint64(0); j < uint64(b.o.rxDepth); j++ {
			if err := q.qp.PostRecv(&q.rwr); err != nil {
				return fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
			b.stepRecv(q, stride, n, j)
		}
		q.rsge[0].Addr = q.rxAddr
		q.rcnt, q.posted, q.unused = 0, uint64(b.o.rxDepth), 0
	}
	return nil
}

// stepRecv moves a receive request to the next slot (increase_loc_addr).
func (b *ptBW) stepRecv(q *ptQP, stride, n, cnt uint64) {
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
func (b *ptBW) stepSend(q *ptQP, stride, n uint64) {
	if stride == 0 {
		return
	}
	wrap := (q.scnt+1)%n == 0
	q.sge[0].Addr += stride
	if wrap {
		q.sge[0].Addr = q.myAddr
	}
	if b.o.test.verb != perftest.Send {
		q.wr.RemoteAddr += stride
		if wrap {
			q.wr.RemoteAddr = q.remAddr
		}
	}
}

// post posts q's next message with perftest's signaling rule: a message is
// signaled when its index is cq_mod−1 modulo cq_mod, or it is the QP's last.
func (b *ptBW) post(q *ptQP, i int, totscnt uint64, stride, n uint64) error {
	if b.cqMod > 1 && q.scnt%b.cqMod == 0 && !(!b.dur && q.scnt == b.iters-1) {
		q.wr.SendFlags &^= verbs.SendSignaled
	}
	if !b.noPeak {
		b.tposted[totscnt] = ptTicks()
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

// sendCompletions handles polled send completions (each covers cq_mod
// messages).
func (b *ptBW) sendCompletions(wcs []verbs.WC, totccnt *uint64, totIters uint64) error {
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(b.qps)) {
			return ptCompError("client", wc, fmt.Sprintf("ccnt=%d", *totccnt))
		}
		q := &b.qps[wc.WRID]
		q.ccnt += b.cqMod
		q.sigDone++
		*totccnt += b.cqMod
		now := ptTicks()
		if !b.noPeak {
			j := min(*totccnt, totIters)
			b.tcompleted[j-1] = now
		}
		if b.dur && b.ph.at(now) == ptPhaseSample {
			b.sample += b.cqMod
		}
	}
	return nil
}

// run is run_iter_bw: WRITE, READ and atomic bandwidth (both sides in
// duplex tests) and the SEND client.
func (b *ptBW) run() error {
	nq := uint64(len(b.qps))
	totIters := b.iters * nq
	txDepth := uint64(b.o.txDepth)
	stride, n := b.res.slots(b.size)
	if b.dur {
		b.ph = newPTPhases(b.o, ptTicks())
	}
	if !b.dur && b.noPeak {
		b.tposted[0] = ptTicks()
	}
	w := newPTWatch(b.r.env.ctx)
	var totscnt, totccnt uint64
	for totscnt < totIters || totccnt < totIters || (b.dur && b.ph.at(ptTicks()) != ptPhaseEnd) {
		for i := range b.qps {
			q := &b.qps[i]
			for (b.dur || q.scnt < b.iters) && q.scnt-q.ccnt+1 <= txDepth {
				if b.dur && b.ph.at(ptTicks()) == ptPhaseEnd {
					break
				}
				if err := b.post(q, i, totscnt, stride, n); err != nil {
					return err
				}
				totscnt++
			}
		}
		if totccnt < totIters || (b.dur && totccnt < totscnt) {
			got, err := b.res.sendCQ.Poll(b.wcs)
			if err != nil {
				return fmt.Errorf("poll CQ failed: %w", err)
			}
			if got == 0 {
				if err := w.idle(); err != nil {
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
		b.tcompleted[0] = ptTicks()
	}
	return b.drain()
}

// drain waits for the completions of every signaled message still
// outstanding (perftest leaves them in the CQ; a following message size
// must not count them). In duration mode, where the peer may stop
// receiving first, it gives up quietly.
func (b *ptBW) drain() error {
	w := newPTWatch(b.r.env.ctx)
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
		got, err := b.res.sendCQ.Poll(b.wcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if got == 0 {
			if err := w.idle(); err != nil {
				if b.dur {
					return nil
				}
				return err
			}
			continue
		}
		w.progress()
		for _, wc := range b.wcs[:got] {
			if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(b.qps)) {
				if b.dur {
					return nil
				}
				return ptCompError("client", &wc, "while draining")
			}
			b.qps[wc.WRID].sigDone++
		}
	}
}

// recvCompletions handles polled receive completions, reposting receives
// while more messages are due (run_iter_bw_server, run_iter_bi).
func (b *ptBW) recvCompletions(wcs []verbs.WC, totrcnt *uint64) error {
	stride, n := b.res.slots(b.size)
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(b.qps)) {
			return ptCompError("server", wc, fmt.Sprintf("rcnt=%d", *totrcnt))
		}
		q := &b.qps[wc.WRID]
		q.rcnt++
		q.unused++
		*totrcnt++
		if b.dur && b.ph.at(ptTicks()) == ptPhaseSample {
			b.sample++
		}
		if (b.dur || q.posted+1 <= b.iters) && q.unused >= 1 {
			if err := q.qp.PostRecv(&q.rwr); err != nil {
				return fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", wc.WRID, q.rcnt, err)
			}
			q.unused--
			q.posted++
			b.stepRecv(q, stride, n, q.posted)
		}
	}
	return nil
}

// runServer is run_iter_bw_server: the SEND server counts receives; the
// clock starts at the first one.
func (b *ptBW) runServer() error {
	totIters := b.iters * uint64(len(b.qps))
	w := newPTWatch(b.r.env.ctx)
	first := true
	var totrcnt uint64
	for totrcnt < totIters || (b.dur && b.ph.at(ptTicks()) != ptPhaseEnd) {
		got, err := b.res.recvCQ.Poll(b.rwcs[:min(ptPollBatch, len(b.rwcs))])
		if err != nil {
			return fmt.Errorf("Poll Receive CQ failed: %w", err)
		}
		if got == 0 {
			if err := w.idle(); err != nil {
				return err
			}
			continue
		}
		w.progress()
		if first {
			first = false
			if b.dur {
				b.ph = newPTPhases(b.o, ptTicks())
			} else {
				b.tposted[0] = ptTicks()
			}
		}
		if err := b.recvCompletions(b.rwcs[:got], &totrcnt); err != nil {
			return err
		}
	}
	if !b.dur {
		b.tcompleted[0] = ptTicks()
	}
	return nil
}

// runBi is run_iter_bi: bidirectional SEND. The client sends at once, the
// server once its first message arrives.
func (b *ptBW) runBi() error {
	nq := uint64(len(b.qps))
	totIters := b.iters * nq
	txDepth := uint64(b.o.txDepth)
	stride, n := b.res.slots(b.size)
	if b.noPeak {
		b.tposted[0] = ptTicks()
	}
	beforeFirstRx := b.o.role() == perftest.Server
	if !beforeFirstRx && b.dur {
		b.ph = newPTPhases(b.o, ptTicks())
	}
	w := newPTWatch(b.r.env.ctx)
	var totscnt, totccnt, totrcnt uint64
	for (b.dur && b.ph.at(ptTicks()) != ptPhaseEnd) || totccnt < totIters || totrcnt < totIters {
		for i := range b.qps {
			q := &b.qps[i]
			for !beforeFirstRx && (b.dur || q.scnt < b.iters) && q.scnt-q.ccnt+1 <= txDepth {
				if b.dur && b.ph.at(ptTicks()) == ptPhaseEnd {
					break
				}
				if err := b.post(q, i, totscnt, stride, n); err != nil {
					return err
				}
				totscnt++
			}
		}
		got, err := b.res.recvCQ.Poll(b.rwcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if got > 0 {
			if beforeFirstRx {
				beforeFirstRx = false
				if b.dur {
					b.ph = newPTPhases(b.o, ptTicks())
				}
			}
			if err := b.recvCompletions(b.rwcs[:got], &totrcnt); err != nil {
				return err
			}
		}
		sent, err := b.res.sendCQ.Poll(b.wcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if err := b.sendCompletions(b.wcs[:sent], &totccnt, totIters); err != nil {
			return err
		}
		if got == 0 && sent == 0 {
			if err := w.idle(); err != nil {
				return err
			}
		} else {
			w.progress()
		}
	}
	if b.noPeak && !b.dur {
		b.tcompleted[0] = ptTicks()
	}
	return b.drain()
}

// report computes this side's result (print_report_bw).
func (b *ptBW) report() (perftest.BWReport, error) {
	p := perftest.BWParams{Size: b.size, Iters: b.iters, NumQPs: len(b.qps), CQMod: int(b.cqMod),
		NoPeak: b.noPeak, TicksPerUsec: ptTicksPerUsec, Gbits: b.o.gbits}
	tposted, tcompleted := b.tposted, b.tcompleted
	if b.dur {
		if b.ph == nil || b.sample == 0 {
			return perftest.BWReport{}, fmt.Errorf("no messages completed in the %d s measured", b.o.duration-2*b.o.margin)
		}
		// The iteration count of a duration run is already the total.
		p.Iters, p.NumQPs, p.NoPeak = b.sample, 1, true
		tposted, tcompleted = []uint64{b.ph.sampleStart}, []uint64{b.ph.sampleEnd}
		rep, err := perftest.ComputeBW(tposted, tcompleted, p)
		rep.CPUUtil = b.ph.cpu.util()
		return rep, err
	}
	return perftest.ComputeBW(tposted, tcompleted, p)
}

// verifyRead checks, on a READ client, that what each QP read is what a
// softrdma server filled its buffer with (nothing is checked against other
// peers).
func (b *ptBW) verifyRead() error {
	if b.o.test.verb != perftest.Read || (b.o.role() != perftest.Client && !b.o.duplex) {
		return nil
	}
	_, n := b.res.slots(b.size)
	seed := ptSeed(b.r.remote[0].PSN)
	for i := range b.qps {
		slots := min(b.qps[i].scnt, n)
		if slots == 0 {
			continue
		}
		if err := b.res.verifySlots("RDMA READ data", i, b.res.sendOff(i), b.r.remote[i].VAddr, seed, b.size, slots); err != nil {
			return err
		}
	}
	return nil
}

// verifyServer checks what the client of a one-sided bandwidth test left in
// this server's memory, knowing the client's report rem:
//
//   - WRITE: every slot the client wrote holds the softrdma client's pattern
//     (skipped for other clients, whose data is random);
//   - FETCH_AND_ADD: the slots' values grew by one per message in total.
//     perftest clients add 1 per message too, but may do extra warm-up
//     iterations, so a mismatch is a warning, not an error.
func (r *ptRun) verifyServer(rem perftest.BWReport) error {
	o, res := r.o, r.res
	nq := uint64(o.numQPs)
	if o.duration > 0 || rem.Iters == 0 || rem.Size == 0 || rem.Size > o.size {
		return nil
	}
	switch {
	case o.test.verb == perftest.Write:
		_, n := res.slots(rem.Size)
		slots := min(rem.Iters/nq, n)
		seed := ptSeed(r.remote[0].PSN)
		for i := range r.remote {
			peerSend := r.remote[i].VAddr - nq*res.buffSize
			if err := res.verifySlots("RDMA WRITE data", i, res.vaddrOff(i), peerSend, seed, rem.Size, slots); err != nil {
				return err
			}
		}
	case o.test.verb == perftest.Atomic && o.atomicOp == perftest.FetchAndAdd:
		stride, n := res.slots(8)
		seed := ptSeed(r.local[0].PSN)
		var sum uint64
		for i := 0; i < o.numQPs; i++ {
			for s := uint64(0); s < n; s++ {
				off := res.vaddrOff(i) + s*stride
				var init [8]byte
				ptFill(init[:], res.base+off, seed)
				now := atomic.LoadUint64((*uint64)(unsafe.Pointer(&res.buf[off])))
				sum += now - ptNativeUint64(init)
			}
		}
		if sum != rem.Iters {
			fmt.Fprintf(r.env.errOut, " Warning: the client reported %d FETCH_AND_ADDs, the server's counters grew by %d\n", rem.Iters, sum)
		}
	}
	return nil
}

// ptCompError is perftest's NOTIFY_COMP_ERROR_SEND/RECV as an error.
func ptCompError(side string, wc *verbs.WC, counts string) error {
	return fmt.Errorf("Completion with error at %s: Failed status %d (%s): wr_id %d syndrom 0x%x, %s",
		side, wc.Status, wc.Status, wc.WRID, wc.VendorErr, counts)
}
