package roce

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// securePair connects a and b over UDP with both QPs protecting their
// packets in mode (b's sends logged), at path MTU mtu.
func securePair(t *testing.T, mode verbs.SecurityMode, mtu verbs.MTU) (a, b *node, bl *sendLog) {
	t.Helper()
	ta, tb := udpPair(t)
	bl = &sendLog{Transport: tb}
	o := realOpts()
	o.mtu = mtu
	a, b = newNodeWith(t, Config{Transport: ta}, o), newNodeWith(t, Config{Transport: bl}, o)
	a.peer, b.peer = b, a
	var secret [32]byte
	rand.Read(secret[:])
	p := cm.Params{Port: 1, Access: o.access, PathMTU: o.mtu, SGIDIndex: 1, HopLimit: 64,
		Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MinRNRTimer: o.minRNRTimer, MaxRdAtomic: o.rdAtomic, MaxDestRdAtomic: o.rdAtomic}
	ea := cm.Endpoint{QPN: a.qp.QPNum(), PSN: 0x10, GID: a.gid()}
	eb := cm.Endpoint{QPN: b.qp.QPNum(), PSN: 0x20, GID: b.gid()}
	for _, s := range []struct {
		n           *node
		local, peer cm.Endpoint
		init        bool
	}{{a, ea, eb, true}, {b, eb, ea, false}} {
		must(t, cm.Init(s.n.qp, &p))
		must(t, s.n.qp.(verbs.Securer).Secure(verbs.Security{Mode: mode, Secret: secret, Initiator: s.init}))
		must(t, cm.ReadyToReceive(s.n.qp, s.peer, &p))
		must(t, cm.ReadyToSend(s.n.qp, s.local, &p))
	}
	return a, b, bl
}

// TestSecureQPs: protected QPs move every kind of message (WRITE, READ,
// SEND with immediate, atomics) intact, in both modes; in encrypt mode the
// payload is not on the wire, in auth mode it is.
func TestSecureQPs(t *testing.T) {
	for _, c := range []struct {
		mode verbs.SecurityMode
		mtu  verbs.MTU
	}{{verbs.SecurityAuth, verbs.MTU1024}, {verbs.SecurityEncrypt, verbs.MTU1024}, {verbs.SecurityAuth, verbs.MTU4096}, {verbs.SecurityEncrypt, verbs.MTU4096}} {
		mode := c.mode
		t.Run(fmt.Sprintf("%v/mtu%v", mode, c.mtu), func(t *testing.T) {
			a, b, bl := securePair(t, mode, c.mtu)
			secret := []byte("a payload an eavesdropper must not read, of some length to span packets..")
			copy(b.buf[8192:], bytes.Repeat(secret, 100))
			// b WRITEs 7 KiB to a (several packets), a READs it back.
			b.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(8192, 7000)},
				RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
			expectWC(t, b.waitWC(b.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			a.settle()
			if !bytes.Equal(a.buf[:7000], b.buf[8192:8192+7000]) {
				t.Fatal("the protected WRITE did not land intact")
			}
			a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(16384, 5000)},
				RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
			expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCRDMARead)
			a.settle()
			if !bytes.Equal(a.buf[16384:16384+5000], b.buf[8192:8192+5000]) {
				t.Fatal("the protected READ did not return the bytes")
			}
			a.postRecv(3, 32768, 256)
			b.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, ImmData: 0xfeed, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(8192, 100)}})
			expectWC(t, b.waitWC(b.scq), 3, verbs.WCSuccess, verbs.WCSend)
			if wc := a.waitWC(a.rcq); wc.Status != verbs.WCSuccess || wc.ImmData != 0xfeed || wc.ByteLen != 100 {
				t.Fatalf("protected SEND: %+v", wc)
			}
			b.post(&verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 5, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(0, 8)},
				RemoteAddr: a.mr.Addr() + 40960, RKey: a.mr.RKey()})
			expectWC(t, b.waitWC(b.scq), 4, verbs.WCSuccess, verbs.WCFetchAdd)

			bl.mu.Lock()
			wire := bytes.Join(bl.raw, nil)
			bl.mu.Unlock()
			onWire := bytes.Contains(wire, secret[:32])
			if onWire != (mode == verbs.SecurityAuth) {
				t.Fatalf("%v: payload seen on the wire: %v", mode, onWire)
			}
			if n := a.dev.Counters.DropAuth.Load() + b.dev.Counters.DropAuth.Load(); n != 0 {
				t.Fatalf("%d genuine packets failed authentication", n)
			}
		})
	}
}

// TestSecureAttacks: on a protected QP an attacker on the path — right
// QPN, PSN, source address and port — still cannot act: a modified
// packet, a replayed one and a forged NAK are dropped and counted, and the
// QP goes on.
func TestSecureAttacks(t *testing.T) {
	a, b, bl := securePair(t, verbs.SecurityAuth, verbs.MTU1024)
	b.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(0, 64)},
		RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
	expectWC(t, b.waitWC(b.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	bl.mu.Lock()
	first := bytes.Clone(bl.raw[0]) // b's WRITE, as sent
	bl.mu.Unlock()
	from := pinnedPeer(a) // the right source: the attacker is on the path
	inject := func(pkt []byte) {
		a.dev.HandleBatch(nil, []transport.Datagram{{Buf: bytes.Clone(pkt), Peer: from, ICRC: transport.ICRCOK}}, time.Now())
	}
	inject(first) // a replay
	// A modified payload byte, with a sequence number not used yet (the
	// attacker picks any): the tag does not check.
	modified := bytes.Clone(first)
	modified[len(modified)-wire.ICRCLen-secTrailerLen-1] ^= 1
	binary.BigEndian.PutUint64(modified[len(modified)-wire.ICRCLen-secTrailerLen:], 1000)
	inject(modified)
	// A NAK forged with everything right but the key.
	forged := nak(a.qp.QPNum(), 0x10, wire.NAKSyndrome(wire.NAKRemoteAccessError))
	trailer := make([]byte, secTrailerLen)
	binary.BigEndian.PutUint64(trailer, 1001)
	inject(append(forged[:len(forged)-wire.ICRCLen], append(trailer, forged[len(forged)-wire.ICRCLen:]...)...))
	c := &a.dev.Counters
	if c.DropReplay.Load() != 1 || c.DropAuth.Load() != 2 {
		t.Fatalf("drop_replay %d, drop_auth %d; want 1 and 2", c.DropReplay.Load(), c.DropAuth.Load())
	}
	b.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(0, 64)},
		RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
	expectWC(t, b.waitWC(b.scq), 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	if a.qp.State() != verbs.QPStateRTS {
		t.Fatalf("QP %v after the attacks", a.qp.State())
	}
}

// pinnedPeer is the address and UDP port n's QP takes packets from.
func pinnedPeer(n *node) netip.AddrPort {
	qp := n.qp.(*QP)
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return netip.AddrPortFrom(qp.destAddr, qp.peerPort)
}

// TestSecureWindow: the replay window takes packets out of order inside
// its 64 and refuses repeats and anything older.
func TestSecureWindow(t *testing.T) {
	var c secCtx
	for _, s := range []uint64{1, 3, 2, 10, 5, 74} {
		if !c.fresh(s) {
			t.Fatalf("seq %d refused", s)
		}
		c.accept(s)
	}
	for s, want := range map[uint64]bool{0: false, 74: false, 73: true, 11: true, 10: false, 2: false, 75: true} {
		if c.fresh(s) != want {
			t.Errorf("fresh(%d) = %v, want %v", s, !want, want)
		}
	}
}

// TestSecureZeroAllocs: sealing and opening a packet allocate nothing.
func TestSecureZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	for _, mode := range []verbs.SecurityMode{verbs.SecurityAuth, verbs.SecurityEncrypt} {
		tx, _ := newSecCtx(verbs.Security{Mode: mode, Initiator: true})
		rx, _ := newSecCtx(verbs.Security{Mode: mode})
		var c Counters
		pkt := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: 5, PSN: 1}, make([]byte, 4096), nil)
		full := append(pkt[:len(pkt)-wire.ICRCLen:len(pkt)-wire.ICRCLen], make([]byte, secTrailerLen+wire.ICRCLen)...)
		buf := make([]byte, len(full))
		round := func() {
			copy(buf, full)
			tx.seal(buf)
			if _, ok := rx.open(buf, &c); !ok {
				t.Fatal("a sealed packet did not open")
			}
		}
		round()
		if n := testing.AllocsPerRun(100, round); n != 0 {
			t.Errorf("%v: %.1f allocations per seal and open", mode, n)
		}
	}
}

// BenchmarkSecure4KiB: what protecting one 4 KiB packet costs, sealing
// and opening.
func BenchmarkSecure4KiB(b *testing.B) {
	for _, mode := range []verbs.SecurityMode{verbs.SecurityAuth, verbs.SecurityEncrypt} {
		b.Run(mode.String(), func(b *testing.B) {
			tx, _ := newSecCtx(verbs.Security{Mode: mode, Initiator: true})
			rx, _ := newSecCtx(verbs.Security{Mode: mode})
			var c Counters
			pkt := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: 5, PSN: 1}, make([]byte, 4096), nil)
			full := append(pkt[:len(pkt)-wire.ICRCLen:len(pkt)-wire.ICRCLen], make([]byte, secTrailerLen+wire.ICRCLen)...)
			buf := make([]byte, len(full))
			b.SetBytes(4096)
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, full)
				tx.seal(buf)
				rx.open(buf, &c)
			}
		})
	}
}

// TestSecureWrongSourceNoCrypto: a packet to a protected QP from anywhere
// but its peer's address and port is dropped by the source check before
// any cryptography (drop_wrong_source, not drop_auth): a flood from
// another port costs the victim no AES-GCM per packet.
func TestSecureWrongSourceNoCrypto(t *testing.T) {
	a, b, _ := securePair(t, verbs.SecurityAuth, verbs.MTU1024)
	b.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.mr.SGE(0, 64)},
		RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
	expectWC(t, b.waitWC(b.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite) // pins b's port
	peer := pinnedPeer(a)
	other := netip.AddrPortFrom(peer.Addr(), peer.Port()+1)
	forged := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: a.qp.QPNum(), PSN: 0x20}, make([]byte, 1024+secTrailerLen), func(p []byte, info *wire.OpInfo) {
		wire.RETH(p[info.RETHOff:]).Encode(&wire.RETHFields{VA: a.mr.Addr(), RKey: a.mr.RKey(), DMALen: 1024})
	})
	binary.BigEndian.PutUint64(forged[len(forged)-wire.ICRCLen-secTrailerLen:], 7) // a fresh sequence number
	c := &a.dev.Counters
	ws, auth := c.DropWrongSource.Load(), c.DropAuth.Load()
	a.dev.HandleBatch(nil, []transport.Datagram{{Buf: forged, Peer: other, ICRC: transport.ICRCOK}}, time.Now())
	if c.DropWrongSource.Load() != ws+1 || c.DropAuth.Load() != auth {
		t.Fatalf("a packet from another port: drop_wrong_source +%d, drop_auth +%d; want +1 and +0 (no tag check)",
			c.DropWrongSource.Load()-ws, c.DropAuth.Load()-auth)
	}
}
