package roce

// QP1, the General Services Interface (IBTA 13.4.6). Management datagrams
// (MADs) arrive as UD SEND ONLY packets to QPN 1 with the Q_Key
// verbs.GSIQKey and go to the handler the connection manager installed
// (verbs.GSI); SendMAD sends them the same way. QP1 has no verbs QP
// object: it never appears in the QP table, and its PSN is its own.

import (
	"net/netip"
	"sync/atomic"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// gsiQPN is QP1's number.
const gsiQPN = 1

// gsi is QP1's state.
type gsi struct {
	handler atomic.Pointer[func(verbs.MADSource, []byte)]
	unreach atomic.Pointer[func(verbs.GID, error)] // HandleUnreachable
	psn     atomic.Uint32
}

// HandleMADs installs h as the receiver of QP1's MADs (verbs.GSI).
func (d *Device) HandleMADs(port uint8, h func(src verbs.MADSource, mad []byte)) error {
	if port != 1 {
		return verbs.Errorf("HandleMADs", verbs.ErrNotFound, "port %d: softrdma devices have one port, number 1", port)
	}
	if h == nil {
		d.gsi.handler.Store(nil)
	} else {
		d.gsi.handler.Store(&h)
	}
	return nil
}

// answerUnhandledMAD answers a MAD that no handler takes, as the kernel's
// MAD layer and CM do for a device with no listener: a CM REQ gets a REJ
// "invalid service ID" (reason 8) and a SIDR_REQ a SIDR_REP "unsupported
// service" (rdma_cm reports both as RDMA_CM_EVENT_REJECTED / UNREACHABLE
// at once instead of retrying for a minute); a Get or Set of any class
// gets its response with the status "unsupported class or version"
// (IBTA 13.4.7). Everything else is dropped. It never waits for the
// transport: the peer retries what is lost.
func (d *Device) answerUnhandledMAD(src, local netip.Addr, srcQP uint32, in []byte) {
	m, err := wire.ParseMAD(in)
	if err != nil || len(in) < wire.MADLen || m.BaseVersion() != wire.MADBaseVersion {
		return
	}
	var out [wire.MADLen]byte
	resp := wire.MAD(out[:])
	switch {
	case m.MgmtClass() == wire.MgmtClassCM && m.ClassVersion() == wire.CMClassVersion && m.Method() == wire.MADMethodSend:
		switch wire.CMAttr(m.AttrID()) {
		case wire.CMReqAttr:
			req, err := wire.ParseCMReq(m.Data())
			if err != nil {
				return
			}
			wire.EncodeCMHeader(resp, wire.CMRejAttr, m.TransactionID())
			rej := wire.CMRej{RemoteCommID: req.LocalCommID, MessageRejected: wire.CMMsgREQ, Reason: wire.RejInvalidServiceID}
			rej.Encode(resp.Data())
		case wire.CMSIDRReqAttr:
			sreq, err := wire.ParseCMSIDRReq(m.Data())
			if err != nil {
				return
			}
			wire.EncodeCMHeader(resp, wire.CMSIDRRepAttr, m.TransactionID())
			rep := wire.CMSIDRRep{RequestID: sreq.RequestID, Status: wire.SIDRUnsupportedService, ServiceID: sreq.ServiceID}
			rep.Encode(resp.Data())
		default:
			return
		}
	case m.Method() == wire.MADMethodGet || m.Method() == wire.MADMethodSet:
		copy(out[:], in[:wire.MADLen])
		resp.SetMethod(wire.MADMethodGetResp)
		resp.SetStatus(wire.MADStatusBadVers)
	default:
		return
	}
	d.Counters.MADsAnswered.Add(1)
	if local.IsValid() {
		local = local.Unmap() // the answer leaves from where the MAD arrived
	} else if local, _ = d.sourceFor(src); !local.IsValid() {
		return
	}
	d.sendGSI(local, verbs.GIDFromAddr(src), srcQP, verbs.GSIQKey, out[:], false)
}

// SendMAD sends mad from QP1 (verbs.GSI).
func (d *Device) SendMAD(port uint8, dst verbs.GID, dstQP uint32, qkey uint32, mad []byte) error {
	const op = "SendMAD"
	if port != 1 {
		return verbs.Errorf(op, verbs.ErrNotFound, "port %d: softrdma devices have one port, number 1", port)
	}
	if d.closed.Load() {
		return verbs.Errorf(op, verbs.ErrDestroyed, "device %s is closed", d.cfg.Name)
	}
	if len(mad) > d.pmtu.Bytes() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "a MAD of %d bytes exceeds the path MTU %d", len(mad), d.pmtu.Bytes())
	}
	src, ok := d.sourceFor(dst.Addr())
	if !ok {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "destination %v: the device has no address of its family to send from (GIDs: %v)", dst, d.gidList())
	}
	return d.sendGSI(src, dst, dstQP, qkey, mad, true)
}

// sendGSI sends a MAD from QP1 at address src; block says whether it may
// wait for the transport (else, if the transport is full, the MAD is
// dropped).
func (d *Device) sendGSI(src netip.Addr, dst verbs.GID, dstQP uint32, qkey uint32, mad []byte, block bool) error {
	const op = "SendMAD"
	addr := dst.Addr().Unmap()
	info := wire.UDSendOnly.Info()
	pad := wire.PadFor(len(mad))
	pb := d.bufPool.Get().(*pktBuf)
	defer d.bufPool.Put(pb)
	b := pb.b[:info.Length+len(mad)+pad+wire.ICRCLen]
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.UDSendOnly, PadCount: pad, PKey: defaultPKey, DestQP: dstQP & 0xFFFFFF,
		PSN: wire.PSN(d.gsi.psn.Add(1) & 0xFFFFFF)})
	wire.DETH(b[info.DETHOff:]).Encode(&wire.DETHFields{QKey: qkey, SrcQP: gsiQPN})
	copy(b[info.Length:], mad)
	clear(b[info.Length+len(mad) : len(b)-wire.ICRCLen])
	pkts := [1]transport.Datagram{{Buf: b, Peer: netip.AddrPortFrom(addr, d.port), Local: src, Flow: gsiQPN, TClass: d.cc.tclassFor(0)}}
	var sent int
	var err error
	if !block && d.trySender != nil {
		sent, err = d.trySender.TrySend(pkts[:])
	} else {
		sent, err = d.tr.Send(pkts[:])
	}
	d.Counters.SentPkts.Add(uint64(sent))
	if err != nil {
		d.Counters.SendErr.Add(1)
		return verbs.Errorf(op, verbs.ErrInvalidState, "sending to %v: %v", dst, err)
	}
	return nil
}

// onGSI delivers a packet addressed to QP1.
func (d *Device) onGSI(p *wire.Packet, pk *transport.Datagram) {
	c := &d.Counters
	switch {
	case p.Info.Service != wire.ServiceUD || p.DETH == nil || p.BTH.Opcode() != wire.UDSendOnly:
		c.DropWrongTransport.Add(1)
	case p.BTH.PKey()&0x7FFF != defaultPKey&0x7FFF:
		c.DropPKey.Add(1)
	case p.DETH.QKey() != verbs.GSIQKey:
		c.DropQKey.Add(1)
	default:
		h := d.gsi.handler.Load()
		if h == nil {
			c.DropNoMADHandler.Add(1)
			d.answerUnhandledMAD(pk.Peer.Addr(), pk.Local, p.DETH.SrcQP(), p.Payload)
			return
		}
		c.MADsRcvd.Add(1)
		(*h)(verbs.MADSource{GID: verbs.GIDFromAddr(pk.Peer.Addr()), QPN: p.DETH.SrcQP(), PKey: p.BTH.PKey()}, p.Payload)
	}
}
