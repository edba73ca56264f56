package nvmeof

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// Namespace is a namespace of a subsystem: a store seen as blocks.
type Namespace struct {
	// ID is the NSID (1, 2, ...), unique in its subsystem.
	ID uint32
	// Store holds the data; its size is rounded down to whole blocks.
	Store Store
	// BlockSize is the logical block size: 512 or 4096 (default 4096).
	BlockSize int
	// ReadOnly refuses writes (Write, Write Zeroes, deallocate).
	ReadOnly bool
}

// Subsystem is an NVM subsystem: an NQN with namespaces.
type Subsystem struct {
	// NQN names the subsystem (nqn.2014-08.org.example:disk1).
	NQN string
	// Serial and Model show in Identify Controller (defaults derive from
	// the NQN and "softrdma").
	Serial, Model string
	Namespaces    []*Namespace
	// AllowedHosts, if not empty, are the host NQNs that may connect; other
	// hosts get "connect: invalid host".
	AllowedHosts []string
}

// TargetConfig configures a Target. Zero fields take the defaults named.
type TargetConfig struct {
	Subsystems []*Subsystem
	// InCapsuleDataSize is how many bytes of data an I/O command may carry
	// in its capsule instead of by a keyed SGL (default 8192; rounded up
	// to 16 bytes; negative: none).
	InCapsuleDataSize int
	// MaxQueueSize is the most entries an I/O queue may have (default 128).
	MaxQueueSize int
	// MaxIOQueues is the most I/O queues a controller may have (default 8).
	MaxIOQueues int
	// MaxTransferSize is the most data one command moves (default 128
	// KiB; a power of two from 4 KiB).
	MaxTransferSize int
	// Logf, if not nil, receives one line per controller and queue event.
	Logf func(format string, args ...any)
}

func (c *TargetConfig) withDefaults() (TargetConfig, error) {
	d := *c
	if d.InCapsuleDataSize == 0 {
		d.InCapsuleDataSize = 8192
	}
	if d.InCapsuleDataSize < 0 {
		d.InCapsuleDataSize = 0
	}
	d.InCapsuleDataSize = (d.InCapsuleDataSize + 15) &^ 15
	if d.MaxQueueSize == 0 {
		d.MaxQueueSize = 128
	}
	if d.MaxIOQueues == 0 {
		d.MaxIOQueues = 8
	}
	if d.MaxTransferSize == 0 {
		d.MaxTransferSize = 128 << 10
	}
	switch {
	case d.MaxQueueSize < 2 || d.MaxQueueSize > 1024:
		return d, fmt.Errorf("nvmeof: MaxQueueSize %d: use 2 to 1024", d.MaxQueueSize)
	case d.MaxIOQueues < 1 || d.MaxIOQueues > 256:
		return d, fmt.Errorf("nvmeof: MaxIOQueues %d: use 1 to 256", d.MaxIOQueues)
	case d.MaxTransferSize < 4096 || d.MaxTransferSize > 8<<20 || d.MaxTransferSize&(d.MaxTransferSize-1) != 0:
		return d, fmt.Errorf("nvmeof: MaxTransferSize %d: use a power of two from 4 KiB to 8 MiB", d.MaxTransferSize)
	case d.InCapsuleDataSize > 1<<20:
		return d, fmt.Errorf("nvmeof: InCapsuleDataSize %d: at most 1 MiB", d.InCapsuleDataSize)
	}
	if d.Logf == nil {
		d.Logf = func(string, ...any) {}
	}
	return d, nil
}

// Target serves subsystems to NVMe-oF hosts over RDMA: Linux's nvme-rdma,
// softrdma's Host, SPDK. One Target may serve several listeners. Its
// methods are safe for concurrent use.
type Target struct {
	cfg  TargetConfig
	subs map[string]*Subsystem

	mu       sync.Mutex
	ctrls    map[uint16]*controller
	nextCtrl uint16
	queues   map[*queue]struct{}
	lns      map[*cm.Listener]struct{}
	pds      map[verbs.Context]verbs.PD
	closed   bool
	wg       sync.WaitGroup
	genctr   atomic.Uint64

	// Counters, for tests and metrics.
	Stats TargetStats
}

// TargetStats counts what a target did; read with atomic loads.
type TargetStats struct {
	Commands      atomic.Uint64 // commands received
	Errors        atomic.Uint64 // commands completed with a status other than success
	BadCapsules   atomic.Uint64 // receives too short for a command, or with bad SGLs
	RejectedConns atomic.Uint64 // queue requests refused in the CM exchange
	KeepAliveLost atomic.Uint64 // controllers torn down because their keep-alive expired
}

// NewTarget checks cfg and returns a target that serves nothing until
// Serve.
func NewTarget(cfg TargetConfig) (*Target, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Target{cfg: c, subs: map[string]*Subsystem{}, ctrls: map[uint16]*controller{}, nextCtrl: 1,
		queues: map[*queue]struct{}{}, lns: map[*cm.Listener]struct{}{}, pds: map[verbs.Context]verbs.PD{}}
	t.genctr.Store(1)
	for _, s := range c.Subsystems {
		if s.NQN == "" || len(s.NQN) > 223 {
			return nil, fmt.Errorf("nvmeof: subsystem NQN %q: give 1 to 223 bytes (nqn.yyyy-mm.reverse.domain:name)", s.NQN)
		}
		if s.NQN == DiscoveryNQN {
			return nil, fmt.Errorf("nvmeof: %s is the discovery subsystem, which every target has", DiscoveryNQN)
		}
		if _, dup := t.subs[s.NQN]; dup {
			return nil, fmt.Errorf("nvmeof: subsystem %s given twice", s.NQN)
		}
		ids := map[uint32]bool{}
		for _, ns := range s.Namespaces {
			if ns.BlockSize == 0 {
				ns.BlockSize = 4096
			}
			if ns.BlockSize != 512 && ns.BlockSize != 4096 {
				return nil, fmt.Errorf("nvmeof: %s namespace %d: block size %d; use 512 or 4096", s.NQN, ns.ID, ns.BlockSize)
			}
			if ns.ID == 0 || ns.ID == 0xffffffff || ids[ns.ID] {
				return nil, fmt.Errorf("nvmeof: %s: namespace ID %d is reserved or repeated", s.NQN, ns.ID)
			}
			if ns.Store == nil || ns.Store.Size() < int64(ns.BlockSize) {
				return nil, fmt.Errorf("nvmeof: %s namespace %d: a store of at least one %d-byte block is needed", s.NQN, ns.ID, ns.BlockSize)
			}
			ids[ns.ID] = true
		}
		t.subs[s.NQN] = s
	}
	return t, nil
}

// Listen listens on address (IP:port, the NVMe-oF RDMA port is 4420) with
// opts and serves until ctx ends or Close.
func (t *Target) Listen(ctx context.Context, address string, opts *cm.Options) error {
	ln, err := cm.Listen("rdma", address, opts)
	if err != nil {
		return err
	}
	return t.Serve(ctx, ln)
}

// Serve accepts queue connections from ln until ctx ends or Close, then
// closes ln and returns ctx's error (nil after Close).
func (t *Target) Serve(ctx context.Context, ln *cm.Listener) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		ln.Close()
		return errors.New("nvmeof: target closed")
	}
	t.wg.Add(1)
	t.lns[ln] = struct{}{}
	t.mu.Unlock()
	defer t.wg.Done()
	defer func() {
		ln.Close()
		t.mu.Lock()
		delete(t.lns, ln)
		t.mu.Unlock()
	}()
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed || ctx.Err() == nil && errors.Is(err, cm.ErrClosed) {
				return nil
			}
			return err
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			if err := t.acceptQueue(ctx, ln, req); err != nil {
				t.cfg.Logf("nvmeof: queue from %v: %v", req.Remote, err)
			}
		}()
	}
}

// Close disconnects every queue and stops every Serve.
func (t *Target) Close() error {
	t.mu.Lock()
	t.closed = true
	qs := make([]*queue, 0, len(t.queues))
	for q := range t.queues {
		qs = append(qs, q)
	}
	for ln := range t.lns {
		ln.Close()
	}
	t.mu.Unlock()
	for _, q := range qs {
		q.shutdown()
	}
	return nil
}

// DisconnectAll ends every controller and queue, as if each host had
// gone away, and keeps serving: hosts that reconnect get new controllers.
func (t *Target) DisconnectAll() {
	t.mu.Lock()
	qs := make([]*queue, 0, len(t.queues))
	for q := range t.queues {
		qs = append(qs, q)
	}
	t.mu.Unlock()
	for _, q := range qs {
		q.shutdown()
	}
}

// Wait waits for every Serve and queue to end (after Close or ctx).
func (t *Target) Wait() { t.wg.Wait() }

func (t *Target) pdFor(ctx verbs.Context) (verbs.PD, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pd, ok := t.pds[ctx]; ok {
		return pd, nil
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, err
	}
	t.pds[ctx] = pd
	return pd, nil
}

// acceptQueue answers one queue's CM request: the private data names the
// queue and its sizes (NVMe-oF 1.1, 7.3.1); a bad one is refused with the
// transport's status in the REJ.
func (t *Target) acceptQueue(ctx context.Context, ln *cm.Listener, req *cm.ConnRequest) error {
	var pd CMRequest
	reject := func(sts uint16, why string) error {
		t.Stats.RejectedConns.Add(1)
		req.Reject(cmRej(sts))
		return errors.New(why)
	}
	if req.QPType != verbs.QPTypeRC {
		return reject(CMRejInvalidQID, "not an RC connection")
	}
	if err := pd.UnmarshalBinary(req.PrivateData); err != nil {
		return reject(CMRejInvalidLen, err.Error())
	}
	switch {
	case pd.RecFmt != 0:
		return reject(CMRejInvalidRecFmt, fmt.Sprintf("record format %d", pd.RecFmt))
	case int(pd.QID) > t.cfg.MaxIOQueues:
		return reject(CMRejInvalidQID, fmt.Sprintf("queue ID %d above %d", pd.QID, t.cfg.MaxIOQueues))
	case int(pd.HSQSize) >= t.cfg.MaxQueueSize || pd.HSQSize == 0:
		return reject(CMRejInvalidHSQSize, fmt.Sprintf("host SQ size %d (0's based) outside 1..%d", pd.HSQSize, t.cfg.MaxQueueSize-1))
	case pd.HRQSize == 0 || pd.HRQSize < pd.HSQSize:
		return reject(CMRejInvalidHRQSize, fmt.Sprintf("host RQ size %d for SQ size %d", pd.HRQSize, pd.HSQSize+1))
	}
	vctx := ln.Context()
	q, err := t.newQueue(vctx, pd.QID, int(pd.HSQSize)+1)
	if err != nil {
		return reject(CMRejNoResources, err.Error())
	}
	conn, err := req.Accept(ctx, &cm.Options{Context: vctx, QP: q.qp, PD: q.pd,
		PrivateData: cmRep(uint16(q.size))})
	if err != nil {
		q.release()
		return err
	}
	q.conn = conn
	q.local = conn.LocalAddr()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		conn.Close()
		q.release()
		return errors.New("target closed")
	}
	t.queues[q] = struct{}{}
	t.mu.Unlock()
	t.cfg.Logf("nvmeof: queue %d (%d entries) from %v", q.qid, q.size, conn.RemoteAddr())
	q.run()
	t.mu.Lock()
	delete(t.queues, q)
	t.mu.Unlock()
	return nil
}

// controller is one host's association with a subsystem: the admin queue's
// Connect creates it, I/O queues join it by CNTLID.
type controller struct {
	t       *Target
	id      uint16
	sub     *Subsystem // nil: the discovery controller
	hostNQN string
	hostID  [16]byte

	mu        sync.Mutex
	cc, csts  uint32
	ioQueues  int // granted by Set Features Number of Queues
	aec       uint32
	kato      time.Duration
	lastKA    time.Time
	aers      []aerSlot // outstanding Asynchronous Event Requests
	queues    map[uint16]*queue
	kaTimer   *time.Timer
	destroyed bool
}

type aerSlot struct {
	q   *queue
	cid uint16
}

func (c *controller) isDiscovery() bool { return c.sub == nil }

func (t *Target) newController(sub *Subsystem, d *connectData, kato time.Duration) (*controller, Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for range 0xffef {
		id := t.nextCtrl
		t.nextCtrl++
		if t.nextCtrl >= 0xfff0 {
			t.nextCtrl = 1
		}
		if _, used := t.ctrls[id]; used {
			continue
		}
		c := &controller{t: t, id: id, sub: sub, hostNQN: d.HostNQN, hostID: d.HostID, kato: kato,
			lastKA: time.Now(), queues: map[uint16]*queue{}, ioQueues: t.cfg.MaxIOQueues}
		t.ctrls[id] = c
		if kato > 0 {
			c.kaTimer = time.AfterFunc(kato, c.checkKeepAlive)
		}
		return c, StatusSuccess
	}
	return nil, StatusConnectCtrlBusy
}

// checkKeepAlive tears the controller down when no command came within
// its keep-alive timeout (NVMe 1.4, 7.12: the host sends Keep Alive at
// least that often).
func (c *controller) checkKeepAlive() {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return
	}
	// A little slack over KATO, as Linux's nvmet gives: the host's timer
	// and the network both add delay.
	idle := time.Since(c.lastKA)
	if limit := c.kato + c.kato/2; idle < limit {
		c.kaTimer.Reset(limit - idle)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.t.Stats.KeepAliveLost.Add(1)
	c.t.cfg.Logf("nvmeof: controller %d (%s): keep-alive timeout, tearing down", c.id, c.hostNQN)
	c.destroy()
}

func (c *controller) touch() {
	c.mu.Lock()
	c.lastKA = time.Now()
	c.mu.Unlock()
}

// destroy disconnects every queue of the controller and forgets it.
func (c *controller) destroy() {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return
	}
	c.destroyed = true
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	qs := make([]*queue, 0, len(c.queues))
	for _, q := range c.queues {
		qs = append(qs, q)
	}
	c.mu.Unlock()
	c.t.mu.Lock()
	delete(c.t.ctrls, c.id)
	c.t.mu.Unlock()
	for _, q := range qs {
		q.shutdown()
	}
}

// nguid derives a namespace's globally unique identifier from the
// subsystem's NQN and the NSID, so it is the same on every run.
func nguid(nqn string, nsid uint32) (g [16]byte) {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", nqn, nsid))
	copy(g[:], h[:16])
	return g
}

func (s *Subsystem) namespace(nsid uint32) *Namespace {
	for _, ns := range s.Namespaces {
		if ns.ID == nsid {
			return ns
		}
	}
	return nil
}

func (s *Subsystem) maxNSID() uint32 {
	var m uint32
	for _, ns := range s.Namespaces {
		m = max(m, ns.ID)
	}
	return m
}

func (s *Subsystem) allows(host string) bool {
	return len(s.AllowedHosts) == 0 || slices.Contains(s.AllowedHosts, host)
}

// controllerInfo is this controller's Identify Controller data.
func (c *controller) info() ControllerInfo {
	t := c.t
	ci := ControllerInfo{
		VendorID: 0, Firmware: "softrdma", CNTLID: c.id, Version: 0x10300,
		MDTS:   uint8(bits.TrailingZeros(uint(t.cfg.MaxTransferSize / 4096))),
		MaxCmd: uint16(t.cfg.MaxQueueSize), KAS: 10, SGLS: sglsSupported | sglsKeyed | sglsOffset,
		IOCCSZ: uint32(CommandSize+t.cfg.InCapsuleDataSize) / 16, IORCSZ: CompletionSize / 16,
		AERL: 3, LPA: 1 << 2, SQES: 0x66, CQES: 0x44,
	}
	if c.isDiscovery() {
		ci.SubNQN, ci.ControllerType, ci.Model, ci.Serial = DiscoveryNQN, ctrlTypeDiscovery, "softrdma discovery", "softrdma"
		return ci
	}
	s := c.sub
	ci.SubNQN, ci.ControllerType, ci.NN = s.NQN, ctrlTypeIO, s.maxNSID()
	ci.Model, ci.Serial = s.Model, s.Serial
	if ci.Model == "" {
		ci.Model = "softrdma"
	}
	if ci.Serial == "" {
		h := sha256.Sum256([]byte(s.NQN))
		ci.Serial = fmt.Sprintf("%x", h[:10])
	}
	ci.OAES = 1 << 8
	ci.ONCS = 1<<2 | 1<<3 // Dataset Management, Write Zeroes
	ci.VWC = 1
	return ci
}

// discoveryLog is the discovery log page this target serves to a host
// that reached it at local: every subsystem the host may use, then the
// discovery subsystem itself.
func (t *Target) discoveryLog(host string, local netip.AddrPort) []byte {
	var subs []*Subsystem
	for _, s := range t.cfg.Subsystems {
		if s.allows(host) {
			subs = append(subs, s)
		}
	}
	b := make([]byte, discoveryHeaderLen+discoveryEntryLen*(len(subs)+1))
	putUint64(b, t.genctr.Load())
	putUint64(b[8:], uint64(len(subs)+1))
	for i, s := range subs {
		e := DiscoveryEntry{SubNQN: s.NQN, SubType: subTypeNVM, PortID: 1, Addr: local}
		e.encode(b[discoveryHeaderLen+i*discoveryEntryLen:])
	}
	e := DiscoveryEntry{SubNQN: DiscoveryNQN, SubType: subTypeCurrDisc, PortID: 1, Addr: local}
	e.encode(b[discoveryHeaderLen+len(subs)*discoveryEntryLen:])
	return b
}
