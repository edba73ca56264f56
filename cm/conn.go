package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Errors of connection management.
var (
	// ErrTimeout: the peer did not answer a REQ, REP, DREQ or SIDR_REQ
	// within the CM's retries (about 70 s with rdma_cm's settings), or
	// the context's deadline came first.
	// It is a net.Error whose Timeout is true, and matches
	// os.ErrDeadlineExceeded and context.DeadlineExceeded.
	ErrTimeout error = timeoutError{}
	// ErrDisconnected: the peer disconnected (DREQ), or the connection
	// was closed.
	ErrDisconnected = errors.New("cm: disconnected")
	// ErrQPError: the connection's QP went to the error state (the peer
	// stopped answering: retries exhausted) without a disconnect.
	ErrQPError = errors.New("cm: the QP is in the error state; the peer is unreachable or gone")
	// ErrClosed: the listener or connection was closed.
	ErrClosed = errors.New("cm: closed")
	// ErrUnreachable: the provider knows the peer's device is gone (a
	// shared-memory peer whose process exited or was killed), so Dial
	// or Accept fails at once instead of resending until ErrTimeout.
	ErrUnreachable = errors.New("cm: the peer's device is gone")
)

// RejectError is returned by Dial (and Accept) when the peer answered
// with a REJ. Reason 8 (invalid service ID) means nobody listens on that
// port; 28 (consumer defined) is an application's reject, with its
// private data.
type RejectError struct {
	Reason      wire.CMRejReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("cm: connection rejected: %v (REJ reason %d)", e.Reason, uint16(e.Reason))
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space): it is
// the high half of the service ID that a port number maps to.
type PortSpace uint16

const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC connections (rping, ucmatose, perftest -R)
	PortSpaceUDP   PortSpace = 0x0111 // UD "connections" (udaddy), by SIDR
	PortSpaceIB    PortSpace = 0x013F
)

// ServiceID is the IB service ID rdma_cm derives from a port space and a
// port (cma.c, rdma_get_service_id): 0x0000_0000_PPPP_pppp.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// Options tune Dial, Listen and Accept. The zero value (or nil) means: find
// the device from the address, port 1, an RC QP that cm creates with its
// PD and CQs, rdma_cm's defaults.
type Options struct {
	// Context is the device to use; nil resolves it from the address
	// (an opened device whose GID table has the local address, else the
	// listed device of the interface that reaches the address). A
	// shared-memory device (shm.Open) must be given here: its peers are
	// processes of this host, found by port (verbs.ServiceDirectory).
	Context verbs.Context
	// Port is the device port (1).
	Port uint8
	// QPType is RC (default) or UD; UD resolves the peer's QPN and Q_Key
	// with SIDR instead of connecting.
	QPType verbs.QPType
	// PD, if set, is used for the QP cm creates; else cm allocates one.
	PD verbs.PD
	// QP, if set, is the caller's QP (in RESET or INIT) to connect; it
	// must belong to Context. Otherwise cm creates one with Cap and CQE.
	QP verbs.QP
	// Cap is the capacity of the QP cm creates (default 16 WRs each way,
	// 1 SGE, 64 bytes inline).
	Cap verbs.QPCap
	// CQE is the size of each CQ cm creates (default 2 × the WRs).
	CQE int
	// PrivateData goes to the peer in the REQ (at most 56 bytes after
	// rdma_cm's header), REP (196) or SIDR_REQ (180).
	PrivateData []byte
	// ResponderResources and InitiatorDepth are the READ/atomic depths
	// offered; each side takes the minimum of what both offer. Zero
	// means the device's maximum (at most 16).
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount for the QP (default 7 and 7: rping's).
	RetryCount, RNRRetryCount uint8
	// TrafficClass, for Dial, is the GRH traffic class of both QPs (the
	// IP header's DSCP and ECN bits on RoCEv2; rdma_set_option's
	// RDMA_OPTION_ID_TOS): the REQ carries it and the passive side takes
	// it from there. Default 0.
	TrafficClass uint8
	// ACKTimeout is this side's local ACK timeout code (4.096 µs ×
	// 2^ACKTimeout; rdma_set_option's RDMA_OPTION_ID_ACK_TIMEOUT), at
	// most 31. 0 means rdma_cm's, from the path's packet life time (19,
	// about 2 s); the IB value 0, never time out, cannot be asked for.
	ACKTimeout uint8
	// Access is what the peer may do to this QP's memory (default local
	// write, remote read, write and atomics, as the kernel's cm.c grants
	// a QP with responder resources; each MR's own access flags still
	// decide what a peer may do to it).
	Access verbs.Access
	// Backlog is how many connection requests a listener queues (16).
	Backlog int
	// Security, for Dial, asks for protected packets (an ephemeral X25519
	// exchange in the private data, then a MAC on every packet, and with
	// SecurityEncrypt encrypted payloads; see secure.go): Dial fails with
	// ErrNoSecurity if the peer does not agree. It takes 38 bytes of the
	// REQ's private data, leaving 18 for PrivateData (54 with
	// SecurityPSK, leaving 2). For Listen and
	// Accept it is the protection required: a request that offers less is
	// upgraded to it, one that offers none is rejected. Zero: Dial asks
	// for none; a listener takes what a dialer offers, or none.
	Security verbs.SecurityMode
	// SecurityPSK, with Security, binds the key exchange to a key both
	// applications hold (at least MinSecurityPSK random bytes, shared out
	// of band): each side proves it holds the key and the key goes into
	// the QPs' secret, so a man in the middle who rewrites the exchange
	// is found at connect time (ErrSecurityMismatch) instead of reading
	// and forging every packet. A listener with a PSK takes only requests
	// bound to it; a dialer with one takes only a REP bound to it. The
	// tag takes 16 more bytes of the REQ: 2 are left for PrivateData.
	// Nil: the exchange is unauthenticated (secure against eavesdroppers
	// only; see docs/security.md).
	SecurityPSK []byte
}

// checkSecurity refuses a PSK without a mode, or one too short.
func (o *Options) checkSecurity() error {
	switch {
	case o.SecurityPSK != nil && o.Security == 0:
		return errors.New("cm: Options.SecurityPSK without Options.Security: set the mode (SecurityAuth or SecurityEncrypt) too")
	case o.SecurityPSK != nil && len(o.SecurityPSK) < MinSecurityPSK:
		return fmt.Errorf("cm: a %d-byte SecurityPSK; use at least %d random bytes", len(o.SecurityPSK), MinSecurityPSK)
	}
	return nil
}

func (o *Options) withDefaults() Options {
	var d Options
	if o != nil {
		d = *o
	}
	if d.Port == 0 {
		d.Port = 1
	}
	if d.QPType == 0 {
		d.QPType = verbs.QPTypeRC
	}
	if d.Cap == (verbs.QPCap{}) {
		d.Cap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	}
	if d.CQE == 0 {
		d.CQE = int(2 * max(d.Cap.MaxSendWR, d.Cap.MaxRecvWR))
	}
	if d.RetryCount == 0 {
		d.RetryCount = 7
	}
	if d.RNRRetryCount == 0 {
		d.RNRRetryCount = 7
	}
	if d.Access == 0 {
		d.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if d.Backlog == 0 {
		d.Backlog = 16
	}
	return d
}

// depth returns the offered READ/atomic depth: v, or the device's
// maximum (capped at 16) when v is 0.
func depth(v uint8, devMax int) uint8 {
	if v != 0 {
		return v
	}
	return uint8(max(1, min(devMax, 16)))
}

// Conn is an established connection: its QP is in RTS (RC) or ready to
// send to the peer's QPN and Q_Key (UD). Its methods are safe for
// concurrent use. Close disconnects (DREQ) and releases what cm created.
type Conn struct {
	// Context, PD, QP, SendCQ and RecvCQ are the connection's verbs
	// objects (created by cm unless the Options gave them).
	Context        verbs.Context
	PD             verbs.PD
	QP             verbs.QP
	SendCQ, RecvCQ verbs.CQ
	// PeerPrivateData is what the peer sent with its REP (Dial) or REQ
	// (Accept), without rdma_cm's header.
	PeerPrivateData []byte
	// For UD: the peer's QPN, its Q_Key and an address handle to it.
	RemoteQPN, RemoteQKey uint32
	AH                    verbs.AH
	// ResponderResources and InitiatorDepth are the negotiated depths.
	ResponderResources, InitiatorDepth uint8
	// Security is the packet protection the two sides agreed (zero: none).
	Security verbs.SecurityMode

	local, remote netip.AddrPort
	id            *cmID
	kc            verbs.CMConn   // on a kernel device (kernel.go), else nil
	owned         []func() error // destroy what cm created, in order

	mu       sync.Mutex
	done     chan struct{}
	err      error
	closed   bool
	watchEnd chan struct{}

	ops atomic.Pointer[opEngine] // the one-sided calls' state (onesided.go)
}

// LocalAddr and RemoteAddr are the IP addresses and rdma_cm ports.
func (c *Conn) LocalAddr() netip.AddrPort  { return c.local }
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// Done is closed when the connection ends: the peer disconnected, the
// QP failed, or Close was called. Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while the connection is up, then ErrDisconnected (peer
// DREQ or Close), ErrQPError (the QP failed: the peer died).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) closeWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

func newConn() *Conn {
	return &Conn{done: make(chan struct{}), watchEnd: make(chan struct{})}
}

// watch turns a QP that went to ERR (retries exhausted: the peer is dead)
// into the connection's end, polling the QP state once a second; the
// providers have no asynchronous event for it yet.
func (c *Conn) watch() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if c.QP.State() == verbs.QPStateErr {
				c.closeWith(ErrQPError)
				return
			}
		case <-c.done:
			return
		case <-c.watchEnd:
			return
		}
	}
}

// Close disconnects: it moves the QP to ERR (posted work completes with
// flush errors; an ACK the QP still owes leaves first), sends a DREQ
// (resent in the background until the peer's DREP or the retries end),
// and destroys the QP, CQs and PD cm created. It does not wait for the
// peer.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.watchEnd)
	if c.QP != nil && c.QP.Type() != verbs.QPTypeUD && c.kc == nil {
		// ERR before the DREQ, as rdma_disconnect does: what the QP
		// still owes the peer (an ACK of its last message) leaves first.
		c.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
		// Including an ACK another goroutine of the device has taken
		// to send (settle.go).
		c.settle()
	}
	if id := c.id; id != nil {
		a := id.a
		a.mu.Lock()
		if id.state == stateEstablished {
			mad := newMAD(wire.CMDReqAttr, id.tid)
			d := wire.CMDReq{LocalCommID: id.localID, RemoteCommID: id.remoteID, RemoteQPN: id.remoteQPN}
			d.Encode(mad[wire.MADHeaderLen:])
			id.state = stateDReqSent
			a.sendRetriedLocked(id, mad, id.timeout, maxCMRetries)
		}
		a.mu.Unlock()
	}
	if c.kc != nil {
		c.kc.Close() // rdma_disconnect: the kernel sends the DREQ
	}
	c.closeWith(ErrDisconnected)
	if c.QP != nil && c.QP.Type() != verbs.QPTypeUD && c.kc != nil {
		c.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	}
	var first error
	for i := len(c.owned) - 1; i >= 0; i-- {
		if err := c.owned[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// resources creates what the options do not give: PD, CQs, QP.
func resources(vctx verbs.Context, o *Options, c *Conn) error {
	c.Context = vctx
	c.PD = o.PD
	if o.QP != nil {
		c.QP = o.QP
		return nil
	}
	if c.PD == nil {
		pd, err := vctx.AllocPD()
		if err != nil {
			return err
		}
		c.PD = pd
		c.owned = append(c.owned, pd.Dealloc)
	}
	scq, err := vctx.CreateCQ(o.CQE, nil)
	if err != nil {
		return err
	}
	c.owned = append(c.owned, scq.Destroy)
	rcq, err := vctx.CreateCQ(o.CQE, nil)
	if err != nil {
		return err
	}
	c.owned = append(c.owned, rcq.Destroy)
	c.SendCQ, c.RecvCQ = scq, rcq
	qp, err := c.PD.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, Cap: o.Cap, QPType: o.QPType})
	if err != nil {
		return err
	}
	c.QP = qp
	c.owned = append(c.owned, qp.Destroy)
	return nil
}

func (c *Conn) release() {
	for i := len(c.owned) - 1; i >= 0; i-- {
		c.owned[i]()
	}
	c.owned = nil
}

// gidIndex finds addr in the port's GID table.
func gidIndex(vctx verbs.Context, port uint8, addr netip.Addr) (int, verbs.GID, error) {
	pa, err := vctx.QueryPort(port)
	if err != nil {
		return 0, verbs.GID{}, err
	}
	want := verbs.GIDFromAddr(addr)
	for i := 0; i < max(pa.GIDTblLen, 1); i++ {
		g, err := vctx.QueryGID(port, i)
		if err != nil {
			break
		}
		if g == want {
			return i, g, nil
		}
	}
	return 0, verbs.GID{}, verbs.Errorf("cm", verbs.ErrNotFound, "device %s has no GID for %v", vctx.Device().Name(), addr)
}

// splitAddr parses "host:port" (port 0 allowed for Listen: random).
func splitAddr(network, address string) (netip.AddrPort, error) {
	switch network {
	case "rdma", "rdma4", "rdma6", "":
	default:
		return netip.AddrPort{}, fmt.Errorf("cm: network %q: want \"rdma\"", network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	host, port, err2 := splitHostPort(address)
	if err2 != nil {
		return netip.AddrPort{}, fmt.Errorf("cm: address %q: %w", address, err)
	}
	a, err := lookupHost(network, host) // resolve.go
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("cm: address %q: want host:port: %w", address, err)
	}
	return netip.AddrPortFrom(a.Unmap(), port), nil
}

func splitHostPort(s string) (string, uint16, error) {
	i := len(s) - 1
	for i >= 0 && s[i] != ':' {
		i--
	}
	if i < 0 {
		return "", 0, errors.New("missing port")
	}
	p, err := strconv.ParseUint(s[i+1:], 10, 16)
	if err != nil {
		return "", 0, err
	}
	h := s[:i]
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	return h, uint16(p), nil
}

// wait waits for the agent's answer to id or ctx's end.
func wait(ctx context.Context, id *cmID) (event, error) {
	select {
	case ev := <-id.ev:
		return ev, ev.reqErr
	case <-ctx.Done():
		err := ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			err = ErrTimeout // matches context.DeadlineExceeded too
		}
		return event{}, err
	}
}
