package soft

// The driver of a device's engine. The engine (internal/roce) reads no
// clock and runs no goroutine; this file gives it both:
//
//	serve (goroutine) ── transport.TryRecv / Wait ──► engine.HandleBatch
//	     │  steps aside while busy pollers receive (one busy thread, not two)
//	CQ.Poll on an empty CQ, Progress ── inlinePoll ──► the same, on the
//	     │  poller's goroutine; its ACKs may wait for its next post
//	ackTimer ── after ackDelay ──► sends ACKs a poller left waiting
//	     │  (while serve is active; stepped aside, serve's check does)
//	timer ── engine.SetTimer(at) ... at ──► engine.OnTimeout(now)
//	     │  (stepped aside, the busy pollers run due deadlines instead)
//
// Whoever holds rxMu receives; the receive buffers and the engine's
// RxBatch belong to the holder. Every time and timer comes from the
// device's Clock (Config.Clock), so tests run the loop in virtual time.

import (
	"runtime"
	"time"

	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
)

// newDevice prepares the driver of a device on tr; Open attaches the
// engine.
func newDevice(tr transport.Transport, cfg Config) *Device {
	d := &Device{
		tr:        tr,
		rx:        roce.NewRxBatch(),
		serveDone: make(chan struct{}),
		serveKick: make(chan struct{}, 1),
		clock:     cfg.Clock,
		asideTick: make(chan struct{}, 1),
		spinPolls: cfg.SpinPolls,
	}
	d.asideCheck = cfg.StepAsideCheck
	if d.asideCheck <= 0 {
		d.asideCheck = stepAsideCheck
	}
	d.asideEvery.Store(int64(d.asideCheck))
	if d.clock == nil {
		d.clock = systemClock{}
	}
	if d.spinPolls == 0 {
		d.spinPolls = 2000
	}
	d.poller, _ = tr.(transport.Poller)
	d.inline = !cfg.NoInlinePoll
	d.deferAck = d.inline && !cfg.NoDeferredAck
	n := tr.BatchSize()
	d.pkts = make([]transport.Datagram, n)
	d.bufs = make([][]byte, n)
	for i := range d.bufs {
		d.bufs[i] = make([]byte, roce.MaxPacketSize+64)
	}
	d.filled = n // resetBufs sets every slot the first time
	d.ackTimer = d.clock.AfterFunc(time.Hour, d.sendLateAcks)
	d.ackTimer.Stop()
	d.asideTimer = d.clock.AfterFunc(time.Hour, d.asideChecked)
	d.asideTimer.Stop()
	d.kickTimer = d.clock.AfterFunc(time.Hour, d.lateKick)
	d.kickTimer.Stop()
	return d
}

// setTimer is the engine's Config.SetTimer: OnTimeout runs at at.
func (d *Device) setTimer(at time.Time) {
	d.timerMu.Lock()
	defer d.timerMu.Unlock()
	in := at.Sub(d.clock.Now())
	if d.timer == nil {
		d.timer = d.clock.AfterFunc(in, d.onTimer)
		return
	}
	d.timer.Reset(in)
}

// onTimer is the timer's function: it runs the engine's due deadlines,
// unless the loop has stepped aside for busy pollers. They run the due
// deadlines themselves (inlinePoll); this goroutine would only wait for
// the lock of a QP a poller is sending on, and after a millisecond of
// waiting sync.Mutex's starvation mode hands it the poller's P at the
// poller's next Unlock (a runtime/trace of a 1 MiB ib_write_bw sender:
// a dozen such hand-offs a second). It looks again every step-aside
// check (stepAsideCheck) until the loop is back, which it is within two
// checks of the pollers stopping: a deadline is then up to ~30 ms late.
func (d *Device) onTimer() {
	if d.eng.Closed() {
		return
	}
	if d.aside.Load() {
		d.timerMu.Lock()
		d.timer.Reset(d.asideCheck)
		d.timerMu.Unlock()
		return
	}
	// What waits in the socket goes first. The timer fires late when the
	// process is starved of CPU, and then the receive loop, runnable too,
	// has not run either: the ACKs that answered the requests whose
	// timeouts are due may be waiting there, and each timeout run before
	// them would cost a retry (seven of them fail the QP). If the loop
	// holds the receive lock it is receiving them itself.
	if d.poller != nil {
		d.pollRx(false, false)
	}
	d.eng.OnTimeout(d.clock.Now())
}

// resetBufs points the receive slots the last receive filled at their
// buffers again; the others still are (a transport fills only the slots
// it returns). Not every slot every time: busy pollers call this for
// every poll, mostly empty ones, and clearing all 64 slots was a tenth of
// a receiving process's CPU.
// Precondition: rxMu held.
func (d *Device) resetBufs() {
	for i := range d.pkts[:d.filled] {
		d.pkts[i] = transport.Datagram{Buf: d.bufs[i][:cap(d.bufs[i])]}
	}
	d.filled = 0
}

// received records which slots a receive filled: got, or all of them
// after an error. Precondition: rxMu held.
func (d *Device) received(got int, err error) {
	d.filled = got
	if err != nil {
		d.filled = len(d.pkts)
	}
}

// serve receives and processes packets until the device is closed.
//
// It polls the transport while traffic flows and, after spinPolls empty
// polls or spinLimit of them, whichever comes first, waits in the
// kernel. Receiving is shared: a goroutine busy-polling
// a CQ of this device (or calling Progress) receives and processes packets
// itself, which saves the hop through this goroutine; whoever holds rxMu
// receives. While such a poller keeps polling, serve steps aside and
// sleeps, so that the process has one busy thread, not two; never while
// a goroutine blocks in CQ.Wait, which counts on serve.
func (d *Device) serve() {
	if !d.serving.CompareAndSwap(false, true) {
		return
	}
	defer close(d.serveDone)
	if d.poller == nil {
		d.serveBlocking()
		return
	}
	idle := 0
	var spell time.Time // when the current spell of empty polls began
	var seen uint64     // inlinePolls at the last look
	for i := 0; !d.eng.Closed(); i++ {
		if d.inline && i%stepAsideLook == 0 {
			n := d.inlinePolls.Load()
			if n-seen >= stepAsidePolls {
				d.stepAside(n)
				n = d.inlinePolls.Load()
			}
			seen = n
		}
		n, err := d.pollRx(false, false)
		if err != nil {
			d.failed(err)
			return
		}
		if d.eng.Backlogged() {
			d.eng.FlushBacklog(d.clock.Now())
		}
		if n > 0 {
			idle = 0
			// The batch may have readied a CQ waiter, on this P's run
			// queue: let it run now rather than after this spell's first
			// look at the run queue (spin.Idle), dozens of polls and a
			// few sched_yields later (a blocking program's every
			// message waited for that).
			if spin.Crowded() {
				runtime.Gosched()
			}
			continue
		}
		if idle++; idle < d.spinPolls && !d.spunOut(idle, &spell) {
			spin.Idle(idle)
			if idle%serveCrowdedLook == 0 && spin.Crowded() {
				runtime.Gosched()
			}
			continue
		}
		if err := d.poller.Wait(); err != nil {
			d.failed(err)
			return
		}
		idle = 0
	}
}

// spinLimit bounds a spell of serve's empty polls in time: about what a
// wake-up from the kernel costs across vCPUs (30-45 µs), the spell after
// which spinning on has cost more than sleeping would have (so a spell
// that catches nothing costs at most twice the best choice made in
// hindsight). spinPolls alone bounded it only in polls: 2000 recvmmsg
// and sched_yield calls, a millisecond and more on a loaded machine, a P
// held throughout. A blocking program (a gRPC or net/http server over
// rdmanet: a CQ waiter, not a busy poller) gets its packets further apart
// than that, so every packet cost it a whole spell: two thirds of both
// processes' CPU went to the two devices' spins, and the goroutines with
// work waited for the CPU.
const spinLimit = 50 * time.Microsecond

// serveCrowdedLook is how often (in empty polls) serve looks whether
// goroutines wait for its P, more often than spin.Idle does: serve holds
// its P through every recvmmsg and sched_yield, and in a blocking program
// the goroutines it readied (CQ waiters, and what they wake) are the
// ones waiting.
const serveCrowdedLook = 8

// spinLook is how often (in empty polls) serve reads the clock for
// spinLimit.
const spinLook = 16

// spunOut reports whether the spell of idle empty polls that began at
// *spell (set at its first poll) has lasted spinLimit. It reads the
// clock every spinLook polls only; under a virtual clock time stands
// still while serve spins, and spinPolls ends the spell.
func (d *Device) spunOut(idle int, spell *time.Time) bool {
	switch {
	case idle == 1:
		*spell = d.clock.Now()
	case idle%spinLook == 0:
		return d.clock.Now().Sub(*spell) >= spinLimit
	}
	return false
}

// serve looks every stepAsideLook iterations whether busy pollers made at
// least stepAsidePolls receive attempts since the last look; if they did,
// it sleeps, checking every stepAsideCheck that they still poll.
const (
	stepAsideLook  = 64
	stepAsidePolls = 32
)

// stepAsideCheck (the default of Config.StepAsideCheck) is long because
// each check wakes a thread that competes with the busy pollers for the
// CPUs; a poller that blocks in CQ.Wait brings serve back at once
// (kickServe), so the check matters only for a program that stops polling
// without waiting.
const stepAsideCheck = 10 * time.Millisecond

// stepAside sleeps while busy pollers receive for the device: until a
// check finds that no poller tried to receive since the previous one, a
// CQ.Wait begins or is about to block (kickServe), or the device closes.
// It does not sleep while a CQ.Wait blocks (roce.Device.Waiting): the
// waiter counts on this loop, and its kicks may have come before aside
// was set. The waiter counts itself before its last look at aside, and
// this looks at the count after setting aside, so one of the two sees
// the other.
func (d *Device) stepAside(seen uint64) {
	d.aside.Store(true)
	defer d.aside.Store(false)
	if d.eng.Waiting() {
		return
	}
	select { // a tick left by a timer stopped too late
	case <-d.asideTick:
	default:
	}
	rcvd := d.PacketsReceived()
	d.asideTimer.Reset(time.Duration(d.asideEvery.Load()))
	defer d.asideTimer.Stop()
	for !d.eng.Closed() {
		select {
		case <-d.serveKick:
			return
		case <-d.asideTick:
		}
		n := d.inlinePolls.Load()
		if n == seen || d.eng.Waiting() {
			return
		}
		seen = n
		d.asideLook(&rcvd)
		d.asideTimer.Reset(time.Duration(d.asideEvery.Load()))
	}
}

// asideLook is a step-aside check that found the pollers still polling.
// If no packet was received since the check before (*rcvd), one may wait
// for a poller that now waits on memory between its polls (a C program
// spinning on a WRITE's last byte): the loop receives what waits. A
// check that finds such a packet brings the interval back to
// Config.StepAsideCheck, and it stays there for asideCleanChecks checks;
// after that every check that finds none doubles it, up to
// stepAsideCheck. A program that only polls is then looked at rarely
// (each look wakes a thread that takes a busy poller's CPU: 5000 a second
// at 200 µs cost a C ib_send_lat over the library 7 % and ib_send_bw -s
// 64 6 %), and one that waits on memory keeps the short check. A packet
// waits at most two intervals, as before; the first such wait of a
// program that polled for long may be up to two of stepAsideCheck.
func (d *Device) asideLook(rcvd *uint64) {
	stuck := false
	if d.PacketsReceived() == *rcvd {
		// An error here is the transport's: the loop's own next receive
		// meets it again and ends the device.
		got, _ := d.pollRx(false, false)
		stuck = got > 0
	}
	*rcvd = d.PacketsReceived()
	switch every := time.Duration(d.asideEvery.Load()); {
	case stuck:
		d.asideEvery.Store(int64(d.asideCheck))
		d.asideClean = asideCleanChecks
	case d.asideClean > 0:
		d.asideClean--
	case every < stepAsideCheck:
		d.asideEvery.Store(int64(min(2*every, stepAsideCheck)))
	}
}

// asideCleanChecks is how many checks after one that found a packet
// waiting keep the interval at Config.StepAsideCheck.
const asideCleanChecks = 64

// asideChecked is asideTimer's function: it wakes stepAside for its
// check. It never blocks (the clock's goroutine may be a test's).
func (d *Device) asideChecked() {
	select {
	case d.asideTick <- struct{}{}:
	default:
	}
}

// kickServe brings serve back to receiving if it stepped aside; it is the
// engine's Config.BeforeWait.
func (d *Device) kickServe() {
	if d.aside.Load() {
		select {
		case d.serveKick <- struct{}{}:
		default:
		}
	}
}

// armed is the engine's Config.OnArm: a program armed a CQ to wait for
// its event. The loop must receive for a waiter, and kickServe brings it
// back at once if it stepped aside for busy pollers. A program whose
// waits spin on ProgressWaiting (the C library's ibv_get_cq_event) needs
// no loop: the spin receives, and a spin that runs out brings the loop
// back before it blocks (BeginWait). Its arms only push kickTimer back:
// the loop comes back if no arm follows for armGrace, for a program that
// stopped waiting so, or that now waits on the channel's descriptor
// itself. Kicked at every arm, the loop woke once per message of a
// ping-pong, took the spinner's CPU and stepped aside again: perftest's
// ib_send_lat -e over the C library made 1.7 context switches per
// message and took 1.5 times the Go tool's latency.
func (d *Device) armed() {
	if !d.spinWaits.Load() || !d.aside.Load() {
		d.kickServe()
		return
	}
	d.kickDue.Store(true)
	d.kickTimer.Reset(armGrace)
}

// armGrace is how long an arm's kick may wait for the spinning waiter's
// next arm: longer than the C library's spins (up to 1 ms, unless
// SOFTRDMA_EVENT_SPIN sets a longer one, whose spins then only cost a
// kick per armGrace), so a program whose waits all end in a spin never
// wakes the loop. What it costs a program that waits on the channel's
// descriptor itself after spinning: its first event may wait up to
// armGrace.
const armGrace = 2 * time.Millisecond

// lateKick is kickTimer's function: no arm came for armGrace, the waits
// may no longer spin. The next arms kick at once, until a spin again.
func (d *Device) lateKick() {
	if d.kickDue.Swap(false) {
		d.spinWaits.Store(false)
		d.kickServe()
	}
}

// serveBlocking is serve for transports that cannot poll.
func (d *Device) serveBlocking() {
	for {
		d.rxMu.Lock()
		d.resetBufs()
		got, err := d.tr.Recv(d.pkts)
		d.received(got, err)
		if err == nil {
			d.eng.HandleBatch(d.rx, d.pkts[:got], d.clock.Now())
		}
		d.rxMu.Unlock()
		if err != nil {
			d.failed(err)
			return
		}
	}
}

// failed reports the receive loop's end: unless Close ended it, the port
// is down and the device unusable (EventPortErr, EventDeviceFatal).
func (d *Device) failed(err error) {
	if d.eng.Closed() {
		return
	}
	if d.log != nil {
		d.log.log.Error("receive loop stopped; the port is down", "err", err)
	}
	d.eng.Event(verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1})
	d.eng.Event(verbs.AsyncEvent{Type: verbs.EventDeviceFatal})
}

// pollRx receives and processes one batch if no other goroutine is
// receiving. It returns the number of packets handled. inline says that a
// goroutine that polls calls, not the receive loop; deferAcks that it is
// a busy poller, about to come back to post or poll: the batch's ACKs may
// then wait for it.
func (d *Device) pollRx(inline, deferAcks bool) (int, error) {
	if !d.rxMu.TryLock() {
		return 0, nil
	}
	defer d.rxMu.Unlock()
	// ACKs left behind by the previous batch go now: with this batch's
	// responder packets if it has any, else on their own.
	if d.rx.Waiting() {
		d.ackTimer.Stop()
		d.rx.StageDeferredAcks()
	}
	d.rx.DeferAcks(inline && deferAcks && d.deferAck)
	// A busy poller must not wait for the transport (CQ.Poll never
	// blocks, and it holds rxMu, which every QP's receiving needs): what
	// the transport cannot take now waits for this loop or ackTimer.
	d.rx.MustNotBlock(inline)
	d.resetBufs()
	got, err := d.poller.TryRecv(d.pkts)
	d.received(got, err)
	if got > 0 {
		d.eng.HandleBatch(d.rx, d.pkts[:got], d.clock.Now())
	} else {
		d.rx.FlushStage(d.eng)
	}
	if inline && d.eng.Backlogged() {
		// Requests a full socket held back leave as soon as it has room:
		// this poller comes back in a microsecond, the timer in 100.
		d.eng.RetryBacklog(d.rx, d.clock.Now())
	}
	// What the transport could not take goes after ackDelay at the
	// latest. So do ACKs left waiting, unless the loop has stepped aside
	// for busy pollers: then the poller sends them with its next post or
	// poll, and if it stops, the loop comes back and sends them (at once
	// if the poller waits on a CQ, else at its next step-aside check).
	// Re-arming the timer on every batch moved its deadline on every
	// batch: an idle thread woke up twice a millisecond to find nothing
	// due, taking a busy poller's CPU each time (a latency run's p99).
	if d.rx.Unsent() || d.eng.Backlogged() || d.rx.Waiting() && !(inline && d.aside.Load()) {
		d.ackTimer.Reset(ackDelay)
	}
	return got, err
}

// ackDelay bounds how long an ACK waits for the poller that left it
// (Config.NoDeferredAck) while the receive loop is active: ackTimer sends
// it if the poller has not come back by then. Far below any
// retransmission timeout in use (IBTA Local ACK Timeout 8 is 1 ms;
// perftest and cm use 14, 67 ms). While the loop has stepped aside the
// bound is two step-aside checks (stepAsideCheck) instead.
const ackDelay = 100 * time.Microsecond

// sendLateAcks is ackTimer's function: it sends the ACKs a busy poller
// left waiting and what a busy poller could not hand to the transport
// without blocking. If another goroutine is receiving it looks again
// later: that goroutine may have begun before the ACKs waited, so it
// cannot be trusted to send them.
func (d *Device) sendLateAcks() {
	if d.eng.Closed() {
		return
	}
	// Requests on the backlog need no receive lock: send them even while
	// a busy poller holds it (it never waits for the transport itself).
	if d.eng.Backlogged() {
		d.eng.FlushBacklog(d.clock.Now())
	}
	if !d.rxMu.TryLock() {
		d.ackTimer.Reset(ackDelay)
		return
	}
	d.rx.MustNotBlock(false) // this goroutine may wait for the transport
	d.rx.SendDeferredAcks(d.eng)
	d.rxMu.Unlock()
}

// deadlineLook is how often (in polls) a busy poller looks at the
// engine's next deadline.
const deadlineLook = 16

// inlinePoll lets a goroutine that busy-polls a CQ receive and process the
// packets waiting for this device itself; it is the engine's Config.Poll
// and never blocks. It also runs the engine's deadlines that are due: the
// timer's goroutine runs only when a CPU enters the Go scheduler, which
// busy pollers holding every CPU delay until the runtime preempts one (10
// ms and more; a 0.64 ms RNR wait stalled a stream for that long).
func (d *Device) inlinePoll() { d.pollInline(true) }

// pollInline is inlinePoll; deferAcks is pollRx's.
func (d *Device) pollInline(deferAcks bool) {
	// Receive first: a poller that comes back after a pause (its thread
	// was descheduled) may find the ACK that ends a wait in the socket,
	// and a deadline run before it would spend a retry on a request that
	// was answered.
	if d.inline && d.poller != nil && d.serving.Load() {
		d.inlinePolls.Add(1)
		d.pollRx(true, deferAcks)
	}
	// Reading the clock costs more than a poll here (60 ns on this
	// project's VMs): look every deadlineLook polls, a few microseconds
	// apart under busy polling.
	if d.inlinePolls.Load()%deadlineLook == 0 {
		if at := d.eng.NextDeadline(); !at.IsZero() {
			if now := d.clock.Now(); !now.Before(at) {
				d.eng.OnTimeout(now)
			}
		}
	}
}
