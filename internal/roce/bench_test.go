package roce

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Hot-path micro-benchmarks, comparable across commits with benchstat:
//
//	go test -run '^$' -bench . -count 10 ./internal/roce > new.txt
//	benchstat old.txt new.txt

// BenchmarkRequesterWrite measures one signaled RDMA WRITE of size bytes
// through the requester (packets built, handed to a transport that discards
// them), the ACK through the completer, and the poll of its completion.
func BenchmarkRequesterWrite(b *testing.B) {
	for _, size := range []int{8, 1024, 4096} {
		b.Run(sizeName(size), func(b *testing.B) {
			f := newFuzzTarget(b)
			defer f.destroy()
			f.dev.tr.(*capture).discard = true
			qp := f.rc.(*QP)
			wcs := make([]verbs.WC, 1)
			wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, size)}, RemoteAddr: 0x1000, RKey: 0x77}
			ack := buildPacket(wire.RCAck, wire.BTHFields{DestQP: qp.qpn}, nil, func(p []byte, info *wire.OpInfo) {
				wire.AETH(p[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F)})
			})
			batch := []transport.Datagram{{Buf: ack, Peer: f.peer, ICRC: transport.ICRCOK}}
			// No stage: each QP's packets leave at the end of its run, as
			// the engine's tests and fuzzers drive it (the provider's
			// batches stage them: one transport call per batch).
			direct := &RxBatch{}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := f.rc.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				qp.mu.Lock()
				last := qp.req.psn.Add(^uint32(0))
				qp.mu.Unlock()
				wire.BTH(ack).SetPSN(last)
				f.dev.HandleBatch(direct, batch, time.Now())
				if n, _ := f.cq.Poll(wcs); n != 1 {
					b.Fatal("no completion")
				}
			}
		})
	}
}

// BenchmarkResponderWrite measures an incoming RDMA WRITE ONLY packet of
// size bytes: dispatch, checks, placement in the MR and the ACK.
func BenchmarkResponderWrite(b *testing.B) {
	for _, size := range []int{8, 256} {
		b.Run(sizeName(size), func(b *testing.B) {
			f := newFuzzTarget(b)
			defer f.destroy()
			f.dev.tr.(*capture).discard = true
			qp := f.rc.(*QP)
			req := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qp.qpn, AckReq: true}, make([]byte, size), func(p []byte, info *wire.OpInfo) {
				wire.RETH(p[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: uint32(size)})
			})
			batch := []transport.Datagram{{Buf: req, Peer: f.peer, ICRC: transport.ICRCOK}}
			// No stage: each QP's packets leave at the end of its run, as
			// the engine's tests and fuzzers drive it (the provider's
			// batches stage them: one transport call per batch).
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

func sizeName(n int) string {
	switch {
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
