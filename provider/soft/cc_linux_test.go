package soft

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestTrafficClassOnTheWire: over real UDP sockets, a device's RC
// packets leave with the address vector's traffic class (else the
// device's), ECT(0) with DCQCN and as given with CC off, as a peer's
// socket reads them (IP_RECVTOS); a CE-marked request is answered with a
// CNP, and QPRates reports the QP.
func TestTrafficClassOnTheWire(t *testing.T) {
	base := byte(os.Getpid()%200 + 20)
	for i, tc := range []struct {
		cc       CCAlgorithm
		dflt, av uint8
		want     uint8
	}{
		{CCDCQCN, 0, 0, 0x02},
		{CCDCQCN, 0x68, 0, 0x6A},
		{CCDCQCN, 0x68, 0xB8, 0xBA},
		{CCOff, 0, 0, 0x00},
		{CCOff, 0, 0xB9, 0xB9}, // as rxe: the address vector's byte as it is
	} {
		t.Run(fmt.Sprintf("%v/default=%#x/av=%#x", tc.cc, tc.dflt, tc.av), func(t *testing.T) {
			a := netip.AddrFrom4([4]byte{127, base, 90 + byte(i), 1})
			b := netip.AddrFrom4([4]byte{127, base, 90 + byte(i), 2})
			d, err := Open(Config{Addr: a, CC: CongestionControl{Algorithm: tc.cc, TClass: tc.dflt}})
			if err != nil {
				t.Skipf("cannot bind %v: %v", a, err)
			}
			defer d.Close()
			peer, err := udp.Listen(udp.Config{Addr: b})
			if err != nil {
				t.Skip(err)
			}
			defer peer.Close()
			pd, _ := d.AllocPD()
			cq, _ := d.CreateCQ(8, nil)
			buf := make([]byte, 64)
			mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			p := cm.Params{Port: 1, Access: verbs.AccessLocalWrite, PathMTU: verbs.MTU1024, SGIDIndex: 1, HopLimit: 64,
				Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 1, MaxDestRdAtomic: 1}
			if err := cm.Init(qp, &p); err != nil {
				t.Fatal(err)
			}
			// RTR with the traffic class in the address vector (cm.Params
			// has none).
			if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: 0x77, RQPSN: 1000, MaxDestRdAtomic: 1, MinRNRTimer: 1,
				AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(b), SGIDIndex: 1, HopLimit: 64, TrafficClass: tc.av}}},
				verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
				t.Fatal(err)
			}
			if err := cm.ReadyToSend(qp, cm.Endpoint{QPN: qp.QPNum(), PSN: 50}, &p); err != nil {
				t.Fatal(err)
			}
			if err := qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, 16)}}); err != nil {
				t.Fatal(err)
			}
			in := make([]transport.Datagram, 8)
			for i := range in {
				in[i].Buf = make([]byte, 9000)
			}
			n, err := peer.Recv(in)
			if err != nil || n == 0 {
				t.Fatalf("peer received %d: %v", n, err)
			}
			if got := in[0].TClass; got != tc.want {
				t.Fatalf("the SEND arrived with traffic class %#02x, want %#02x", got, tc.want)
			}
			if tc.cc != CCDCQCN {
				return
			}
			// A CE-marked SEND from the peer's QP: the device answers with
			// its ACK and a CNP to QP 0x77.
			if err := qp.PostRecv(&verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			req := make([]byte, wire.PacketLen(wire.RCSendOnly, 8))
			wire.BTH(req).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: qp.QPNum(), AckReq: true, PSN: 1000})
			out := []transport.Datagram{{Buf: req, Peer: netip.AddrPortFrom(a, transport.Port), TClass: 0x68 | transport.ECNCE, Flow: 0x77}}
			if _, err := peer.Send(out); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			cnp := false
			for !cnp && time.Now().Before(deadline) {
				n, err := peer.TryRecv(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range in[:n] {
					if q, ok := wire.ParseCNP(p.Buf); ok {
						if q != 0x77 || p.TClass != cnpTClassDefault|transport.ECNECT0 {
							t.Fatalf("CNP to QP %#x with traffic class %#x", q, p.TClass)
						}
						cnp = true
					}
				}
				time.Sleep(time.Millisecond)
			}
			if !cnp {
				t.Fatal("no CNP answered the CE-marked SEND")
			}
			if v, _ := d.Counter("np_cnp_sent"); v != 1 {
				t.Errorf("np_cnp_sent = %d, want 1", v)
			}
			rates := d.QPRates()
			if len(rates) != 1 || rates[0].QPN != qp.QPNum() || rates[0].Limited {
				t.Errorf("QPRates = %+v, want the one QP, not limited", rates)
			}
		})
	}
}

// cnpTClassDefault is the CNPs' default traffic class (DSCP 48).
const cnpTClassDefault = 0xC0
