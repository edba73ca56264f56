package shm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// Device is an open shared-memory device: a verbs.Device that is also its
// own verbs.Context (Open returns the device itself), with one port whose
// GID (index 0) names the device's Unix socket, so an endpoint carrying
// the GID reaches this process.
//
// A Device is also a verbs.GSI and a verbs.ServiceDirectory, for package
// cm (gsi_linux.go). It runs an accept goroutine, one reader goroutine
// per connected peer, one per port cm listens on, and a progress
// goroutine that services the shared rings while no application
// goroutine polls (it sleeps on a futex when idle). Its methods are safe
// for concurrent use. The zero value is not usable: call Open.
type Device struct {
	name string
	id   uint64
	gid  verbs.GID
	cfg  Config
	uid  uint32

	ln       *net.UnixListener
	sockPath string // file to remove on Close (Config.Dir)

	bellFD int
	bell   doorbell

	mu       sync.Mutex // guards the fields below
	closed   bool
	conns    map[uint64]*conn // peer device id → the connection used to reach it
	all      map[*conn]bool
	qpByNum  map[uint32]*QP
	inboxes  map[inboxKey]*mapping // rings peers sent before our QP looked for them
	pds, cqs int
	services map[*net.UnixListener]bool // BindService's sockets, closed at Close

	events     verbsobj.Events // asynchronous events (AsyncEvents)
	closeHooks verbs.CloseHooks

	madHandler atomic.Pointer[func(verbs.MADSource, []byte)] // QP1's receiver (HandleMADs)

	qps atomic.Pointer[[]*QP] // immutable snapshot, for progress
	ud  udDevice              // peers' UD rings (ud_linux.go)

	mrMu sync.RWMutex
	mrs  map[uint32]*MR // lkey == rkey

	active      atomic.Bool   // an application goroutine polled or posted since the progress goroutine last looked
	napWake     chan struct{} // a CQ waiter is about to block: the progress goroutine must not nap
	waiting     atomic.Int32  // goroutines blocked in CQ.Wait, whose completions only the progress goroutine delivers
	armed       atomic.Int32  // CQs armed by ReqNotify: their application sleeps on a CompChannel, likewise
	spinWaits   atomic.Bool   // the application waits for its events spinning on ProgressWaiting
	spun        atomic.Bool   // a ProgressWaiting since the progress goroutine's nap began
	nap, safety time.Duration // napTime and safetyWake when the device opened
	rnrWake     atomic.Int64  // earliest RNR deadline a QP waits for (unix nanos, 0 none)
	copies      atomic.Uint64 // COPY_WRITEs and COPY_ATOMICs applied (copy_linux.go)
	ctr         counters      // refusals (counters_linux.go)
	stop        chan struct{}
	wg          sync.WaitGroup
	connWG      sync.WaitGroup
	progressG   atomic.Bool
}

type inboxKey struct {
	peer         uint64
	local, remot uint32
}

// mapping is a ring mapped from a peer's memfd, parked until a QP
// claims it (peers_linux.go).
type mapping struct {
	mem  []byte
	from *conn // the connection it came over, whose rings count it
}

func (m *mapping) unmap() {
	if m != nil && m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
}

// gidPrefix marks softrdma shared-memory GIDs: fd73:686d ("shm") in the
// unique-local range, then the uid, then the device id.
var gidPrefix = [4]byte{0xfd, 's', 'h', 'm'}

func gidOf(uid uint32, id uint64) verbs.GID {
	var g verbs.GID
	copy(g[:4], gidPrefix[:])
	binary.BigEndian.PutUint32(g[4:], uid)
	binary.BigEndian.PutUint64(g[8:], id)
	return g
}

// peerOf returns the device id a GID names, or false if it is not a
// shared-memory GID.
func peerOf(g verbs.GID) (uint64, bool) {
	if [4]byte(g[:4]) != gidPrefix {
		return 0, false
	}
	return binary.BigEndian.Uint64(g[8:]), true
}

func (d *Device) sockName(id uint64) string {
	if d.cfg.Dir != "" {
		return filepath.Join(d.cfg.Dir, fmt.Sprintf("%016x.sock", id))
	}
	return fmt.Sprintf("@softrdma-shm-%016x", id)
}

// Open creates a device: a socket peers connect to, a doorbell page and
// the progress goroutine.
func Open(cfg Config) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	var idb [8]byte
	rand.Read(idb[:])
	d := &Device{
		name: cfg.Name, id: binary.LittleEndian.Uint64(idb[:]) | 1, cfg: cfg, uid: uint32(os.Getuid()),
		conns: map[uint64]*conn{}, all: map[*conn]bool{}, qpByNum: map[uint32]*QP{},
		inboxes: map[inboxKey]*mapping{}, mrs: map[uint32]*MR{}, stop: make(chan struct{}),
		services: map[*net.UnixListener]bool{},
		napWake:  make(chan struct{}, 1), nap: napTime, safety: safetyWake,
	}
	d.gid = gidOf(d.uid, d.id)
	d.events.Init()
	d.qps.Store(&[]*QP{})
	var err error
	d.bellFD, d.bell, err = newMemfdBell()
	if err != nil {
		return nil, verbs.Errorf("shm.Open", verbs.ErrInvalidArgument, "doorbell memfd: %v", err)
	}
	name := d.sockName(d.id)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		unix.Munmap(d.bell)
		unix.Close(d.bellFD)
		return nil, verbs.Errorf("shm.Open", verbs.ErrInvalidArgument, "listen on %s: %v", name, err)
	}
	if cfg.Dir != "" {
		d.sockPath = name
		ln.SetUnlinkOnClose(true)
	}
	d.ln = ln
	d.wg.Add(2)
	go d.acceptLoop()
	go d.progressLoop()
	opened.add(d)
	return d, nil
}

// newMemfdBell creates the device's doorbell, mapped read-write, and
// returns a read-only fd of it to send peers: with the seal, and on a
// kernel without F_SEAL_FUTURE_WRITE (before 5.1), no peer maps it
// writable.
func newMemfdBell() (int, doorbell, error) {
	fd, mem, err := newMemfdSeals("softrdma-shm-bell", bellBytes, unix.F_SEAL_FUTURE_WRITE)
	if err != nil {
		return -1, nil, err
	}
	if ro, err := readOnlyFd(fd); err == nil {
		unix.Close(fd)
		fd = ro
	}
	return fd, doorbell(mem), nil
}

// --- verbs.Device ---

// Name returns the device name ("shm0" unless Config.Name says otherwise).
func (d *Device) Name() string { return d.name }

// GUID returns the node GUID: the device id.
func (d *Device) GUID() uint64 { return d.id }

// Open returns the device itself.
func (d *Device) Open() (verbs.Context, error) {
	if d.Closed() {
		return nil, verbs.Errorf("Open", verbs.ErrDestroyed, "device %s is closed", d.name)
	}
	return d, nil
}

// --- verbs.Context ---

// Device returns d.
func (d *Device) Device() verbs.Device { return d }

// Limits of the device.
const (
	maxQPWR     = 4096
	maxSGE      = 32
	maxInline   = 4096
	maxCQE      = 1 << 20
	maxRdAtomic = 16
)

// QueryDevice returns the device attributes.
func (d *Device) QueryDevice() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{
		FWVer: "softrdma-shm", NodeGUID: d.id, SysImageGUID: d.id, MaxMRSize: 1 << 40, PageSizeCap: uint64(os.Getpagesize()),
		MaxQP: 1 << 16, MaxQPWR: maxQPWR, MaxSGE: maxSGE, MaxSGERd: maxSGE, MaxCQ: 1 << 16, MaxCQE: maxCQE,
		MaxMR: 1 << 20, MaxPD: 1 << 16, MaxQPRdAtom: maxRdAtomic, MaxResRdAtom: maxRdAtomic, MaxQPInitRdAtom: maxRdAtomic,
		AtomicCap: verbs.AtomicGlob, MaxAH: 1 << 16, MaxSRQ: 1 << 16, MaxSRQWR: maxQPWR, MaxSRQSGE: maxSGE,
		MaxPKeys: 1, PhysPortCnt: 1, MaxInlineData: maxInline,
		VendorID: 0xFFFFFF, // as the RoCEv2 provider and rxe: no IEEE OUI of a vendor (0 reads as unset)
	}, nil
}

// QueryPort returns the attributes of port 1: active, MTU 4096 (the UD
// datagram limit; RC messages are not segmented by it).
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, verbs.Errorf("QueryPort", verbs.ErrNotFound, "port %d: shm devices have one port, number 1", port)
	}
	return verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU4096, GIDTblLen: 1,
		MaxMsgSz: 1 << 31, PKeyTblLen: 1, LinkLayer: verbs.LinkLayerEthernet, PhysState: 5, LinkMTU: 4096 + 80,
		// Nominal, as the RoCEv2 provider's: tools print and rate
		// calculations need a valid width and speed (0 is "invalid").
		ActiveWidth: 2, ActiveSpeed: 32}, nil
}

// QueryGID returns the device's GID (index 0, the only one): fd73:686d,
// the uid, then the device id. It names the device's socket.
func (d *Device) QueryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 || index != 0 {
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "port %d index %d: shm devices have one GID, port 1 index 0", port, index)
	}
	return d.gid, nil
}

// GID returns the device's GID, the address peers connect to.
func (d *Device) GID() verbs.GID { return d.gid }

// Closed reports whether Close has been called.
func (d *Device) Closed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// OnClose registers f to run when Close begins (verbs.CloseNotifier):
// the connection manager ends its work on the device there.
func (d *Device) OnClose(f func()) (remove func()) { return d.closeHooks.OnClose(f) }

// Close stops the device: it first runs the OnClose functions (the
// connection manager closes its listeners and connections and releases
// what it created, sending their disconnects), then destroys the QPs and
// deregisters the MRs the application left (as closing a kernel device's
// file does: peers lose their mappings first), closes the socket and
// every connection and stops its goroutines. Later calls on the device's
// objects fail with verbs.ErrDestroyed or find the device closed.
// Closing a closed device does nothing.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	// What runs on the device (cm's agent, its connections and the
	// objects they created) ends first, while it can still send their
	// disconnects.
	d.closeHooks.RunCloseHooks()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qps := make([]*QP, 0, len(d.qpByNum))
	for _, qp := range d.qpByNum {
		qps = append(qps, qp)
	}
	d.mu.Unlock()
	for _, qp := range qps {
		qp.Destroy()
	}
	d.mrMu.RLock()
	mrs := make([]*MR, 0, len(d.mrs))
	for _, mr := range d.mrs {
		mrs = append(mrs, mr)
	}
	d.mrMu.RUnlock()
	for _, mr := range mrs {
		mr.Dereg()
	}
	d.mu.Lock()
	conns := make([]*conn, 0, len(d.all))
	for c := range d.all {
		conns = append(conns, c)
	}
	for k, m := range d.inboxes {
		d.dropInboxLocked(k, m)
	}
	for ln := range d.services {
		ln.Close()
		delete(d.services, ln)
	}
	d.mu.Unlock()
	d.ln.Close()
	for _, c := range conns {
		c.close()
	}
	close(d.stop)
	atomic.AddUint32(d.bell.word(bellSeq), 1)
	futexWake(d.bell.word(bellSeq))
	d.wg.Wait()
	d.connWG.Wait()
	unix.Munmap(d.bell)
	unix.Close(d.bellFD)
	d.events.Close()
	return nil
}

// Progress services the device's rings on the calling goroutine: for
// programs that busy-poll memory rather than a CQ. It never blocks and
// makes no system call unless a peer sleeps (verbs.Progresser).
func (d *Device) Progress() {
	d.markActive()
	d.progress()
}

// ProgressWaiting is Progress for a thread that waits for a completion
// event by spinning (softrdma's C library's ibv_get_cq_event, before it
// blocks). Such a waiter moves the rings itself, so its armed CQs do not
// keep the progress goroutine from napping (awaited): awake, that
// goroutine found nothing the spinner had not taken, slept on the
// doorbell, and every peer's post rang it, a futex wake and a message per
// post. perftest's ib_send_lat -e over the C library made two context
// switches per message and took 20 times the Go tool's latency. A spin
// that runs out calls BeginWait before it blocks.
func (d *Device) ProgressWaiting() {
	if !d.spinWaits.Load() {
		d.spinWaits.Store(true)
	}
	if !d.spun.Load() {
		d.spun.Store(true)
	}
	d.Progress()
}

// BeginWait and EndWait bracket a wait for the device's completions by a
// thread the Go runtime does not run (the C library's ibv_get_cq_event,
// blocked on the channel's descriptor): the progress goroutine delivers
// for it as for a goroutine blocked in CQ.Wait, and a nap ends now.
func (d *Device) BeginWait() {
	d.spinWaits.Store(false)
	d.waiting.Add(1)
	d.wakeForWaiter()
}

// EndWait ends BeginWait.
func (d *Device) EndWait() { d.waiting.Add(-1) }

// markActive tells the progress goroutine that the application drives
// the rings itself, so it need not be woken through the doorbell. It
// writes the flag only when it changes: the hot path reads one shared
// cache line that stays in its core's cache.
func (d *Device) markActive() {
	if !d.active.Load() {
		d.active.Store(true)
	}
}

func nanotime() int64 { return time.Now().UnixNano() }

// progress services every QP once. It reports whether anything moved,
// or a QP could not be looked at because another goroutine held it: the
// progress goroutine must then not go to sleep, since a peer that saw it
// awake did not ring for what that QP's rings hold.
func (d *Device) progress() bool {
	moved, contended := d.progressPass()
	return moved || contended
}

// progressPass is progress telling apart a pass that moved something
// from one that found a QP held by another goroutine.
func (d *Device) progressPass() (moved, contended bool) {
	for _, qp := range *d.qps.Load() {
		if qp.busy.Load() == 0 {
			continue
		}
		if !qp.mu.TryLock() {
			contended = true
			continue
		}
		if qp.progressLocked() {
			moved = true
		}
		qp.unlock()
	}
	if d.pollUD() {
		moved = true
	}
	return moved, contended
}

// progressLoop services the rings while no application goroutine polls:
// it spins briefly after activity, naps while an application busy-polls
// (so peers need not ring), and sleeps on the doorbell futex when idle,
// costing no CPU.
func (d *Device) progressLoop() {
	defer d.wg.Done()
	// Not LockOSThread: a locked goroutine's every Gosched is a handoff
	// between OS threads, tens of microseconds each. The futex wait keeps
	// its thread for its duration anyway, having released the P.
	seqw, sleeping := d.bell.word(bellSeq), d.bell.word(bellSleeping)
	idle, held := 0, 0
	var heldSince int64 // when passes began to find only a held QP
	nap := time.NewTimer(time.Hour)
	nap.Stop()
	defer nap.Stop()
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		// While the application polls (active) and no goroutine is
		// blocked in CQ.Wait, what this pass moved or found held, the
		// application would have moved itself: the loop counts such
		// passes as idle and so naps after a short spin, rather than
		// spinning beside the poller, fighting it for the QPs' locks
		// and taking the CPU its peer needs. Only an application that
		// stopped polling waits, once, for the nap.
		polls := d.active.Load() && !d.awaited()
		moved, contended := d.progressPass()
		if moved && !polls {
			idle, held = 0, 0
			continue
		}
		if contended && !polls {
			// A QP was held and nothing moved: look again, never
			// sleeping (a peer that saw this goroutine awake did not
			// ring for what that QP's rings hold), but not hot. The
			// holder may be a thread the OS took the CPU from in the
			// middle of a post (ringing a peer is two system calls):
			// this loop spinning on kept a CPU from it, for whole
			// scheduler slices on a busy machine (a gRPC call's p99
			// over rdmanet: 6-8 ms against 3 over TCP). Past
			// heldSpin, longer than a post holds a QP on a CPU of its
			// own, it gives its CPU away at every look.
			if held++; held == 1 {
				heldSince = nanotime()
			}
			if held%heldLook == 0 && nanotime()-heldSince > int64(heldSpin) {
				spin.OSYield()
			} else {
				spin.Idle(held)
			}
			continue
		}
		held = 0
		idle++
		if idle < 64 {
			runtime.Gosched()
			continue
		}
		// A waiter that spins (spinWaits) counts as polling: this
		// goroutine naps while it spins, and stops counting it once a
		// whole nap passes without a spin (spun; posts and polls of
		// other threads do not count): its application may now wait on
		// a channel's descriptor itself, which only this goroutine
		// serves (awaited).
		if polled := d.active.Swap(false); !d.awaited() && (polled || d.spinWaits.Load()) {
			d.spun.Store(false)
			// The application polls: peers need not ring, and this
			// goroutine keeps out of the way of busy pollers, until a
			// CQ waiter is about to block (wakeForWaiter): the nap
			// would delay its completion by up to the whole nap, and
			// peers do not ring a napping device.
			nap.Reset(d.nap)
			select {
			case <-nap.C:
				if !d.spun.Load() && d.spinWaits.Load() {
					d.spinWaits.Store(false) // a whole nap without a spin
				}
			case <-d.napWake:
				nap.Stop()
			case <-d.stop:
				return
			}
			continue
		}
		seq := atomic.LoadUint32(seqw)
		atomic.StoreUint32(sleeping, 1)
		select {
		case <-d.stop:
			// Close bumped seq after closing stop: if seq was loaded
			// after that, the futex would not see the change.
			return
		default:
		}
		if d.progress() {
			atomic.StoreUint32(sleeping, 0)
			idle = 0
			continue
		}
		wait := d.safety
		if dl := d.rnrWake.Load(); dl != 0 {
			w := time.Duration(dl - nanotime())
			if w <= 0 {
				// Due: the next pass fails the SEND or finds it taken;
				// a QP still waiting sets its deadline again.
				d.rnrWake.CompareAndSwap(dl, 0)
				atomic.StoreUint32(sleeping, 0)
				continue
			}
			wait = min(wait, w)
		}
		futexWait(seqw, seq, wait)
		atomic.StoreUint32(sleeping, 0)
		idle = 0
	}
}

// While passes find a QP held and move nothing, the progress goroutine
// looks at the clock every heldLook passes; once that has lasted
// heldSpin it gives its CPU to other threads (sched_yield) at every look.
const (
	heldLook = 4
	heldSpin = 20 * time.Microsecond
)

// safetyWake bounds a sleep on the doorbell: a safety net against a peer
// that clears our flag. A variable so that a test can take it away (for
// the devices it opens after).
var safetyWake = 5 * time.Second

// napTime is how long the progress goroutine naps while the application
// polls; a variable so that a test can make a nap last (for the devices
// it opens after).
var napTime = 2 * time.Millisecond

// awaited reports whether a goroutine waits for a completion that only
// the progress goroutine will deliver: one blocked in CQ.Wait, or an
// application sleeping on a CompChannel for an armed CQ, unless its
// waits spin on ProgressWaiting.
func (d *Device) awaited() bool {
	return d.waiting.Load() != 0 || d.armed.Load() != 0 && !d.spinWaits.Load()
}

// wakeForWaiter is called by a CQ waiter before it blocks: the progress
// goroutine stops napping and, unless the application polls again, sleeps
// on the doorbell, where peers ring it.
func (d *Device) wakeForWaiter() {
	d.active.Store(false)
	select {
	case d.napWake <- struct{}{}:
	default:
	}
}

// kick makes the progress goroutine look at the rings soon.
func (d *Device) kick() {
	atomic.AddUint32(d.bell.word(bellSeq), 1)
	if atomic.LoadUint32(d.bell.word(bellSleeping)) != 0 {
		futexWake(d.bell.word(bellSeq))
	}
}

func (d *Device) setQPsLocked() {
	s := make([]*QP, 0, len(d.qpByNum))
	for _, qp := range d.qpByNum {
		s = append(s, qp)
	}
	d.qps.Store(&s)
}

// randKey returns an unguessable 24- or 32-bit value not used in taken.
func randKey[V any](taken map[uint32]V, mask uint32) uint32 {
	for {
		var b [4]byte
		rand.Read(b[:])
		k := binary.LittleEndian.Uint32(b[:]) & mask
		if _, ok := taken[k]; !ok && k > 1 {
			return k
		}
	}
}

// openedDevices are the devices this process opened, for the provider.
type openedDevices struct {
	mu   sync.Mutex
	devs []*Device
}

var opened openedDevices

func (o *openedDevices) add(d *Device) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.devs = append(o.devs, d)
}

// Devices lists the devices opened in this process, then an unopened
// "shm0" if no open device has that name: opening it is Open(Config{}).
func (provider) Devices() ([]verbs.Device, error) {
	var out []verbs.Device
	seen := false
	opened.mu.Lock()
	live := opened.devs[:0]
	for _, d := range opened.devs {
		if d.Closed() {
			continue
		}
		live = append(live, d)
		out = append(out, d)
		seen = seen || d.name == DefaultName
	}
	clear(opened.devs[len(live):])
	opened.devs = live
	opened.mu.Unlock()
	if !seen {
		out = append(out, defaultDevice{})
	}
	return out, nil
}

// defaultDevice is the listed, unopened device.
type defaultDevice struct{}

func (defaultDevice) Name() string { return DefaultName }
func (defaultDevice) GUID() uint64 { return 0 }
func (defaultDevice) Open() (verbs.Context, error) {
	return Open(Config{})
}
