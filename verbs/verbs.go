package verbs

import (
	"context"
	"fmt"
	"sync"
)

// Device is an RDMA device a provider offers (struct ibv_device). Opening it
// gives a Context.
type Device interface {
	// Name is the device name, such as "softrdma0" or "rxe0".
	Name() string
	// GUID is the node GUID.
	GUID() uint64
	// Open opens the device for use.
	Open() (Context, error)
}

// Context is an open device (struct ibv_context). Its methods are safe for
// concurrent use.
type Context interface {
	Device() Device
	QueryDevice() (DeviceAttr, error)
	// QueryPort returns the attributes of port (ports are numbered from 1).
	QueryPort(port uint8) (PortAttr, error)
	// QueryGID returns entry index of port's GID table.
	QueryGID(port uint8, index int) (GID, error)
	AllocPD() (PD, error)
	// CreateCQ creates a CQ with room for at least cqe completions. If ch is
	// not nil, the CQ reports events to it after ReqNotify.
	CreateCQ(cqe int, ch *CompChannel) (CQ, error)
	// Close releases the context and what the application left of the
	// objects created from it, as closing a kernel device's file does:
	// its QPs are destroyed and its MRs deregistered (peers can no longer
	// reach them), and creating objects on it fails with ErrDestroyed.
	// Destroying a left object afterwards may return ErrDestroyed.
	// Closing a closed context does nothing.
	Close() error
}

// PD is a protection domain (struct ibv_pd): MRs, QPs, SRQs and AHs created
// in one PD work only with each other.
type PD interface {
	Context() Context
	// RegMR registers buf, which the caller keeps alive and does not move,
	// for access by work requests and, if access allows, by remote peers.
	// Remote write or atomic access requires AccessLocalWrite, as IBTA
	// requires.
	RegMR(buf []byte, access Access) (MR, error)
	// AllocMR allocates length bytes of memory outside the Go heap (mmap),
	// page aligned and zeroed, and registers it. Dereg releases the memory.
	// This is the memory to use for data that other processes or devices
	// map; MR.Bytes returns it.
	AllocMR(length int, access Access) (MR, error)
	CreateQP(attr *QPInitAttr) (QP, error)
	CreateSRQ(attr *SRQInitAttr) (SRQ, error)
	CreateAH(attr *AHAttr) (AH, error)
	// AllocMW allocates a memory window of type typ (ibv_alloc_mw). A
	// provider without windows returns ErrNotSupported.
	AllocMW(typ MWType) (MW, error)
	// Dealloc frees the PD; it fails with ErrInUse while objects remain.
	Dealloc() error
}

// MR is a registered memory region (struct ibv_mr).
//
// After Dereg returns, the keys are invalid: a local work request using the
// lkey completes with WCLocProtErr, a remote access with the rkey is NAKed
// and completes at the requester with WCRemAccessErr, and no data moves into
// or out of the memory any more.
type MR interface {
	// Addr is the virtual address of the first byte: the address SGEs and
	// remote peers use.
	Addr() uint64
	Len() int
	LKey() uint32
	RKey() uint32
	Access() Access
	// Bytes returns the registered memory. For AllocMR memory it is valid
	// until Dereg.
	Bytes() []byte
	// SGE returns the scatter/gather element for length bytes at offset off.
	SGE(off, length int) SGE
	Dereg() error
}

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType uint8

// Memory window types.
const (
	// MWType1 windows belong to their PD: any QP of it may bind them
	// (BindMW), and peers reach them through any QP of the PD. Only a
	// new bind changes or revokes their rkey.
	MWType1 MWType = 1
	// MWType2 windows (IBTA's type 2B) are bound by a WRBindMW request
	// and reachable only through the QP that bound them; LOCAL_INV or a
	// peer's SEND_WITH_INV on that QP invalidates them, and only an
	// invalidated window may be bound again.
	MWType2 MWType = 2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// MW is a memory window (struct ibv_mw): a remote key for a range of a
// memory region, granted and revoked through a QP's send queue with
// WRBindMW, WRLocalInv and the peer's SEND_WITH_INV, without registering
// memory again. The region must stay registered while windows are bound
// to it: Dereg fails with ErrInUse until they are invalidated or
// deallocated.
type MW interface {
	Type() MWType
	// RKey is the rkey of the window's latest bind (the one it was
	// allocated with before its first): the RoCEv2 provider's once the
	// bind has taken effect, provider/ibverbs' once it is posted (a
	// kernel device does not say when it takes effect). The two differ
	// only while a bind is in flight or if it failed.
	RKey() uint32
	// Dealloc frees the window; a bound window stops working at once.
	Dealloc() error
}

// BindMW binds the type 1 window mw to b's range of b.MR (ibv_bind_mw):
// it posts a WRBindMW request with wrID and flags on qp, with the next
// rkey (IncRKey(mw.RKey())), and returns that rkey. b.MW and b.RKey are
// set from mw. The bind takes effect in order with qp's other requests;
// wait for its completion before binding mw again.
func BindMW(qp QP, mw MW, wrID uint64, flags SendFlags, b MWBind) (uint32, error) {
	if qp == nil || mw == nil {
		return 0, Errorf("BindMW", ErrInvalidArgument, "a nil QP or window")
	}
	if mw.Type() != MWType1 {
		return 0, Errorf("BindMW", ErrInvalidArgument, "BindMW binds type 1 windows; post a WRBindMW request for a %v window", mw.Type())
	}
	if t1, ok := mw.(MWBinder); ok {
		return t1.BindType1(qp, wrID, flags, b)
	}
	b.MW = mw
	b.RKey = IncRKey(mw.RKey())
	if err := qp.PostSend(&SendWR{WRID: wrID, Opcode: WRBindMW, SendFlags: flags, Bind: &b}); err != nil {
		return 0, err
	}
	return b.RKey, nil
}

// Resizer is implemented by CQs that can change their capacity
// (ibv_resize_cq): Resize gives the CQ room for cqe completions, keeping
// the ones it holds; it fails if it holds more than cqe. Both software
// providers' CQs implement it.
type Resizer interface {
	Resize(cqe int) error
}

// Rereger is implemented by MRs whose PD and access flags can change in
// place, keeping their keys, as ibv_rereg_mr with IBV_REREG_MR_CHANGE_PD
// or IBV_REREG_MR_CHANGE_ACCESS does on rxe: work requests that name the
// keys from then on are checked against the new PD and access. pd nil
// keeps the PD. The RoCEv2 provider's MRs implement it.
type Rereger interface {
	Rereg(pd PD, access Access) error
}

// MWBinder is implemented by windows whose provider binds type 1 windows
// with a verb of its own (ibv_bind_mw on a kernel device: some devices
// take no BIND_MW request for them); BindMW uses it.
type MWBinder interface {
	BindType1(qp QP, wrID uint64, flags SendFlags, b MWBind) (uint32, error)
}

// CQ is a completion queue (struct ibv_cq). Poll, Wait and ReqNotify are safe
// for concurrent use, though one poller per CQ is the usual design.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	// It never blocks and never allocates.
	Poll(wc []WC) (int, error)
	// Wait blocks until the CQ holds at least one completion, ctx is done
	// (returning ctx.Err()), or the CQ is destroyed. It spins briefly before
	// sleeping, so a busy CQ reacts fast and an idle one costs no CPU.
	Wait(ctx context.Context) error
	// ReqNotify arms the CQ: the next completion (the next solicited one, if
	// solicitedOnly) delivers one event to the CQ's CompChannel.
	ReqNotify(solicitedOnly bool) error
	// CQE is the capacity of the CQ.
	CQE() int
	Destroy() error
}

// QP is a queue pair (struct ibv_qp). PostSend and PostRecv are safe for
// concurrent use with each other and with completions arriving.
type QP interface {
	// QPNum is the queue pair number peers address.
	QPNum() uint32
	Type() QPType
	// State returns the current state without querying every attribute.
	State() QPState
	// Modify changes the attributes selected by mask, validated as
	// libibverbs does: a missing required attribute, an attribute not
	// allowed for the transition or an invalid transition is an error that
	// names it.
	Modify(attr *QPAttr, mask QPAttrMask) error
	// Query returns the QP's attributes and the attributes it was created with.
	Query() (QPAttr, QPInitAttr, error)
	// PostSend posts wr and the requests chained after it. On failure the
	// error is a *PostError naming the first request not posted.
	PostSend(wr *SendWR) error
	// PostRecv posts receive requests.
	PostRecv(wr *RecvWR) error
	Destroy() error
}

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ interface {
	PostRecv(wr *RecvWR) error
	Query() (SRQAttr, error)
	// Modify sets the limit (SRQLimit) that arms the SRQ limit event; MaxWR
	// resizing is not supported.
	Modify(attr *SRQAttr, mask SRQAttrMask) error
	Destroy() error
}

// SRQAttrMask selects SRQ attributes.
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0
	SRQAttrLimit SRQAttrMask = 1 << 1
)

// AH is an address handle (struct ibv_ah): the destination of UD sends.
type AH interface {
	Attr() AHAttr
	Destroy() error
}

// Provider enumerates devices. Providers register themselves with Register.
type Provider interface {
	Name() string
	Devices() ([]Device, error)
}

var (
	providersMu sync.Mutex
	providers   []Provider
)

// Register adds a provider to the list Devices consults. Providers call it
// from their package's init or from an explicit constructor.
func Register(p Provider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	for _, q := range providers {
		if q.Name() == p.Name() {
			return
		}
	}
	providers = append(providers, p)
}

// Devices returns the devices of every registered provider
// (ibv_get_device_list).
func Devices() ([]Device, error) {
	providersMu.Lock()
	ps := append([]Provider(nil), providers...)
	providersMu.Unlock()
	var all []Device
	for _, p := range ps {
		ds, err := p.Devices()
		if err != nil {
			return nil, err
		}
		all = append(all, ds...)
	}
	return all, nil
}

// OpenDevice opens the device called name, or the first device if name is
// empty.
func OpenDevice(name string) (Context, error) {
	ds, err := Devices()
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		if name == "" || d.Name() == name {
			return d.Open()
		}
	}
	if name == "" {
		return nil, Errorf("OpenDevice", ErrNotFound, "no RDMA devices; create a softrdma device first (provider/soft)")
	}
	return nil, Errorf("OpenDevice", ErrNotFound, "no device named %q", name)
}

// CompChannel delivers CQ events to a waiting goroutine (struct
// ibv_comp_channel). Create it with NewCompChannel, pass it to CreateCQ, arm
// the CQ with ReqNotify and receive events with GetEvent or from C.
type CompChannel struct {
	ch chan CQ
	fn func(CQ) // NewCompChannelFunc's
}

// NewCompChannel returns a completion channel that buffers up to depth
// events (at least 1). A CQ delivers at most one event per ReqNotify, so a
// depth equal to the number of CQs sharing the channel never loses one.
func NewCompChannel(depth int) *CompChannel {
	if depth < 1 {
		depth = 1
	}
	return &CompChannel{ch: make(chan CQ, depth)}
}

// NewCompChannelFunc returns a completion channel that hands each event
// to fn instead of queueing it: fn runs on the provider's goroutine,
// after the completion is in the CQ (and, for a software provider,
// after the acknowledgements of the packets that raised it have left).
// It is for bridging events into another event loop, such as a file
// descriptor a C program waits on: fn must return quickly and must not
// call into the provider. C returns nil for such a channel, and GetEvent
// waits only for its context.
func NewCompChannelFunc(fn func(CQ)) *CompChannel {
	if fn == nil {
		panic("verbs: NewCompChannelFunc with a nil function")
	}
	return &CompChannel{fn: fn}
}

// C returns the channel events arrive on, for use in select statements.
func (c *CompChannel) C() <-chan CQ { return c.ch }

// GetEvent waits for the next event and returns the CQ it is for
// (ibv_get_cq_event). Rearm the CQ with ReqNotify before polling it dry, as
// with libibverbs, so no completion is missed.
func (c *CompChannel) GetEvent(ctx context.Context) (CQ, error) {
	select {
	case cq := <-c.ch:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Notify delivers an event for cq. Providers call it; it never blocks (an
// event that finds the channel full is dropped, which only happens when the
// channel is shared by more CQs than its depth).
func (c *CompChannel) Notify(cq CQ) {
	if c.fn != nil {
		c.fn(cq)
		return
	}
	select {
	case c.ch <- cq:
	default:
	}
}

// Progresser is implemented by contexts of software providers, whose data
// path runs on the host's CPUs. A goroutine that busy-polls memory instead
// of a CQ (ib_write_lat polls the last byte of its receive buffer for the
// peer's RDMA WRITE) calls Progress in its loop: the provider then
// receives and processes waiting packets in that goroutine, as CQ.Poll
// does on an empty CQ, instead of needing a second busy thread. Progress
// never blocks; calling it is never required for correctness.
type Progresser interface {
	Progress()
}

// DoorbellBatcher is implemented by contexts that can send the posts of
// many QPs together. A post to an idle QP normally leaves at once, one
// system call (or doorbell) per QP; a program that posts to many QPs in a
// row (one message on each of thousands of connections) brackets the posts
// with HoldDoorbells and RingDoorbells: between them the posts are built
// and queued, and RingDoorbells sends them all in as few system calls as
// the transport allows. Holds are context-wide (posts from other
// goroutines wait too) and nest; every HoldDoorbells needs its
// RingDoorbells, or the held posts never leave. libibverbs has no
// equivalent: this is a softrdma extension.
type DoorbellBatcher interface {
	HoldDoorbells()
	RingDoorbells()
}

// HoldDoorbells starts a doorbell batch on ctx if it supports one
// (DoorbellBatcher) and returns the function that ends it; on other
// contexts both do nothing.
//
//	ring := verbs.HoldDoorbells(ctx)
//	for _, qp := range qps {
//		qp.PostSend(wr)
//	}
//	ring()
func HoldDoorbells(ctx Context) (ring func()) {
	b, ok := ctx.(DoorbellBatcher)
	if !ok {
		return func() {}
	}
	b.HoldDoorbells()
	return b.RingDoorbells
}

// Progress calls ctx's Progress if it has one.
func Progress(ctx Context) {
	if p, ok := ctx.(Progresser); ok {
		p.Progress()
	}
}

// GSIQKey is the well-known Q_Key of the General Services Interface, QP1
// (IBTA 13.4.6.2): management datagrams (MADs) for the connection manager
// and other GSI classes travel as UD SENDs to QP1 with it.
const GSIQKey = 0x80010000

// MADSource says where a management datagram came from.
type MADSource struct {
	GID  GID    // the sender's port GID (on RoCEv2, its IP address)
	QPN  uint32 // the sending QP (DETH source QP; 1 for GSI traffic)
	PKey uint16 // the packet's P_Key
}

// GSI is implemented by contexts whose ports carry management datagrams
// on QP1, as the kernel's umad interface offers them to rdma_cm and
// ibacm: the connection manager (package cm) speaks through it, so it
// works with any provider that has one. A MAD is the payload of one UD
// SEND (256 bytes for the IB management classes).
type GSI interface {
	// SendMAD sends mad from QP1 of port to QP dstQP at dst with Q_Key
	// qkey (GSIQKey for QP1). It may block while the transport has no
	// room; it must not be called from a MAD handler.
	SendMAD(port uint8, dst GID, dstQP uint32, qkey uint32, mad []byte) error
	// HandleMADs sets the function that receives every MAD arriving at
	// QP1 of port (nil: none; MADs are then dropped and counted). It runs
	// on the receive path, holding no lock of the provider's: it must not
	// block (hand the MAD to a goroutine of its own to answer it) or keep
	// mad after it returns.
	HandleMADs(port uint8, h func(src MADSource, mad []byte)) error
}

// SecurityMode selects how a QP protects its packets (Securer).
type SecurityMode uint8

const (
	// SecurityAuth: every packet carries a sequence number and a MAC
	// (AES-GCM's tag over headers and payload); forged, modified and
	// replayed packets are dropped and counted. Payloads travel in clear.
	SecurityAuth SecurityMode = iota + 1
	// SecurityEncrypt: SecurityAuth with the payload encrypted too
	// (AES-GCM).
	SecurityEncrypt
)

func (m SecurityMode) String() string {
	switch m {
	case SecurityAuth:
		return "auth"
	case SecurityEncrypt:
		return "encrypt"
	}
	return fmt.Sprintf("SecurityMode(%d)", uint8(m))
}

// Security is what two connected QPs share to protect their packets: the
// mode, a 32-byte secret both derived (the connection manager derives it
// from an ephemeral X25519 exchange) and which side initiated, so each
// direction gets its own key.
type Security struct {
	Mode      SecurityMode
	Secret    [32]byte
	Initiator bool
}

// Securer is implemented by QPs that can authenticate and encrypt their
// packets (a softrdma extension of RoCEv2: both ends must be softrdma and
// agree; plain RoCEv2 stays the default and what rxe and NICs speak). Call
// Secure in INIT or RTR, on both ends, before any packet flows.
type Securer interface {
	Secure(s Security) error
}
