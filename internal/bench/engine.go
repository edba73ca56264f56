package bench

// The measurement engine: the polling loops of perftest 4.5 (run_iter_bw,
// run_iter_bw_server, run_iter_bi, run_iter_lat_write, run_iter_lat,
// run_iter_lat_send), shared by the perftest-compatible tools (which run
// one end each and talk to Linux perftest) and by softrdma bench (which
// runs both ends in one process). The traffic a run makes is perftest's,
// message for message; see BWRun and LatRun.
//
//	Test      what to measure (perftest's options)
//	Endpoint  where: the QPs, CQs and buffer of one end, laid out as
//	          perftest lays them out (Layout), and the peer's addresses
//	Ticks     the clock: monotonic nanoseconds
//	watch     the idle policy of every loop: busy polling with spin.Idle's
//	          yields, stall and cancellation checks
//	Phases    the warm-up / sample / cool-down phases of a duration run

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/verbs"
)

// TicksPerUsec is the rate of Ticks: nanoseconds stand in for perftest's
// CPU cycles.
const TicksPerUsec = perftest.NanosecondTicksPerUsec

// Epoch is the zero of Ticks.
var Epoch = time.Now()

// Ticks is the benchmarks' clock: monotonic nanoseconds since Epoch.
func Ticks() uint64 { return uint64(time.Since(Epoch)) }

// PollBatch is perftest's CTX_POLL_BATCH: completions polled at a time.
const PollBatch = 16

// Test is one measurement's parameters, as perftest's options give them.
type Test struct {
	Verb     perftest.Verb
	AtomicOp perftest.AtomicOp // for perftest.Atomic
	Role     perftest.Role
	Duplex   bool   // both ends measure (-b)
	Size     uint64 // message size
	Iters    uint64 // messages per QP (-n); unused in duration mode
	TxDepth  int    // messages outstanding per QP (-t)
	RxDepth  int    // receives posted per QP (-r), SEND tests
	CQMod    int    // one signaled completion every CQMod messages (-Q)
	NoPeak   bool   // -N
	Gbits    bool   // report in Gb/s
	Inline   int    // largest message sent inline
	PostList int    // messages posted per PostSend call (-l); 0 or 1: one
	// Block waits for completions with CQ.Wait after a while of empty
	// polls instead of busy polling throughout (softrdma bench -block;
	// perftest always busy-polls). Memory polling (WRITE latency) spins
	// either way.
	Block bool
	// NoYield busy-polls without spin.Idle's yields, as perftest does,
	// for a kernel device (provider/ibverbs): the kernel does its work
	// in interrupt and softirq context, which preempts the poller, and
	// in threads the scheduler gives their share either way, so a yield
	// only hands the CPU to unrelated threads, the Go runtime's own
	// among them. Without it, a softrdma device's loop or a peer process
	// sharing the CPU gets it back every few dozen empty polls.
	NoYield bool

	// Duration and Margin (seconds) select duration mode (-D, --margin)
	// when Duration > 0.
	Duration, Margin int
	// Interval, when > 0, runs a bandwidth test until an error or Ctx
	// ends it (perftest's --run_infinitely): every Interval, Report gets
	// the result of the messages completed since the previous report
	// (run_iter_bw_infinitely's print thread). Duration and Margin are
	// then unused.
	Interval time.Duration
	Report   func(perftest.BWReport) error
	// StartCPU, if set, starts measuring CPU utilisation over the
	// sampled interval of a duration run (--cpu_util).
	StartCPU func(*Phases) CPUSampler

	// Ctx cancels a run; nil means never.
	Ctx context.Context
	// StallTimeout is how long a loop waits without progress before it
	// gives up; 0 means 60 s (perftest's check_alive).
	StallTimeout time.Duration
	// Completed, if set, counts completions as the loops see them (for a
	// progress bar).
	Completed *atomic.Uint64
	// Credits, if set, is SEND flow control between two ends in one
	// process: the receiving end adds one per receive it posts, the
	// sending end takes one per SEND, so that a SEND never meets an empty
	// receive queue because the receiving goroutine was slow to run.
	// perftest has no such thing; the tools leave it nil.
	Credits *atomic.Int64
}

func (t *Test) dur() bool { return t.Duration > 0 || t.infinite() }

func (t *Test) infinite() bool { return t.Interval > 0 }

// CPUSampler measures CPU utilisation over an interval.
type CPUSampler interface {
	// Util waits for the end of the interval and returns the
	// utilisation in percent (0 if unknown).
	Util() float64
}

// Duration-mode phases: a warm-up margin, the sampled interval, a
// cool-down margin, the end (perftest's SIGALRM states, driven by the
// clock here).
const (
	PhaseStart = iota
	PhaseSample
	PhaseStopSample
	PhaseEnd
)

// Phases are the phase boundaries of a duration run, in ticks.
type Phases struct {
	SampleStart, SampleEnd, End uint64
	cpu                         CPUSampler
}

func newPhases(t *Test, now uint64) *Phases {
	if t.infinite() {
		// Every message is sampled, and the run never ends by itself.
		return &Phases{SampleStart: now, SampleEnd: math.MaxUint64, End: math.MaxUint64}
	}
	margin, dur := uint64(t.Margin)*1e9, uint64(t.Duration)*1e9
	p := &Phases{SampleStart: now + margin, SampleEnd: now + dur - margin, End: now + dur}
	if t.StartCPU != nil {
		p.cpu = t.StartCPU(p)
	}
	return p
}

// At returns the phase at now; a run whose phases have not started (nil)
// is in the start phase.
func (p *Phases) At(now uint64) int {
	switch {
	case p == nil || now < p.SampleStart:
		return PhaseStart
	case now < p.SampleEnd:
		return PhaseSample
	case now < p.End:
		return PhaseStopSample
	}
	return PhaseEnd
}

func (p *Phases) cpuUtil() float64 {
	if p == nil || p.cpu == nil {
		return 0
	}
	return p.cpu.Util()
}

// Inc is perftest's INC: size rounded up to a whole number of cache
// lines, at least one.
func Inc(size, cacheLine uint64) uint64 {
	if size <= cacheLine {
		return cacheLine
	}
	return (size + cacheLine - 1) / cacheLine * cacheLine
}

// Layout is perftest's buffer layout (alloc_ctx, create_single_mr): one
// MR of 2·N·QPBuff bytes for N QPs,
//
//	[ send 0 | send 1 | … | send N−1 | recv 0 | recv 1 | … | recv N−1 ]
//
// send region i at i·BuffSize: what QP i writes, reads into, sends; recv
// region i at (N+i)·BuffSize: the address QP i advertises, which the peer
// writes to, reads from or targets with atomics. Messages of at most half
// a cycle buffer step through it in cache-line-aligned slots.
type Layout struct {
	NumQPs    int
	BuffSize  uint64 // BUFF_SIZE(size, cycle buffer)
	QPBuff    uint64 // INC(BUFF_SIZE, cache line): send_qp_buff_size
	Cycle     uint64 // the cycle buffer (page size)
	CacheLine uint64
}

// NewLayout is the layout of numQPs QPs whose largest message is maxSize.
func NewLayout(numQPs int, maxSize, cycle, cacheLine uint64) Layout {
	l := Layout{NumQPs: numQPs, BuffSize: max(maxSize, cycle), Cycle: cycle, CacheLine: cacheLine}
	l.QPBuff = Inc(l.BuffSize, cacheLine)
	return l
}

// Bytes is the size of the MR.
func (l Layout) Bytes() uint64 { return l.QPBuff * 2 * uint64(l.NumQPs) }

// SendOff is the buffer offset of QP i's send region (ctx->buf[i]).
func (l Layout) SendOff(i int) uint64 { return uint64(i) * l.BuffSize }

// VAddrOff is the offset of QP i's advertised region (my_dest.vaddr).
func (l Layout) VAddrOff(i int) uint64 { return uint64(l.NumQPs+i) * l.BuffSize }

// RecvOff is the offset of QP i's receive WQEs (ctx_set_recv_wqes).
func (l Layout) RecvOff(i int) uint64 { return uint64(l.NumQPs+i) * l.QPBuff }

// Slots returns the slot stride and count of size-byte messages: messages
// of at most half a cycle buffer step through it (increase_loc_addr),
// larger ones always use the start of their region.
func (l Layout) Slots(size uint64) (stride, n uint64) {
	if size > l.Cycle/2 {
		return 0, 1
	}
	stride = Inc(size, l.CacheLine)
	return stride, l.Cycle / stride
}

// Remote is what an end knows of the peer's QP i: the advertised region
// and its rkey, and for a UD test the address handle, QPN and Q_Key that
// every SEND carries (perftest's wr.ud).
type Remote struct {
	VAddr uint64
	RKey  uint32
	AH    verbs.AH // UD only; nil for RC and UC
	QPN   uint32
	QKey  uint32
}

// Endpoint is one end of a measurement: its verbs objects, its buffer
// laid out as Layout says, and the peer's regions.
type Endpoint struct {
	Ctx    verbs.Context
	QPs    []verbs.QP
	SendCQ verbs.CQ
	RecvCQ verbs.CQ // SEND tests; may be SendCQ otherwise
	LKey   uint32
	Buf    []byte // the MR's bytes
	Base   uint64 // the MR's address
	Layout
	Remote []Remote // one per QP
	// RecvShift and RecvExtra place UD receives as perftest does: each
	// receive starts RecvShift bytes into its slot (cache line − 40) and
	// is RecvExtra bytes (40, the GRH area) longer than the message.
	// Zero for RC and UC.
	RecvShift uint64
	RecvExtra uint32
	// Events, if set, is the completion channel of SendCQ and RecvCQ,
	// both armed before the run: the loops sleep on it before they poll
	// (perftest's -e; watch.poll). WRITE latency polls memory and never
	// waits on it.
	Events *verbs.CompChannel
	// PerQP, if set, gives each QP its own MR (perftest's --mr_per_qp):
	// its send, receive and key replace the Layout's offsets into Base
	// and LKey.
	PerQP []QPMem
}

// QPMem is one QP's memory with --mr_per_qp: perftest's buf[i], an MR of
// its own whose send and receive both start at its address.
type QPMem struct {
	LKey uint32
	Addr uint64 // the MR's address: sends and receives start here
}

// sendAddr, recvAddr and lkey are QP i's send and receive addresses
// (receives before RecvShift) and local key.
func (ep *Endpoint) sendAddr(i int) uint64 {
	if ep.PerQP != nil {
		return ep.PerQP[i].Addr
	}
	return ep.Base + ep.SendOff(i)
}

func (ep *Endpoint) recvAddr(i int) uint64 {
	if ep.PerQP != nil {
		return ep.PerQP[i].Addr
	}
	return ep.Base + ep.RecvOff(i)
}

func (ep *Endpoint) lkey(i int) uint32 {
	if ep.PerQP != nil {
		return ep.PerQP[i].LKey
	}
	return ep.LKey
}

// ErrStall reports a measurement that stopped making progress.
var ErrStall = errors.New("no completion for a long time; is the peer alive?")

// watch is the idle policy of the polling loops: busy polling, as perftest
// does, with spin.Idle's yields so as not to starve the peer, and stall
// and cancellation checks that do not read the clock on every empty poll;
// or, with Endpoint.Events, sleeping on the completion channel.
type watch struct {
	t     *Test
	spins int
	last  uint64       // ticks of the last progress; 0: not yet known
	rs    spin.Resched // the loop's own passes through the scheduler
	ev    *verbs.CompChannel
	stall *time.Timer // the stall timeout of a wait for an event
	ready []verbs.CQ  // CQs whose next poll needs no event (poll)
}

func newWatch(t *Test, ep *Endpoint) watch { return watch{t: t, last: Ticks(), ev: ep.Events} }

// progress records that something completed.
func (w *watch) progress() {
	w.spins = 0
	w.last = 0
	w.rs.Step()
	if w.t.Completed != nil {
		w.t.Completed.Add(1)
	}
}

// idle is called after an empty poll; it returns an error once the loop
// has stalled for the stall timeout or the context is done.
func (w *watch) idle() error {
	w.spins++
	if !w.t.NoYield {
		spin.Idle(w.spins)
	}
	w.rs.Step()
	if w.spins&1023 != 0 {
		return nil
	}
	return w.check()
}

// check returns an error once the loop has stalled for the stall timeout
// or the context is done.
func (w *watch) check() error {
	now := Ticks()
	if w.last == 0 {
		w.last = now
		return nil
	}
	if ctx := w.t.Ctx; ctx != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	timeout := w.t.stallTimeout()
	if time.Duration(now-w.last) > timeout {
		return fmt.Errorf("%w (%v)", ErrStall, timeout)
	}
	return nil
}

// stallTimeout is StallTimeout, or its default.
func (t *Test) stallTimeout() time.Duration {
	if t.StallTimeout == 0 {
		return 60 * time.Second
	}
	return t.StallTimeout
}

// blockAfter is how many empty polls a Block run spins before it waits.
const blockAfter = 64

// poll is cq.Poll, with -e's sleep first: perftest's ctx_notify_events
// before its ibv_poll_cq. It sleeps until the channel delivers an event
// for cq (arming each CQ an event is for again), unless an earlier sleep
// took cq's event while waiting for the other CQ's, or cq's last poll
// filled wc (more may wait, and their event is taken). A poll that finds
// nothing after its event (the completion was taken by a poll before)
// returns 0, and the caller's next poll sleeps again: every CQ on the
// channel was armed before its first poll and is armed again before the
// poll that follows its event, so a completion no poll took always has an
// event coming.
func (w *watch) poll(cq verbs.CQ, wc []verbs.WC) (int, error) {
	if w.ev == nil {
		return cq.Poll(wc)
	}
	if !w.takeReady(cq) {
		for {
			got, err := w.event()
			if err != nil {
				return 0, err
			}
			if sameCQ(got, cq) {
				break
			}
			w.markReady(got)
		}
	}
	n, err := cq.Poll(wc)
	if n == len(wc) {
		w.markReady(cq)
	}
	return n, err
}

// wait is idle for a loop whose poll found cq empty: with Test.Block it
// waits on cq (at most a millisecond, so that the stall and cancellation
// checks still run), with events its next poll sleeps, else it spins.
func (w *watch) wait(cq verbs.CQ) error {
	if w.ev != nil {
		return w.check()
	}
	if !w.t.Block || w.spins < blockAfter {
		return w.idle()
	}
	w.spins++
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	cq.Wait(ctx) // a timeout is no error here: the caller polls again
	cancel()
	return w.check()
}

// waitAny is wait for a loop that polls two CQs and found both empty
// (run_iter_bi): with events it sleeps until either CQ has one.
func (w *watch) waitAny(cq verbs.CQ) error {
	if w.ev == nil {
		return w.wait(cq)
	}
	if len(w.ready) > 0 {
		w.ready = w.ready[:0]
		return nil
	}
	_, err := w.event()
	return err
}

// takeReady reports whether cq's next poll needs no event, forgetting it.
func (w *watch) takeReady(cq verbs.CQ) bool {
	for i, r := range w.ready {
		if sameCQ(r, cq) {
			w.ready = append(w.ready[:i], w.ready[i+1:]...)
			return true
		}
	}
	return false
}

// markReady records that cq's next poll needs no event.
func (w *watch) markReady(cq verbs.CQ) {
	for _, r := range w.ready {
		if sameCQ(r, cq) {
			return
		}
	}
	w.ready = append(w.ready, cq)
}

// sameCQ reports whether a and b are one CQ; a CQ that wraps another (a
// test's poll counter) is the one it wraps.
func sameCQ(a, b verbs.CQ) bool { return unwrapCQ(a) == unwrapCQ(b) }

func unwrapCQ(c verbs.CQ) verbs.CQ {
	for {
		w, ok := c.(interface{ Unwrap() verbs.CQ })
		if !ok {
			return c
		}
		c = w.Unwrap()
	}
}

// event is perftest's ctx_notify_events: it sleeps until the channel
// delivers an event, arms the CQ the event is for again and returns it.
func (w *watch) event() (verbs.CQ, error) {
	timeout := w.t.stallTimeout()
	if w.stall == nil {
		w.stall = time.NewTimer(timeout)
	} else {
		w.stall.Reset(timeout)
	}
	var done <-chan struct{}
	if w.t.Ctx != nil {
		done = w.t.Ctx.Done()
	}
	select {
	case cq := <-w.ev.C():
		w.stall.Stop()
		if err := cq.ReqNotify(false); err != nil {
			return nil, fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
		return cq, nil
	case <-done:
		w.stall.Stop()
		return nil, context.Cause(w.t.Ctx)
	case <-w.stall.C:
		return nil, fmt.Errorf("%w (%v, waiting for a completion event)", ErrStall, timeout)
	}
}

// compError is perftest's NOTIFY_COMP_ERROR_SEND/RECV as an error.
func compError(side string, wc *verbs.WC, counts string) error {
	return fmt.Errorf("Completion with error at %s: Failed status %d (%s): wr_id %d syndrom 0x%x, %s",
		side, wc.Status, wc.Status, wc.WRID, wc.VendorErr, counts)
}
