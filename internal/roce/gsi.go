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
	addr := dst.Addr().Unmap()
	if addr.Is4() != d.local.Is4() {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "destination %v and this device's address %v are of different IP families", dst, d.local)
	}
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
	pkts := [1]transport.Datagram{{Buf: b, Peer: netip.AddrPortFrom(addr, d.port), Flow: gsiQPN}}
	sent, err := d.tr.Send(pkts[:])
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
			return
		}
		c.MADsRcvd.Add(1)
		(*h)(verbs.MADSource{GID: verbs.GIDFromAddr(pk.Peer.Addr()), QPN: p.DETH.SrcQP(), PKey: p.BTH.PKey()}, p.Payload)
	}
}
