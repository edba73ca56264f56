package roce

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// netsimEndpoints starts a simulated network, closed when the test ends,
// with endpoints at addrA and addrB.
func netsimEndpoints(t *testing.T, cfg netsim.Config) (n *netsim.Network, ea, eb *netsim.Endpoint) {
	n = netsim.New(cfg)
	t.Cleanup(n.Close)
	ea, err := n.Endpoint(addrA)
	must(t, err)
	eb, err = n.Endpoint(addrB)
	must(t, err)
	return n, ea, eb
}

// netsimPair is netsimEndpoints with a connected QP pair over them.
func netsimPair(t *testing.T, cfg netsim.Config, o qpOpts) (*netsim.Network, *node, *node) {
	n, ea, eb := netsimEndpoints(t, cfg)
	a, b := pair(t, ea, eb, o)
	return n, a, b
}

// TestUD: a UD SEND lands after the 40-byte network header, with the
// sender's QPN; a wrong Q_Key is dropped and counted; the message may not
// exceed the path MTU.
func TestUD(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.typ = verbs.QPTypeUD
		_, a, b := netsimPair(t, netsim.Config{Seed: 1}, o)
		ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: b.gid(), SGIDIndex: 1}})
		must(t, err)
		defer ah.Destroy()
		copy(a.buf, "datagram payload")
		b.postRecv(1, 0, 2048)
		send := func(id uint64, qkey uint32, n int) {
			a.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRSendWithImm, ImmData: 5, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, n)},
				AH: ah, RemoteQPN: b.qp.QPNum(), RemoteQKey: qkey})
			expectWC(t, a.waitWC(a.scq), id, verbs.WCSuccess, verbs.WCSend)
		}
		send(1, 0x22222222, 16) // wrong Q_Key: dropped
		send(2, 0x11111111, 16)
		wc := b.waitWC(b.rcq)
		if wc.WRID != 1 || wc.Status != verbs.WCSuccess || wc.ByteLen != 40+16 || wc.SrcQP != a.qp.QPNum() ||
			wc.WCFlags != verbs.WCWithGRH|verbs.WCWithImm || wc.ImmData != 5 {
			t.Fatalf("UD receive %+v", wc)
		}
		if string(b.buf[40:56]) != "datagram payload" {
			t.Fatalf("payload %q", b.buf[40:56])
		}
		ip := b.buf[20:40]
		if ip[0] != 0x45 || ip[9] != 17 || netip.AddrFrom4([4]byte(ip[12:16])) != addrA || netip.AddrFrom4([4]byte(ip[16:20])) != addrB {
			t.Fatalf("network header % x", ip)
		}
		if !bytes.Equal(b.buf[:20], make([]byte, 20)) {
			t.Fatal("the first 20 bytes of an IPv4 GRH must be zero")
		}
		if b.dev.Counters.DropQKey.Load() != 1 {
			t.Fatalf("drop_qkey = %d, want 1", b.dev.Counters.DropQKey.Load())
		}
		err = a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 1025)}, AH: ah, RemoteQPN: 1})
		if err == nil {
			t.Fatal("a UD send larger than the path MTU was accepted")
		}
		if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, AH: ah}); err == nil {
			t.Fatal("RDMA WRITE on a UD QP was accepted")
		}
	})
}

// TestUC: SEND and WRITE work without acknowledgements, and a lost packet
// drops its whole message while the next one arrives.
func TestUC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.typ = verbs.QPTypeUC
		n, a, b := netsimPair(t, netsim.Config{Seed: 1}, o)
		fill(a.buf[:3000], 1)
		b.postRecv(1, 0, 4096)
		b.postRecv(2, 4096, 4096)
		// Drop the middle packet of the first 3-packet SEND.
		count := 0
		n.SetFilter(func(p *transport.Datagram, from, to netip.Addr) netsim.Verdict {
			if wire.BTH(p.Buf).Opcode() == wire.UCSendMiddle {
				if count++; count == 1 {
					return netsim.Drop
				}
			}
			return netsim.Pass
		})
		for id := uint64(1); id <= 2; id++ {
			a.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 3000)}})
			expectWC(t, a.waitWC(a.scq), id, verbs.WCSuccess, verbs.WCSend)
		}
		wc := b.waitWC(b.rcq)
		// The first receive WQE is reused: the broken message never completes.
		if wc.WRID != 1 || wc.ByteLen != 3000 || !bytes.Equal(b.buf[:3000], a.buf[:3000]) {
			t.Fatalf("UC receive %+v", wc)
		}
		time.Sleep(time.Millisecond)
		if k, _ := b.rcq.Poll(b.wcs); k != 0 {
			t.Fatalf("%d unexpected receive completions", k)
		}
		if b.dev.Counters.DropUC.Load() == 0 {
			t.Fatal("drop_uc did not count the broken message")
		}
		// WRITE with immediate.
		b.postRecv(3, 0, 0)
		a.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 9, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 2500)},
			RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
		expectWC(t, a.waitWC(a.scq), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
		wc = b.waitWC(b.rcq)
		if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != 9 || !bytes.Equal(b.buf[8192:8192+2500], a.buf[:2500]) {
			t.Fatalf("UC write with imm %+v", wc)
		}
		if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMARead}); err == nil {
			t.Fatal("RDMA READ on a UC QP was accepted")
		}
	})
}

// TestSRQ: two RC QPs share one SRQ.
func TestSRQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := netsim.New(netsim.Config{Seed: 1})
		t.Cleanup(n.Close)
		ea, _ := n.Endpoint(addrA)
		eb, _ := n.Endpoint(addrB)
		o := defaultOpts()
		a := newNode(t, ea, o)
		b0 := newNode(t, eb, o)
		srq, err := b0.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1})
		must(t, err)
		// A second QP on b's device that uses the SRQ, and one on a.
		qpB, err := b0.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b0.scq, RecvCQ: b0.rcq, QPType: verbs.QPTypeRC, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		must(t, err)
		b := &node{t: t, dev: b0.dev, pd: b0.pd, scq: b0.scq, rcq: b0.rcq, qp: qpB, mr: b0.mr, buf: b0.buf, wcs: b0.wcs}
		connect(t, a, b, o)
		connect(t, b, a, o)
		if err := qpB.PostRecv(&verbs.RecvWR{}); err == nil {
			t.Fatal("PostRecv on a QP with an SRQ was accepted")
		}
		for i := 0; i < 3; i++ {
			must(t, srq.PostRecv(&verbs.RecvWR{WRID: uint64(10 + i), SGList: []verbs.SGE{b.mr.SGE(i*100, 100)}}))
		}
		for i := 0; i < 3; i++ {
			binary.LittleEndian.PutUint64(a.buf, uint64(i))
			a.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
			expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCSend)
			expectWC(t, b.waitWC(b.rcq), uint64(10+i), verbs.WCSuccess, verbs.WCRecv)
		}
		if err := srq.Destroy(); err == nil {
			t.Fatal("destroying an SRQ in use succeeded")
		}
		qpB.Destroy()
		must(t, srq.Destroy())
	})
}
