package roce

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// BenchmarkResponderRead measures an incoming RDMA READ REQUEST of size
// bytes: dispatch, checks, the replay record and the READ responses
// (MTU 256: one per 256 bytes).
func BenchmarkResponderRead(b *testing.B) {
	for _, size := range []int{8, 1024} {
		b.Run(sizeName(size), func(b *testing.B) {
			f := newFuzzTarget(b)
			defer f.destroy()
			f.dev.tr.(*capture).discard = true
			qp := f.rc.(*QP)
			req := buildPacket(wire.RCReadRequest, wire.BTHFields{DestQP: qp.qpn, AckReq: true}, nil, func(p []byte, info *wire.OpInfo) {
				wire.RETH(p[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: uint32(size)})
			})
			batch := []transport.Datagram{{Buf: req, Peer: f.peer, ICRC: transport.ICRCOK}}
			direct := &RxBatch{}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				qp.mu.Lock()
				psn := qp.resp.psn
				qp.mu.Unlock()
				wire.BTH(req).SetPSN(psn)
				f.dev.HandleBatch(direct, batch, time.Now())
			}
		})
	}
}

// BenchmarkResponderAtomic measures an incoming FETCH_ADD: dispatch,
// checks, the atomic, the replay record and the atomic ACK.
func BenchmarkResponderAtomic(b *testing.B) {
	f := newFuzzTarget(b)
	defer f.destroy()
	f.dev.tr.(*capture).discard = true
	qp := f.rc.(*QP)
	req := buildPacket(wire.RCFetchAdd, wire.BTHFields{DestQP: qp.qpn, AckReq: true}, nil, func(p []byte, info *wire.OpInfo) {
		wire.AtomicETH(p[info.AtomicETHOff:]).Encode(&wire.AtomicETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), SwapAdd: 1})
	})
	batch := []transport.Datagram{{Buf: req, Peer: f.peer, ICRC: transport.ICRCOK}}
	direct := &RxBatch{}
	b.ReportAllocs()
	for b.Loop() {
		qp.mu.Lock()
		psn := qp.resp.psn
		qp.mu.Unlock()
		wire.BTH(req).SetPSN(psn)
		f.dev.HandleBatch(direct, batch, time.Now())
	}
}
