package cm

// Connections whose QP the caller moves itself: rdma_cm's rdma_connect
// and rdma_accept without a QP on the id, rdma_init_qp_attr and
// rdma_establish. cm agrees the QP number, the PSNs and the path with the
// peer exactly as for a QP it moves, but touches no QP; the caller asks
// for each step's attributes and calls Modify:
//
//	active:  DialOwnQP ─REQ(qpn)─▶ ◀─REP─ Response ─▶ QPAttr(INIT, RTR, RTS) → Modify
//	                                         ╰─▶ Establish ─RTU─▶ *Conn
//	passive: ConnRequest ─▶ QPAttr(INIT, RTR, RTS) → Modify ─▶ AcceptOwnQP(qpn) ─REP─▶ ◀─RTU─ *Conn
//
// The Conn of such a connection has no QP: Close sends the DREQ and
// leaves the QP to its owner, and the connection ends on the peer's DREQ
// only (cm does not watch a QP it does not hold). Packet protection
// (Options.Security) needs a QP cm holds, and kernel devices run their
// own CM: both are refused.

import (
	"context"
	"fmt"
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// ownQPCheck refuses options that an own-QP connection cannot honour.
func ownQPCheck(op string, o *Options) error {
	switch {
	case o.QP != nil:
		return fmt.Errorf("cm.%s: Options.QP is set: a QP cm should move goes to Dial or Accept; %s takes the number of a QP the caller moves", op, op)
	case o.QPType != verbs.QPTypeRC:
		return verbs.Errorf("cm."+op, verbs.ErrNotSupported, "QP type %v: a QP the caller moves itself is supported for RC connections", o.QPType)
	case o.Security != 0:
		return verbs.Errorf("cm."+op, verbs.ErrNotSupported, "Options.Security keys the QP as it connects, which needs a QP cm moves: use Dial or Accept")
	}
	return nil
}

// Response is the peer's REP to [DialOwnQP]: what the two sides agreed
// for the caller's QP, until [Response.Establish] answers it with the
// RTU (librdmacm's RDMA_CM_EVENT_CONNECT_RESPONSE, then rdma_establish).
// The peer resends its REP until then, and gives up after its CM
// retries (about a minute with rdma_cm's settings). Its methods are safe
// for concurrent use; answer it once, with Establish or Reject.
type Response struct {
	// PeerPrivateData is the private data of the REP.
	PeerPrivateData []byte
	// ResponderResources and InitiatorDepth are the negotiated depths.
	ResponderResources, InitiatorDepth uint8

	d    *rcDial
	c    *Conn
	once sync.Once
}

// DialOwnQP is [Dial] for an RC QP that the caller moves through its
// states itself: qpn is its number (on opts.Context, or the device that
// reaches address). It sends the REQ and returns the peer's answer; the
// caller moves the QP to RTS with [Response.QPAttr] and then calls
// [Response.Establish]. opts.QP must be nil; opts.Security is refused.
func DialOwnQP(ctx context.Context, network, address string, qpn uint32, opts *Options) (*Response, error) {
	raddr, err := splitAddr(network, address)
	if err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	if err := ownQPCheck("DialOwnQP", &o); err != nil {
		return nil, err
	}
	if qpn == 0 || qpn > 0xffffff {
		return nil, fmt.Errorf("cm.DialOwnQP: QP number %#x: want the 24-bit number of the caller's RC QP", qpn)
	}
	if len(o.PrivateData) > MaxReqPrivateData {
		return nil, fmt.Errorf("cm.DialOwnQP: %d bytes of private data; a REQ holds at most %d", len(o.PrivateData), MaxReqPrivateData)
	}
	r, err := resolveRoute(raddr, &o)
	if err != nil {
		return nil, err
	}
	if _, ok := r.ctx.(verbs.KernelCM); ok {
		return nil, verbs.Errorf("cm.DialOwnQP", verbs.ErrNotSupported, "device %s runs the kernel's connection manager: connect its QPs with Dial", r.ctx.Device().Name())
	}
	a, err := agentFor(r.ctx, r.port)
	if err != nil {
		return nil, err
	}
	c := newConn()
	c.Context = r.ctx
	c.local, c.remote = endpoints(r, raddr)
	d, err := requestRC(ctx, a, r, &o, c, qpn)
	if err != nil {
		return nil, err
	}
	return &Response{PeerPrivateData: c.PeerPrivateData, ResponderResources: c.ResponderResources,
		InitiatorDepth: c.InitiatorDepth, d: d, c: c}, nil
}

// QPAttr returns the attributes and mask that move the caller's QP to
// state: INIT (port, P_Key index, access), RTR (the path to the peer, its
// QPN, the PSN expected, path MTU, responder resources, RNR timer) or RTS
// (the PSN sent from, ACK timeout, retry counts, initiator depth).
func (r *Response) QPAttr(state verbs.QPState) (*verbs.QPAttr, verbs.QPAttrMask, error) {
	return StepAttr(state, verbs.QPTypeRC, r.d.local, r.d.remote, &r.d.p)
}

// Establish answers the REP with the RTU, once the caller's QP is in
// RTS, and returns the connection. It fails if the peer withdrew (a REJ,
// its retries ran out) or the response was answered already.
func (r *Response) Establish() (*Conn, error) {
	err := fmt.Errorf("cm: the response was already answered")
	r.once.Do(func() {
		if err = r.d.establish(r.c, nil); err == nil {
			err = r.d.a.adopt(r.c)
		}
	})
	if err != nil {
		return nil, err
	}
	return r.c, nil
}

// Reject refuses the REP: a REJ "consumer defined" with private data (at
// most 148 bytes). The caller does so when it cannot move its QP.
func (r *Response) Reject(private []byte) error {
	done := false
	r.once.Do(func() {
		r.d.abort(private)
		done = true
	})
	if !done {
		return fmt.Errorf("cm: the response was already answered")
	}
	return nil
}

// ownQP is a request's answer for a QP the caller moves: the PSN the
// caller's QP expects first, chosen at the first QPAttr, and the
// parameters (the depths follow AcceptOwnQP's options once it ran).
type ownQP struct {
	mu  sync.Mutex
	set bool
	psn uint32
	p   Params
}

// QPAttr returns the attributes and mask that move a QP the caller
// created itself to state (INIT, RTR or RTS) for this RC request, as
// rdma_init_qp_attr does on the passive side before rdma_accept: the
// peer's QPN, its path and PSN from the REQ, and the PSN the QP expects,
// which [ConnRequest.AcceptOwnQP] sends in the REP. Until AcceptOwnQP,
// the depths are the ones the REQ offers (bounded by the device's).
func (r *ConnRequest) QPAttr(state verbs.QPState) (*verbs.QPAttr, verbs.QPAttrMask, error) {
	if r.QPType != verbs.QPTypeRC || r.k != nil {
		return nil, 0, verbs.Errorf("cm.ConnRequest.QPAttr", verbs.ErrNotSupported, "attributes for a QP the caller moves exist for RC requests on softrdma devices")
	}
	psn, p, err := r.ownParams(nil)
	if err != nil {
		return nil, 0, err
	}
	local := Endpoint{PSN: r.Req.StartingPSN}
	remote := Endpoint{QPN: r.Req.LocalQPN, PSN: psn, GID: r.src.GID}
	return StepAttr(state, verbs.QPTypeRC, local, remote, &p)
}

// ownParams returns the PSN and parameters of the caller's QP; o, if not
// nil, are AcceptOwnQP's options and fix the depths.
func (r *ConnRequest) ownParams(o *Options) (uint32, Params, error) {
	r.own.mu.Lock()
	defer r.own.mu.Unlock()
	if !r.own.set || o != nil {
		opts := o
		if opts == nil {
			lo := r.l.opts
			opts = &lo
		}
		p, err := r.rcParams(opts)
		if err != nil {
			return 0, p, err
		}
		if !r.own.set {
			r.own.psn = randomPSN()
		}
		r.own.p, r.own.set = p, true
	}
	return r.own.psn, r.own.p, nil
}

// AcceptOwnQP accepts an RC request for a QP the caller moves itself: qpn
// is its number, already in RTS (or about to be: the peer may send as
// soon as it has the REP) with the attributes of [ConnRequest.QPAttr].
// It sends the REP and waits for the RTU (or ctx). opts nil means the
// listener's options; opts.QP must be nil and opts.Security is refused.
func (r *ConnRequest) AcceptOwnQP(ctx context.Context, qpn uint32, opts *Options) (*Conn, error) {
	o, err := r.acceptOptions(opts)
	if err == nil {
		err = ownQPCheck("AcceptOwnQP", &o)
	}
	if err == nil && (r.k != nil || r.Security != 0) {
		err = verbs.Errorf("cm.AcceptOwnQP", verbs.ErrNotSupported, "the request comes through the kernel's CM or asks for packet protection: accept it with Accept")
	}
	if err == nil && (qpn == 0 || qpn > 0xffffff) {
		err = fmt.Errorf("cm.AcceptOwnQP: QP number %#x: want the 24-bit number of the caller's RC QP", qpn)
	}
	c := r.newConn()
	c.Context = o.Context
	if err != nil {
		return r.fail(c, err)
	}
	psn, p, err := r.ownParams(&o)
	if err != nil {
		return r.fail(c, err)
	}
	c.ResponderResources, c.InitiatorDepth = p.MaxDestRdAtomic, p.MaxRdAtomic
	return r.reply(ctx, c, &o, qpn, psn, o.PrivateData, nil)
}
