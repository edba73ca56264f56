package shm

// UD benchmarks between two processes, beside the RC ones in
// bench_linux_test.go:
//
//	go test ./provider/shm -run '^$' -bench 'UD|SendLat8|SendRate8' -benchtime 2000x -count 5

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// udBenchPeer starts a UD peer process in mode and returns our UD side,
// the peer, and an AH to it.
func udBenchPeer(b *testing.B, mode string) (*side, *peerProc, verbs.AH) {
	s := newSide(b, sideOpts{typ: verbs.QPTypeUD})
	b.Cleanup(func() { s.close(b) })
	p := startPeerEnv(b, s, "SHM_TEST_PEER_UD=1")
	ah, err := s.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: p.info.ep.GID}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ah.Destroy() })
	// A datagram that finds no receive WQE is dropped: wait for the
	// peer's.
	if l := p.do(b, "%s", mode); l != "GO" {
		b.Fatalf("peer: %q", l)
	}
	return s, p, ah
}

// udPeer is the peer process's side of the UD benchmarks: it keeps 32
// receives posted (then says GO) and, if pong, answers each datagram
// with one of the same length; on stop it prints how many it took.
func udPeer(s *side, r remoteInfo, pong bool, stop *atomic.Bool) error {
	ah, err := s.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: r.ep.GID}})
	if err != nil {
		return err
	}
	defer ah.Destroy()
	const depth = 32
	rwr := verbs.RecvWR{SGList: []verbs.SGE{{}}}
	for i := range depth {
		rwr.WRID, rwr.SGList[0] = uint64(i), s.mr.SGE(4096+i*128, 128)
		if err := s.qp.PostRecv(&rwr); err != nil {
			return err
		}
	}
	fmt.Println("GO")
	wc := make([]verbs.WC, 16)
	wr := verbs.SendWR{Opcode: verbs.WRSend, AH: ah, RemoteQPN: r.ep.QPN, SGList: []verbs.SGE{{}}}
	got, sent := 0, 0
	for !stop.Load() {
		n, _ := s.cq.Poll(wc)
		for _, w := range wc[:n] {
			if w.Status != verbs.WCSuccess {
				return fmt.Errorf("ud peer: %+v", w)
			}
			if w.Opcode != verbs.WCRecv {
				continue
			}
			got++
			rwr.WRID, rwr.SGList[0] = w.WRID, s.mr.SGE(4096+int(w.WRID)*128, 128)
			if err := s.qp.PostRecv(&rwr); err != nil {
				return err
			}
			if !pong {
				continue
			}
			sent++
			wr.SendFlags = 0
			if sent%16 == 0 {
				wr.SendFlags = verbs.SendSignaled
			}
			wr.SGList[0] = s.mr.SGE(4096+int(w.WRID)*128+40, int(w.ByteLen)-40)
			if err := s.qp.PostSend(&wr); err != nil {
				return err
			}
		}
	}
	fmt.Println("OK", got)
	return nil
}

// udStop stops the peer and returns how many datagrams it took.
func udStop(b *testing.B, p *peerProc) int {
	fmt.Fprintln(p.in, "stop")
	l := p.line(b)
	n, err := strconv.Atoi(strings.TrimPrefix(l, "OK "))
	if err != nil {
		b.Fatalf("peer: %q", l)
	}
	return n
}

// BenchmarkUDSendLat8 is ib_send_lat -c UD's loop: an 8-byte datagram
// each way, each side polling its CQ for the receive. lat-ns is half the
// round trip, what ib_send_lat reports.
func BenchmarkUDSendLat8(b *testing.B) {
	s, p, ah := udBenchPeer(b, "udpong")
	const depth = 32
	rwr := verbs.RecvWR{SGList: []verbs.SGE{{}}}
	for i := range depth {
		rwr.WRID, rwr.SGList[0] = uint64(i), s.mr.SGE(8192+i*128, 128)
		if err := s.qp.PostRecv(&rwr); err != nil {
			b.Fatal(err)
		}
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, AH: ah, RemoteQPN: p.info.ep.QPN, SGList: []verbs.SGE{s.mr.SGE(0, 8)}}
	wc := make([]verbs.WC, 4)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n++
		wr.SendFlags = 0
		if n%16 == 0 {
			wr.SendFlags = verbs.SendSignaled
		}
		if err := s.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			k, _ := s.cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					b.Fatalf("%+v", w)
				}
				if w.Opcode == verbs.WCRecv {
					got = true
					rwr.WRID, rwr.SGList[0] = w.WRID, s.mr.SGE(8192+int(w.WRID)*128, 128)
					if err := s.qp.PostRecv(&rwr); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "lat-ns")
	udStop(b, p)
}

// BenchmarkUDSendRate8 streams 8-byte datagrams to a peer that echoes
// each, keeping 16 in flight (fewer than either side's receive WQEs and
// the ring's slots, so nothing is dropped): ns/op is the inverse of the
// message rate one way.
func BenchmarkUDSendRate8(b *testing.B) {
	s, p, ah := udBenchPeer(b, "udpong")
	const depth, window = 32, 16
	rwr := verbs.RecvWR{SGList: []verbs.SGE{{}}}
	for i := range depth {
		rwr.WRID, rwr.SGList[0] = uint64(i), s.mr.SGE(8192+i*128, 128)
		if err := s.qp.PostRecv(&rwr); err != nil {
			b.Fatal(err)
		}
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, AH: ah, RemoteQPN: p.info.ep.QPN, SGList: []verbs.SGE{s.mr.SGE(0, 8)}}
	wc := make([]verbs.WC, 16)
	posted, echoed := 0, 0
	poll := func() {
		k, _ := s.cq.Poll(wc)
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				b.Fatalf("%+v", w)
			}
			if w.Opcode == verbs.WCRecv {
				echoed++
				rwr.WRID, rwr.SGList[0] = w.WRID, s.mr.SGE(8192+int(w.WRID)*128, 128)
				if err := s.qp.PostRecv(&rwr); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for posted-echoed >= window {
			poll()
		}
		posted++
		wr.SendFlags = 0
		if posted%16 == 0 {
			wr.SendFlags = verbs.SendSignaled
		}
		if err := s.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
	}
	for echoed < posted {
		poll()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
	udStop(b, p)
}
