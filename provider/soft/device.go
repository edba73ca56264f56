package soft

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/internal/reuseport"
	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
)

// SharedSlot reports whether the device shares its addresses with
// devices in other processes (udp.Config.Share, Exclusive) and its slot among
// them: the top bits bits of its QPNs, and of the connection-manager IDs
// that package cm allocates on it, which steer packets to this process.
func (d *Device) SharedSlot() (slot uint32, bits int, shared bool) {
	if d.udp == nil {
		return 0, 0, false
	}
	slot, shared = d.udp.Slot()
	return slot, reuseport.SlotBits, shared
}

// ClaimService steers connection requests for an rdma_cm service ID to
// this process, on a shared address (cm.Listen calls it); it fails if a
// live process there listens on it already. ReleaseService undoes it.
func (d *Device) ClaimService(serviceID uint64) error {
	if d.udp == nil {
		return nil
	}
	return d.udp.ClaimService(serviceID)
}

// ReleaseService undoes one ClaimService.
func (d *Device) ReleaseService(serviceID uint64) {
	if d.udp != nil {
		d.udp.ReleaseService(serviceID)
	}
}

// Device is an open softrdma device: a verbs.Device that is also its own
// verbs.Context (Open returns the device itself), with one port whose GID
// table holds the link-local GID (index 0) and the device's address
// (index 1). The objects it creates (PDs, CQs, QPs, MRs, SRQs, AHs) are
// the verbs interfaces.
//
// A Device runs a receive goroutine and a timer from Open until Close. Its
// methods are safe for concurrent use. The zero value is not usable: call
// Open.
type Device struct {
	eng  *roce.Device
	tr   transport.Transport
	guid uint64         // NodeGUID; 0: the engine's random one (no interface)
	udp  *udp.Transport // the transport Open made (nil: Config.Transport)

	// The driver: receive loop, busy-poll sharing, deferred ACKs, timers
	// (loop.go).
	poller      transport.Poller // nil: the transport cannot poll
	spinPolls   int
	inline      bool          // busy pollers receive (Config.NoInlinePoll)
	deferAck    bool          // their ACKs may wait for them (Config.NoDeferredAck)
	rxMu        sync.Mutex    // held by whoever receives: the loop or a busy poller
	rx          *roce.RxBatch // under rxMu
	pkts        []transport.Datagram
	bufs        [][]byte
	clock       Clock // Config.Clock: the time and every timer below
	ackTimer    Timer // sends ACKs a busy poller left waiting
	timerMu     sync.Mutex
	timer       Timer // serves the engine's deadlines
	serving     atomic.Bool
	serveDone   chan struct{}
	inlinePolls atomic.Uint64 // receive attempts by busy pollers
	asideTimer  Timer         // the stepped-aside loop's check (every asideCheck)
	asideCheck  time.Duration // Config.StepAsideCheck
	asideEvery  atomic.Int64  // the check's interval now, a time.Duration (asideLook)
	asideClean  int           // checks before asideEvery may grow again (serve's own)
	asideTick   chan struct{} // asideTimer has fired
	aside       atomic.Bool   // the loop has stepped aside for a busy poller
	serveKick   chan struct{} // wakes the loop from stepping aside
	spinWaits   atomic.Bool   // a thread waits for events by spinning (ProgressWaiting)
	kickDue     atomic.Bool   // an arm's kick waits for kickTimer (armed)
	kickTimer   Timer         // kicks the loop if no arm came for armGrace
	log         *logger       // nil: no Config.Logger
	filled      int           // pkts[:filled] need resetBufs (under rxMu)
	closeHooks  verbs.CloseHooks
}

// --- verbs.Device ---

// Name returns the device name, unique among the devices of a host
// ("softrdma_lo", "softrdma_eth0", or the name Config gave).
func (d *Device) Name() string { return d.eng.Name() }

// GUID returns the node GUID: derived from the interface as NodeGUID
// says, or random for a device on a transport of the caller's.
func (d *Device) GUID() uint64 {
	if d.guid != 0 {
		return d.guid
	}
	return d.eng.GUID()
}

// Open returns the device itself: a Device is also its own Context. It
// fails once the device is closed.
func (d *Device) Open() (verbs.Context, error) {
	if d.eng.Closed() {
		return nil, verbs.Errorf("Open", verbs.ErrDestroyed, "device %s is closed", d.Name())
	}
	return d, nil
}

// --- verbs.Context ---

// Device returns d.
func (d *Device) Device() verbs.Device { return d }

// QueryDevice returns the device attributes, with rxe's limits.
func (d *Device) QueryDevice() (verbs.DeviceAttr, error) {
	a, err := d.eng.QueryDevice()
	a.NodeGUID, a.SysImageGUID = d.GUID(), d.GUID()
	return a, err
}

// QueryPort returns the attributes of port 1, the only port.
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) { return d.eng.QueryPort(port) }

// QueryGID returns GID index of port 1: 0 is the link-local GID, 1 the
// device's IP address (IPv4-mapped for IPv4), as rxe lays out a netdev's
// GIDs.
func (d *Device) QueryGID(port uint8, index int) (verbs.GID, error) {
	return d.eng.QueryGID(port, index)
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) { return d.eng.AllocPD() }

// CreateCQ creates a completion queue with room for cqe completions. Its
// Poll, when it finds the CQ empty, receives the device's waiting packets
// on the calling goroutine (unless Config.NoInlinePoll).
func (d *Device) CreateCQ(cqe int, ch *verbs.CompChannel) (verbs.CQ, error) {
	return d.eng.CreateCQ(cqe, ch)
}

// Close stops the device and releases everything: first what runs on it
// (the OnClose functions: the connection manager disconnects and closes
// its connections and listeners), then the receive goroutine
// and the timers stop, the QPs the application left are destroyed (their
// outstanding work requests discarded, as ibv_destroy_qp does), its MRs
// deregistered, its SRQs, AHs, CQs and PDs released, the UDP socket
// closed (the address is free again) and the AsyncEvents channel closed.
// So `defer dev.Close()` is right however a program ends. Closing a
// closed device does nothing.
func (d *Device) Close() error {
	if d.eng.Closed() {
		return nil
	}
	// What runs on the device (cm's agent, its connections) ends first,
	// while the device can still send their disconnects.
	d.closeHooks.RunCloseHooks()
	err := d.eng.Stop()
	d.ackTimer.Stop()
	d.kickTimer.Stop()
	d.timerMu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerMu.Unlock()
	select {
	case d.serveKick <- struct{}{}:
	default:
	}
	if d.serving.Load() {
		<-d.serveDone
	}
	// Packets a busy poller could not hand over may pin MRs: drop them
	// before the MRs go.
	d.rxMu.Lock()
	d.rx.Drop(d.eng)
	d.rxMu.Unlock()
	d.eng.Release()
	if d.log != nil {
		d.log.close()
	}
	return err
}

// OnClose registers f to run when Close begins (verbs.CloseNotifier):
// the connection manager ends its work on the device there.
func (d *Device) OnClose(f func()) (remove func()) { return d.closeHooks.OnClose(f) }

// AsyncEvents returns the device's asynchronous events (verbs.AsyncEventer):
// a QP's fatal, request and access errors, communication established,
// SQ drained, last WQE reached, SRQ limit reached, CQ overflow, and the
// port going down when the device's socket fails. The channel is closed
// by Close.
func (d *Device) AsyncEvents() <-chan verbs.AsyncEvent { return d.eng.AsyncEvents() }

// --- beyond verbs ---

// Closed reports whether Close has been called.
func (d *Device) Closed() bool { return d.eng.Closed() }

// LocalAddr is the IP address the device sends from and receives on.
func (d *Device) LocalAddr() netip.Addr { return d.eng.LocalAddr() }

// NetDev names the network interface under the device ("" for a device on
// a transport of the caller's).
func (d *Device) NetDev() string { return d.eng.NetDev() }

// Counter is one of a device's statistics.
type Counter struct {
	// Name is rxe's hw_counters name where rxe has the counter
	// (sent_pkts, rcvd_rnr_err, ...), else a name of softrdma's own
	// (retransmits, drop_icrc, ...).
	Name  string
	Value uint64
}

// Counters returns the device's statistics in a stable order. The first
// group mirrors the names of rxe's hw_counters
// (/sys/class/infiniband/rxe0/ports/1/hw_counters) so the two can be
// compared side by side; the rest count what softrdma retransmits and
// drops, and why. Over the UDP transport the last two are its system
// calls: send_calls (sendmmsg or sendmsg calls) and recv_calls (receive
// calls that returned packets); sent_pkts / send_calls is how many
// packets a call carried.
func (d *Device) Counters() []Counter {
	snap := d.eng.Counters.Snapshot()
	out := make([]Counter, len(snap), len(snap)+2)
	for i, c := range snap {
		out[i] = Counter{Name: c.Name, Value: c.Value}
	}
	if st, ok := d.tr.(interface{ Stats() udp.Stats }); ok {
		s := st.Stats()
		out = append(out, Counter{"send_calls", s.SendCalls}, Counter{"recv_calls", s.RecvCalls})
	}
	return out
}

// Counter returns the statistic called name, and whether there is one.
func (d *Device) Counter(name string) (uint64, bool) {
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// PacketsReceived returns how many packets the device has taken from its
// transport so far (the rcvd_pkts counter), by whichever goroutine
// received them. It is one atomic load: a poller that retries an empty CQ
// reads it to stop as soon as anything arrived, for this CQ or another.
func (d *Device) PacketsReceived() uint64 { return d.eng.Counters.RcvdPkts.Load() }

// Progress receives and processes what is waiting for the device on the
// calling goroutine, for programs that busy-poll memory rather than a CQ
// (as ib_write_lat polls the last byte of its buffer). It never blocks;
// it implements verbs.Progresser.
func (d *Device) Progress() { d.inlinePoll() }

// ProgressWaiting is Progress for a thread that waits for a completion
// event rather than polls (softrdma's C library's ibv_get_cq_event spins
// on it before it blocks): the ACKs of what it receives leave at once,
// not with its next post, which comes only after the event has been
// read, the CQ armed and polled, and may not come at all (a program that
// waits for a second event first). With the ACKs held for it, perftest's
// ib_send_lat -e over the C library stopped for good in 4-5 runs of 20
// (an ACK came late enough for the peer to retransmit, and the test's
// loop, one poll per event, fell out of step); with them sent at once,
// in none of 20.
//
// It also marks the device as waited on by spinning: the arms that
// follow (CQ.ReqNotify) no longer bring the receive loop back at once
// (armed).
func (d *Device) ProgressWaiting() {
	if !d.spinWaits.Load() {
		d.spinWaits.Store(true)
	}
	d.pollInline(false)
}

// BeginWait and EndWait bracket a wait for the device's completions by a
// thread the Go runtime does not run: a C program blocked on a completion
// channel's descriptor (softrdma's C library brackets its
// ibv_get_cq_event). In between, the receive loop receives for it as for
// a goroutine blocked in CQ.Wait: if it had stepped aside for busy
// pollers it comes back at once, and it does not step aside again.
func (d *Device) BeginWait() {
	d.eng.WaitOutside(1)
	d.spinWaits.Store(false)
	d.kickServe()
}

// EndWait ends BeginWait.
func (d *Device) EndWait() { d.eng.WaitOutside(-1) }

// HoldDoorbells starts a doorbell batch (verbs.DoorbellBatcher): until
// the matching RingDoorbells, posts to idle QPs of the device are built
// and queued, not sent.
func (d *Device) HoldDoorbells() { d.eng.HoldDoorbells() }

// RingDoorbells ends a HoldDoorbells; the outermost one sends every post
// the hold kept back, many QPs' packets per system call.
func (d *Device) RingDoorbells() { d.eng.RingDoorbells() }

// SendMAD sends a management datagram from QP1 (verbs.GSI); the
// connection manager uses it.
func (d *Device) SendMAD(port uint8, dst verbs.GID, dstQP uint32, qkey uint32, mad []byte) error {
	return d.eng.SendMAD(port, dst, dstQP, qkey, mad)
}

// HandleUnreachable sets the receiver of the network's reports that a
// destination takes no RoCEv2: ICMP errors for the device's datagrams
// (verbs.GSIUnreachable; on Linux).
func (d *Device) HandleUnreachable(port uint8, h func(dst verbs.GID, err error)) error {
	return d.eng.HandleUnreachable(port, h)
}

// HandleMADs sets the receiver of the MADs arriving at QP1 (verbs.GSI).
func (d *Device) HandleMADs(port uint8, h func(src verbs.MADSource, mad []byte)) error {
	return d.eng.HandleMADs(port, h)
}
