package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Listener accepts rdma_cm connection requests for one port of one port
// space (TCP for RC, UDP for UD) on one device, or, listening on the
// unspecified address, on every device of the host. It is safe for
// concurrent use.
type Listener struct {
	a         *agent // nil for a listener on every device (parts)
	addr      netip.AddrPort
	serviceID uint64
	qpType    verbs.QPType
	opts      Options
	reqs      chan *ConnRequest

	closeOnce sync.Once
	closed    chan struct{}
	unbind    func() // releases the service ID (verbs.ServiceDirectory), or nil

	// A listener on every device (wildcard.go) is one listener per
	// device, parts, all queueing requests on its reqs; it closes the
	// devices it opened itself.
	parts  []*Listener
	opened []verbs.Context
	part   bool // one of parts: the whole drains reqs when it closes

	kernel *kernelListener // on a kernel device (kernel.go), else nil
}

// Listen starts accepting connection requests at address ("IP:port" with
// network "rdma"; port 0 picks a random one) like rdma_bind_addr and
// rdma_listen. The device is opts.Context or the one that has the IP.
// An unspecified IP (":port", "0.0.0.0:port", "[::]:port") without
// opts.Context listens on every device, as rdma_cm does: each device this
// process has opened, and the device of each network interface not yet
// opened, which the listener opens for itself (see [Listener.Devices])
// and closes once it and the connections accepted on them are closed. opts.QPType UD listens in the UDP port space
// (SIDR), else TCP (RC).
func Listen(network, address string, opts *Options) (*Listener, error) {
	laddr, err := splitAddr(network, wildcardHost(address))
	if err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	if err := o.checkSecurity(); err != nil {
		return nil, err
	}
	if laddr.Addr().IsUnspecified() && o.Context == nil {
		return listenAll(laddr, &o, address)
	}
	if o.Context != nil && deviceClosed(o.Context) {
		return nil, closedDeviceErr("cm.Listen", o.Context)
	}
	vctx, local, err := resolveLocal(laddr.Addr(), &o)
	if err != nil {
		return nil, err
	}
	return listenOn(vctx, local, laddr.Port(), o, address, nil)
}

// listenOn listens on one device. reqs, if not nil, is the channel of the
// listener on every device that this one is part of.
func listenOn(vctx verbs.Context, local netip.Addr, port uint16, o Options, address string, reqs chan *ConnRequest) (*Listener, error) {
	if k, ok := vctx.(verbs.KernelCM); ok {
		return listenKernel(k, vctx, local, port, o, address, reqs) // kernel.go
	}
	a, err := agentFor(vctx, o.Port)
	if err != nil {
		return nil, err
	}
	ps := portSpace(o.QPType)
	l := &Listener{a: a, qpType: o.QPType, opts: o, reqs: reqs, part: reqs != nil, closed: make(chan struct{})}
	if reqs == nil {
		l.reqs = make(chan *ConnRequest, o.Backlog)
	}
	l.opts.Context = vctx
	sd, byService := vctx.(verbs.ServiceDirectory)
	if byService {
		// The listener is reached by its port on any address of the
		// host; what names it alone is its device's GID.
		if addrs := addrsOf(vctx, o.Port); len(addrs) > 0 {
			local = addrs[0]
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped.Load() {
		return nil, fmt.Errorf("cm.Listen: %v: %w", address, ErrDeviceClosed)
	}
	wanted := port
	for tries := 0; ; tries++ {
		if port == 0 {
			port = uint16(1024 + randUint32()%64000)
		}
		var err error
		if a.listeners[ServiceID(ps, port)] != nil {
			err = fmt.Errorf("port %d already has a listener on device %s", port, vctx.Device().Name())
		} else if byService {
			// Dialers find this device by the service ID: claim it on
			// the host, as a TCP listener claims its port.
			l.unbind, err = sd.BindService(o.Port, ServiceID(ps, port))
			if err != nil && !errors.Is(err, verbs.ErrInUse) {
				return nil, err
			}
		} else {
			// On an address shared with other processes, connection
			// requests for the port must be steered to this one.
			l.unbind, err = claimService(vctx, ServiceID(ps, port))
		}
		if err == nil {
			break
		}
		if wanted != 0 || tries > 100 {
			return nil, fmt.Errorf("cm.Listen: %v: %w", address, err)
		}
		port = 0
	}
	l.addr = netip.AddrPortFrom(local, port)
	l.serviceID = ServiceID(ps, port)
	a.listeners[l.serviceID] = l
	return l, nil
}

// claimService has connection requests for id steered to this process
// when the device shares its address with other processes, and returns
// what gives the claim up (nil if there is nothing to give up); it fails
// if a listener in another process has the port.
func claimService(ctx verbs.Context, id uint64) (release func(), err error) {
	sd, ok := ctx.(sharedDevice)
	if !ok {
		return nil, nil
	}
	if err := sd.ClaimService(id); err != nil {
		return nil, fmt.Errorf("port %d: another process on this address listens on it (%w)", uint16(id), err)
	}
	return func() { sd.ReleaseService(id) }, nil
}

// Context returns the device the listener is on; nil for a listener on
// every device (each request's Context says which device it came to).
func (l *Listener) Context() verbs.Context { return l.opts.Context }

// Addr returns the address the listener is bound to; on a shared-memory
// device, its GID and port (dialing it reaches this listener directly);
// for a listener on every device, the unspecified address and the port.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for the next connection request. The caller answers it
// with ConnRequest.Accept or Reject.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, l.acceptClosedErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; requests not yet accepted are rejected, the
// connections accepted stay. A listener on every device also closes the
// devices it opened, each when its last connection closes.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		if l.a != nil {
			l.a.mu.Lock()
			if l.a.listeners[l.serviceID] == l {
				delete(l.a.listeners, l.serviceID)
			}
			l.a.mu.Unlock()
		}
		if l.unbind != nil {
			l.unbind()
		}
		l.closeKernel()
		for _, p := range l.parts {
			p.Close()
		}
		for _, c := range l.opened {
			closeIdle(c)
		}
		if l.part {
			return // the whole listener owns reqs
		}
		for {
			select {
			case r := <-l.reqs:
				r.Reject(nil)
			default:
				return
			}
		}
	})
	return nil
}

// ConnRequest is a peer's connection request (a REQ, or a SIDR_REQ for
// UD): who asks, with what private data and parameters. Answer it once,
// with Accept or Reject.
type ConnRequest struct {
	// Local and Remote are the addresses and ports from rdma_cm's header
	// (the zero AddrPort when the peer sent none).
	Local, Remote netip.AddrPort
	// PrivateData is the peer's private data after rdma_cm's header.
	PrivateData []byte
	// Req is the REQ as received (zero for UD): the peer's QPN, starting
	// PSN, path MTU, depths, retry counts, path.
	Req wire.CMReq
	// QPType is RC for a REQ, UD for a SIDR_REQ.
	QPType verbs.QPType
	// Security is the packet protection the dialer asks for (zero: none).
	Security verbs.SecurityMode
	sec      secBlock // the dialer's half of the key exchange (Security)
	own      ownQP    // for a QP the caller moves (ownqp.go)

	l   *Listener
	id  *cmID
	src verbs.MADSource
	k   verbs.CMRequest // a kernel device's request (kernel.go), else nil
}

// Context returns the device the request came to: the one Accept creates
// the connection's QP on (by default), and the one a QP or PD given in
// Accept's options must belong to.
func (r *ConnRequest) Context() verbs.Context { return r.l.opts.Context }

func newConnRequest(l *Listener, id *cmID, src verbs.MADSource, r *wire.CMReq) *ConnRequest {
	cr := &ConnRequest{Req: *r, QPType: verbs.QPTypeRC, l: l, id: id, src: src}
	cr.PrivateData = r.PrivateData[:]
	if h, ok := wire.ParseCMAHeader(r.PrivateData[:]); ok {
		cr.Local = netip.AddrPortFrom(h.Dst, uint16(l.serviceID))
		cr.Remote = netip.AddrPortFrom(h.Src, h.SrcPort)
		cr.PrivateData = r.PrivateData[wire.CMAHeaderLen:]
	}
	if b, rest, ok := parseSecBlock(cr.PrivateData); ok {
		b.raw = bytes.Clone(b.raw)
		b.pub = b.raw[6:secBlockLen]
		cr.Security, cr.sec, cr.PrivateData = b.mode, b, rest
	}
	return cr
}

func newSIDRRequest(l *Listener, id *cmID, src verbs.MADSource, s *wire.CMSIDRReq) *ConnRequest {
	cr := &ConnRequest{QPType: verbs.QPTypeUD, l: l, id: id, src: src}
	cr.PrivateData = s.PrivateData[:]
	if h, ok := wire.ParseCMAHeader(s.PrivateData[:]); ok {
		cr.Local = netip.AddrPortFrom(h.Dst, uint16(l.serviceID))
		cr.Remote = netip.AddrPortFrom(h.Src, h.SrcPort)
		cr.PrivateData = s.PrivateData[wire.CMAHeaderLen:]
	}
	return cr
}

// Reject refuses the request: a REJ "consumer defined" (reason 28) with
// private data (at most 148 bytes), or for UD a SIDR_REP "rejected".
func (r *ConnRequest) Reject(private []byte) error {
	if r.k != nil {
		return r.k.Reject(private)
	}
	a, id := r.l.a, r.id
	a.mu.Lock()
	defer a.mu.Unlock()
	switch id.state {
	case stateReqRcvd, stateMRAReqSent:
		a.rejectLocked(id.peer, id.tid, id.localID, id.remoteID, wire.CMMsgREQ, wire.RejConsumerDefined, nil, private)
		a.removeLocked(id)
	case stateSIDRReqRcvd:
		a.sendSIDRRepLocked(id, wire.SIDRReject, 0, 0, private)
	default:
		return fmt.Errorf("cm: the request was already answered (%v)", id.state)
	}
	return nil
}

// Accept accepts the request: it creates a QP (or takes opts.QP), moves it
// to RTR and RTS with the peer's QPN and PSN, sends the REP with opts'
// private data, and waits for the RTU (or ctx). opts nil means the
// listener's options. For UD it answers the SIDR_REQ with the QP's number
// and rdma_cm's Q_Key and returns at once.
func (r *ConnRequest) Accept(ctx context.Context, opts *Options) (*Conn, error) {
	o, err := r.acceptOptions(opts)
	if err != nil {
		return nil, err
	}
	if r.k != nil {
		return r.acceptKernel(ctx, &o)
	}
	a, id := r.l.a, r.id
	c := r.newConn()
	fail := func(err error) (*Conn, error) { return r.fail(c, err) }
	if err := resources(o.Context, &o, c); err != nil {
		return fail(err)
	}
	if r.QPType == verbs.QPTypeUD {
		p := DefaultParams()
		p.Port, p.Access, p.QKey = a.port, o.Access, RDMAUDPQKey
		if err := connectUD(c.QP, &p); err != nil {
			return fail(err)
		}
		a.mu.Lock()
		if id.state != stateSIDRReqRcvd {
			a.mu.Unlock()
			c.release()
			return nil, fmt.Errorf("cm: the request was already answered (%v)", id.state)
		}
		a.sendSIDRRepLocked(id, wire.SIDRSuccess, c.QP.QPNum(), RDMAUDPQKey, o.PrivateData)
		a.mu.Unlock()
		if err := a.adopt(c); err != nil {
			return nil, err
		}
		return c, nil
	}
	p, err := r.rcParams(&o)
	if err != nil {
		return fail(err)
	}
	req := &r.Req
	c.ResponderResources, c.InitiatorDepth = p.MaxDestRdAtomic, p.MaxRdAtomic
	psn := randomPSN()
	private := o.PrivateData
	var proof []byte // the RTU must carry it (secure.go)
	if r.Security != 0 || o.Security != 0 {
		if r.Security == 0 {
			return fail(fmt.Errorf("cm: the request offers no packet protection and the listener requires %v", o.Security))
		}
		mode := max(r.Security, o.Security)
		if err := o.checkSecurity(); err != nil {
			return fail(err)
		}
		offer, err := newSecOffer(mode, o.SecurityPSK)
		if err != nil {
			return fail(err)
		}
		if err := offer.checkTag(r.sec, "REQ", nil); err != nil {
			return fail(err)
		}
		secret, err := offer.secret(r.sec.pub, r.sec.pub, offer.pub)
		if err == nil {
			if err = Init(c.QP, &p); err == nil {
				err = secure(c.QP, mode, secret, false)
			}
		}
		if err != nil {
			return fail(err)
		}
		if n := blockLen(o.SecurityPSK); len(private)+n > wire.RepPrivateLen {
			return fail(fmt.Errorf("cm: %d bytes of private data; with the key exchange a REP holds at most %d", len(private), wire.RepPrivateLen-n))
		}
		repBlock := offer.repBlock(r.sec.raw)
		if offer.psk != nil {
			proof = rtuProof(offer.psk, r.sec.raw, repBlock)
		}
		private = append(repBlock, private...)
		c.Security = mode
	}
	// rdma_cm's passive side is in RTS before it sends the REP, so the
	// active side may send at once after the RTU.
	// The REP's starting PSN is the one we expect; we send from the
	// REQ's (see dialRC).
	if err := Connect(c.QP, Endpoint{QPN: c.QP.QPNum(), PSN: req.StartingPSN}, Endpoint{QPN: req.LocalQPN, PSN: psn, GID: r.src.GID}, &p); err != nil {
		return fail(err)
	}
	return r.reply(ctx, c, &o, c.QP.QPNum(), psn, private, proof)
}

// acceptOptions are Accept's options: opts, or the listener's.
func (r *ConnRequest) acceptOptions(opts *Options) (Options, error) {
	o := r.l.opts
	if opts != nil {
		o = opts.withDefaults()
		if o.Context == nil {
			o.Context = r.l.opts.Context
		}
	}
	o.QPType = r.QPType
	if len(o.PrivateData) > wire.RepPrivateLen {
		return o, fmt.Errorf("cm: %d bytes of private data; a REP holds at most %d", len(o.PrivateData), wire.RepPrivateLen)
	}
	return o, nil
}

// newConn is the connection an accept makes.
func (r *ConnRequest) newConn() *Conn {
	c := newConn()
	c.local, c.remote = r.Local, r.Remote
	c.PeerPrivateData = r.PrivateData
	return c
}

// fail refuses the request after a failed accept (a REJ, or for UD a
// SIDR_REP "no QP"), destroys what cm created for c, and returns err.
func (r *ConnRequest) fail(c *Conn, err error) (*Conn, error) {
	a, id := r.l.a, r.id
	a.mu.Lock()
	if id.state == stateReqRcvd || id.state == stateMRAReqSent || id.state == stateRepSent || id.state == stateMRARepRcvd {
		kind := wire.CMMsgREQ
		if id.state == stateRepSent || id.state == stateMRARepRcvd {
			kind = wire.CMMsgREP
		}
		a.rejectLocked(id.peer, id.tid, id.localID, id.remoteID, kind, wire.RejConsumerDefined, nil, nil)
		a.removeLocked(id)
	} else if id.state == stateSIDRReqRcvd {
		a.sendSIDRRepLocked(id, wire.SIDRNoQP, 0, 0, nil)
	}
	a.mu.Unlock()
	c.release()
	return nil, err
}

// reply answers an RC request with a REP for QP number qpn, which
// expects psn first, and waits for the RTU (or ctx): the end of Accept,
// once the QP is in RTS. proof, if set, is what the RTU must carry.
func (r *ConnRequest) reply(ctx context.Context, c *Conn, o *Options, qpn, psn uint32, private, proof []byte) (*Conn, error) {
	a, id, req := r.l.a, r.id, &r.Req
	rep := wire.CMRep{LocalQPN: qpn, StartingPSN: psn,
		ResponderResources: c.ResponderResources, InitiatorDepth: c.InitiatorDepth,
		TargetACKDelay: caACKDelay, RNRRetryCount: min(o.RNRRetryCount, 7), LocalCAGUID: a.guid}
	copy(rep.PrivateData[:], private)
	a.mu.Lock()
	if id.state != stateReqRcvd && id.state != stateMRAReqSent {
		a.mu.Unlock()
		c.release()
		return nil, fmt.Errorf("cm: the request was already answered or withdrawn (%v)", id.state)
	}
	rep.LocalCommID, rep.RemoteCommID = id.localID, id.remoteID
	mad := newMAD(wire.CMRepAttr, id.tid)
	rep.Encode(mad[wire.MADHeaderLen:])
	id.state, id.localQPN, id.rtuProof = stateRepSent, qpn, proof
	// cm.c: the REP waits the REQ's local CM response time per try.
	a.sendRetriedLocked(id, mad, convertToDuration(req.LocalCMTimeout), int(req.MaxCMRetries))
	id.lastSent = mad
	a.mu.Unlock()

	ev, err := wait(ctx, id)
	if err == nil && ev.kind == wire.CMRejAttr {
		err = &RejectError{Reason: ev.rej.Reason, PrivateData: ev.rej.PrivateData[:]}
	}
	if err != nil {
		return r.fail(c, err)
	}
	a.mu.Lock()
	id.timeout = convertToDuration(req.LocalCMTimeout)
	id.conn, c.id = c, id
	// The peer may have disconnected between the RTU that woke us and
	// now (a fast client sends its DREQ right after): the agent had no
	// connection to tell then.
	gone := id.state == stateTimewait || a.ids[id.localID] != id
	a.mu.Unlock()
	if gone {
		c.closeWith(ErrDisconnected)
	}
	if err := a.adopt(c); err != nil {
		return nil, err
	}
	if c.QP != nil {
		go c.watch()
	}
	return c, nil
}

// rcParams are the attributes of the passive side's QP for an RC
// request, as cm.c derives them from the REQ: the path (GID index of
// the address the peer dialed, hop limit, traffic class, MTU no larger
// than the port's), the depths (each side's bounded by what the other
// offers; o's, as for Accept), the peer's retry counts and its ACK
// timeout.
func (r *ConnRequest) rcParams(o *Options) (Params, error) {
	a, req, vctx := r.l.a, &r.Req, o.Context
	p := DefaultParams()
	if err := checkACKTimeout("cm.Accept", o); err != nil {
		return p, err
	}
	p.Port, p.Access = a.port, o.Access
	sgidIdx, _, err := gidIndex(vctx, a.port, verbs.GID(req.Primary.RemoteGID).Addr())
	if err != nil {
		sgidIdx, err = 0, nil
		if src, ok := localFor(vctx, a.port, r.src.GID.Addr().Unmap()); ok {
			sgidIdx, _, err = gidIndex(vctx, a.port, src)
		}
		if err != nil {
			return p, err
		}
	}
	da, _ := vctx.QueryDevice()
	pa, _ := vctx.QueryPort(a.port)
	mtu := verbs.MTU(req.PathMTU)
	if pa.ActiveMTU != 0 && pa.ActiveMTU < mtu {
		mtu = pa.ActiveMTU
	}
	p.SGIDIndex, p.HopLimit, p.PathMTU = uint8(sgidIdx), max(req.Primary.HopLimit, 1), mtu
	p.TrafficClass = req.Primary.TrafficClass
	p.MaxDestRdAtomic = min(depth(o.ResponderResources, da.MaxQPRdAtom), req.InitiatorDepth)
	p.MaxRdAtomic = min(depth(o.InitiatorDepth, da.MaxQPInitRdAtom), req.ResponderResources)
	p.Timeout, p.RetryCnt, p.RNRRetry = req.Primary.LocalACKTimeout, req.RetryCount, req.RNRRetryCount
	if o.ACKTimeout != 0 {
		p.Timeout = o.ACKTimeout
	}
	return p, nil
}
