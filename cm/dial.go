package cm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// MaxReqPrivateData is how much private data a REQ carries after rdma_cm's
// 36-byte header (IB_CM_REQ_PRIVATE_DATA_SIZE - sizeof(struct cma_hdr)).
const MaxReqPrivateData = wire.ReqPrivateLen - wire.CMAHeaderLen

// Dial connects to an rdma_cm listener at address ("IP:port", network
// "rdma") the way rdma_resolve_addr, rdma_resolve_route and rdma_connect
// do: it finds the local device and GID that reach the address, creates
// (or takes) a QP, sends a REQ, moves the QP to RTR and RTS with the
// REP's QPN and PSN, and answers with an RTU. For a UD QP (opts.QPType) it
// resolves the peer's QPN and Q_Key with a SIDR_REQ instead.
//
// ctx bounds the whole exchange; when it ends first, Dial sends a REJ
// (as the kernel does when a connecting cm_id is destroyed) and returns
// ErrTimeout or ctx's error. A REJ from the peer is a *RejectError.
func Dial(ctx context.Context, network, address string, opts *Options) (*Conn, error) {
	raddr, err := splitAddr(network, address)
	if err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	if err := o.checkSecurity(); err != nil {
		return nil, err
	}
	limit := MaxReqPrivateData
	if o.Security != 0 {
		limit -= blockLen(o.SecurityPSK)
	}
	if len(o.PrivateData) > limit {
		return nil, fmt.Errorf("cm.Dial: %d bytes of private data; a REQ holds at most %d (with Options.Security: the key exchange takes %d)", len(o.PrivateData), limit, blockLen(o.SecurityPSK))
	}
	if o.Context != nil && deviceClosed(o.Context) {
		return nil, closedDeviceErr("cm.Dial", o.Context)
	}
	r, err := resolveRoute(raddr, &o)
	if err != nil {
		return nil, err
	}
	if k, ok := r.ctx.(verbs.KernelCM); ok {
		return dialKernel(ctx, k, r, raddr, &o) // kernel.go
	}
	a, err := agentFor(r.ctx, r.port)
	if err != nil {
		return nil, err
	}
	c := newConn()
	c.local, c.remote = endpoints(r, raddr)
	if err := resources(r.ctx, &o, c); err != nil {
		c.release()
		return nil, err
	}
	if o.QPType == verbs.QPTypeUD {
		err = dialUD(ctx, a, r, &o, c)
	} else {
		err = dialRC(ctx, a, r, &o, c)
	}
	if err != nil {
		c.release()
		return nil, err
	}
	if err := a.adopt(c); err != nil {
		return nil, err
	}
	return c, nil
}

// endpoints are a dialed connection's addresses: the route's source with
// a random port (rdma_cm's header carries it), and the peer.
func endpoints(r *route, raddr netip.AddrPort) (local, remote netip.AddrPort) {
	remote = raddr
	if _, ok := r.ctx.(verbs.ServiceDirectory); ok {
		// The peer is the device the service resolved to, not the host
		// address dialed (which names every device of the host).
		remote = netip.AddrPortFrom(r.dgid.Addr(), raddr.Port())
	}
	return netip.AddrPortFrom(r.src, uint16(32768+randUint32()%28000)), remote
}

// checkACKTimeout refuses an ACK timeout code that does not fit 5 bits.
func checkACKTimeout(op string, o *Options) error {
	if o.ACKTimeout > 31 {
		return fmt.Errorf("%s: Options.ACKTimeout %d: the code is 5 bits, at most 31", op, o.ACKTimeout)
	}
	return nil
}

// cmaPrivate builds rdma_cm's header followed by the caller's data.
func cmaPrivate(dst []byte, local, remote netip.AddrPort, user []byte) {
	h := wire.CMAHeader{SrcPort: local.Port(), Src: local.Addr(), Dst: remote.Addr()}
	h.Encode(dst)
	copy(dst[wire.CMAHeaderLen:], user)
}

func dialRC(ctx context.Context, a *agent, r *route, o *Options, c *Conn) error {
	qp := c.QP
	if qp.State() == verbs.QPStateReset {
		p := rcParams(r, o)
		if err := Init(qp, &p); err != nil {
			return err
		}
	}
	d, err := requestRC(ctx, a, r, o, c, qp.QPNum())
	if err != nil {
		return err
	}
	err = ReadyToReceive(qp, d.remote, &d.p)
	if err == nil {
		err = ReadyToSend(qp, d.local, &d.p)
	}
	return d.establish(c, err)
}

// rcParams are the QP parameters of a dialed RC connection before the
// REP: the route's port, GID index and hop limit, the options' access
// and traffic class.
func rcParams(r *route, o *Options) Params {
	p := DefaultParams()
	p.Port, p.Access, p.SGIDIndex, p.HopLimit = r.port, o.Access, uint8(r.sgidIdx), r.hopLimit
	p.TrafficClass = o.TrafficClass
	return p
}

// rcDial is an RC dial that got its REP: what both sides agreed, waiting
// for the QP to be in RTS before the RTU goes out.
type rcDial struct {
	a      *agent
	id     *cmID
	p      Params   // the QP's attributes, from the REQ and the REP
	local  Endpoint // our QP and the PSN it sends from (the REP's)
	remote Endpoint // the peer's QP and the PSN ours expects (the REQ's)
	proof  []byte   // the RTU's private data (Options.SecurityPSK)
	// timeout is how long a DREQ waits for its DREP, per try.
	timeout time.Duration
}

// requestRC sends a REQ for QP number qpn and waits for the REP: the
// active side of an RC connection up to the point where its QP moves to
// RTR and RTS. With Options.Security, c.QP gets the agreed keys. It
// fills c's depths and the peer's private data.
func requestRC(ctx context.Context, a *agent, r *route, o *Options, c *Conn, qpn uint32) (*rcDial, error) {
	if err := checkACKTimeout("cm.Dial", o); err != nil {
		return nil, err
	}
	p := rcParams(r, o)
	da, _ := r.ctx.QueryDevice()
	respRes, initDepth := depth(o.ResponderResources, da.MaxQPRdAtom), depth(o.InitiatorDepth, da.MaxQPInitRdAtom)
	psn := randomPSN()
	ackTO := ackTimeout(caACKDelay, iboePacketLifetime)
	req := wire.CMReq{
		ServiceID: ServiceID(PortSpaceTCP, c.remote.Port()), LocalCAGUID: a.guid,
		LocalQPN: qpn, ResponderResources: respRes, InitiatorDepth: initDepth,
		RemoteCMTimeout: cmResponseTimeout, Transport: wire.CMTransportRC,
		StartingPSN: psn, LocalCMTimeout: cmResponseTimeout, RetryCount: min(o.RetryCount, 7),
		PKey: 0xffff, PathMTU: uint8(r.mtu), RNRRetryCount: min(o.RNRRetryCount, 7),
		MaxCMRetries: maxCMRetries,
		Primary: wire.CMPath{
			LocalLID: 0xffff, RemoteLID: 0xffff, // IB_LID_PERMISSIVE: RoCE has no LIDs
			LocalGID: r.sgid, RemoteGID: r.dgid, HopLimit: r.hopLimit,
			TrafficClass: o.TrafficClass, PacketRate: 0, LocalACKTimeout: ackTO,
		},
	}
	user := o.PrivateData
	var offer *secOffer
	var reqBlock []byte
	if o.Security != 0 {
		var err error
		if offer, err = newSecOffer(o.Security, o.SecurityPSK); err != nil {
			return nil, err
		}
		reqBlock = offer.reqBlock()
		user = append(reqBlock, user...)
	}
	cmaPrivate(req.PrivateData[:], c.local, c.remote, user)

	a.mu.Lock()
	id := a.newIDLocked()
	req.LocalCommID = id.localID
	id.peer, id.serviceID, id.localQPN, id.ackTimeout = r.dgid, req.ServiceID, qpn, ackTO
	id.state = stateReqSent
	mad := newMAD(wire.CMReqAttr, id.tid)
	req.Encode(mad[wire.MADHeaderLen:])
	// cm.c: 2 × packet life time + the peer's CM response time per try.
	timeout := 2*convertToDuration(iboePacketLifetime) + convertToDuration(cmResponseTimeout)
	a.sendRetriedLocked(id, mad, timeout, maxCMRetries)
	a.mu.Unlock()

	ev, err := wait(ctx, id)
	if err != nil {
		a.mu.Lock()
		switch id.state {
		case stateReqSent, stateMRAReqRcvd:
			// ib_destroy_cm_id in REQ_SENT: REJ "timeout", ARI = our GUID.
			var guid [8]byte
			binary.BigEndian.PutUint64(guid[:], a.guid)
			a.rejectLocked(id.peer, id.tid, id.localID, id.remoteID, wire.CMMsgREQ, wire.RejTimeout, guid[:], nil)
		case stateRepRcvd:
			a.rejectLocked(id.peer, id.tid, id.localID, id.remoteID, wire.CMMsgREP, wire.RejConsumerDefined, nil, nil)
		}
		a.removeLocked(id)
		a.mu.Unlock()
		return nil, err
	}
	if ev.kind == wire.CMRejAttr {
		return nil, &RejectError{Reason: ev.rej.Reason, PrivateData: ev.rej.PrivateData[:]}
	}
	rep := ev.rep
	// Each side's depth is bounded by what the other offers.
	c.InitiatorDepth = min(initDepth, rep.ResponderResources)
	c.ResponderResources = min(respRes, rep.InitiatorDepth)
	c.PeerPrivateData = rep.PrivateData[:]
	d := &rcDial{a: a, id: id, timeout: timeout}
	if offer != nil {
		err := ErrNoSecurity
		if b, rest, ok := parseSecBlock(rep.PrivateData[:]); ok && b.mode >= offer.mode {
			var secret [32]byte
			if err = offer.checkTag(b, "REP", reqBlock); err == nil {
				if offer.psk != nil {
					d.proof = rtuProof(offer.psk, reqBlock, b.raw)
				}
				if secret, err = offer.secret(b.pub, offer.pub, b.pub); err == nil {
					err = secure(c.QP, b.mode, secret, true)
				}
			}
			c.PeerPrivateData, c.Security = rest, b.mode
		}
		if err != nil {
			d.abort(nil)
			return nil, err
		}
	}
	p.PathMTU, p.MaxDestRdAtomic, p.MaxRdAtomic = r.mtu, c.ResponderResources, c.InitiatorDepth
	p.Timeout, p.RetryCnt, p.RNRRetry = ackTO, req.RetryCount, rep.RNRRetryCount
	if o.ACKTimeout != 0 {
		p.Timeout = o.ACKTimeout
	}
	d.p = p
	// Linux's cm reads a starting PSN as the one its sender expects to
	// receive: the passive side sends from the REQ's, we send from the
	// REP's (captures of rping between two rxe hosts show it).
	d.remote = Endpoint{QPN: rep.LocalQPN, PSN: psn, GID: r.dgid}
	d.local = Endpoint{QPN: qpn, PSN: rep.StartingPSN}
	return d, nil
}

// abort refuses the REP (REJ "consumer defined", with private data) if it
// is still unanswered, and forgets the attempt.
func (d *rcDial) abort(private []byte) {
	a, id := d.a, d.id
	a.mu.Lock()
	defer a.mu.Unlock()
	if id.state == stateRepRcvd {
		a.rejectLocked(id.peer, id.tid, id.localID, id.remoteID, wire.CMMsgREP, wire.RejConsumerDefined, nil, private)
	}
	a.removeLocked(id)
}

// establish ends the handshake once the QP is in RTS (moveErr: it could
// not be moved): it answers the REP with an RTU and hands c the
// connection, or refuses the REP.
func (d *rcDial) establish(c *Conn, moveErr error) error {
	a, id := d.a, d.id
	a.mu.Lock()
	if moveErr != nil || id.state != stateRepRcvd {
		a.mu.Unlock()
		d.abort(nil)
		if moveErr == nil {
			moveErr = ErrDisconnected
		}
		return moveErr
	}
	defer a.mu.Unlock()
	rtu := newMAD(wire.CMRTUAttr, id.tid)
	rtuMsg := wire.CMRTU{LocalCommID: id.localID, RemoteCommID: id.remoteID}
	copy(rtuMsg.PrivateData[:], d.proof)
	rtuMsg.Encode(rtu[wire.MADHeaderLen:])
	a.sendLocked(id.peer, rtu)
	id.lastSent, id.state, id.timeout = rtu, stateEstablished, d.timeout
	id.conn, c.id = c, id
	if c.QP != nil {
		go c.watch()
	}
	return nil
}

func dialUD(ctx context.Context, a *agent, r *route, o *Options, c *Conn) error {
	qp := c.QP
	p := DefaultParams()
	p.Port, p.QKey = r.port, RDMAUDPQKey
	if err := connectUD(qp, &p); err != nil {
		return err
	}
	s := wire.CMSIDRReq{PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, c.remote.Port())}
	cmaPrivate(s.PrivateData[:], c.local, c.remote, o.PrivateData)
	a.mu.Lock()
	id := a.newIDLocked()
	s.RequestID = id.localID
	id.peer, id.serviceID, id.state = r.dgid, s.ServiceID, stateSIDRReqSent
	mad := newMAD(wire.CMSIDRReqAttr, id.tid)
	s.Encode(mad[wire.MADHeaderLen:])
	a.sendRetriedLocked(id, mad, convertToDuration(cmResponseTimeout), maxCMRetries)
	a.mu.Unlock()

	ev, err := wait(ctx, id)
	if err != nil {
		a.mu.Lock()
		a.removeLocked(id)
		a.mu.Unlock()
		return err
	}
	rep := ev.sidr
	if rep.Status != wire.SIDRSuccess {
		return &SIDRError{Status: rep.Status, PrivateData: rep.PrivateData[:]}
	}
	ah, err := c.PD.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: r.port,
		GRH: verbs.GlobalRoute{DGID: r.dgid, SGIDIndex: uint8(r.sgidIdx), HopLimit: r.hopLimit}})
	if err != nil {
		return err
	}
	c.owned = append(c.owned, ah.Destroy)
	c.AH, c.RemoteQPN, c.RemoteQKey = ah, rep.QPN, rep.QKey
	c.PeerPrivateData = rep.PrivateData[:]
	return nil
}

// connectUD brings a UD QP to RTS, unless it is there already
// (librdmacm's rdma_create_qp readies a UD QP before it connects).
func connectUD(qp verbs.QP, p *Params) error {
	if qp.State() == verbs.QPStateRTS {
		return nil
	}
	return Connect(qp, Endpoint{QPN: qp.QPNum(), PSN: randomPSN()}, Endpoint{}, p)
}

// SIDRError is returned by a UD Dial whose SIDR_REP did not succeed:
// status 1 means nobody listens on the port.
type SIDRError struct {
	Status      wire.SIDRStatus
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return fmt.Sprintf("cm: service ID resolution failed: SIDR_REP status %d", e.Status)
}

var _ = time.Second
