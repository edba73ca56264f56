package shm

// Benchmarks between two processes (the peer is this test binary,
// re-executed). Both sides busy-poll, so each needs a core: on a loaded
// machine run them with -count and take medians.
//
//	go test ./provider/shm -run '^$' -bench . -benchtime 2000x -count 5

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

func benchPeer(b *testing.B, mode string) (*side, *peerProc) {
	return benchPeerOpts(b, mode, false)
}

// benchPeerOpts is benchPeer with both sides' MRs RegMR'd Go memory if
// regMR: every WRITE is then a copy the target's device applies.
func benchPeerOpts(b *testing.B, mode string, regMR bool) (*side, *peerProc) {
	s := newSide(b, sideOpts{regMR: regMR})
	b.Cleanup(func() { s.close(b) })
	var env []string
	if regMR {
		env = append(env, "SHM_TEST_PEER_REGMR=1")
	}
	p := startPeerEnv(b, s, env...)
	fmt.Fprintln(p.in, mode)
	b.Cleanup(func() {
		fmt.Fprintln(p.in, "stop")
		if l := p.line(b); l != "OK" {
			b.Errorf("peer: %q", l)
		}
	})
	return s, p
}

// BenchmarkWriteLat8 is ib_write_lat's loop: an 8-byte RDMA WRITE each
// way, each side polling its memory for the other's WRITE. ns/op is the
// round trip; lat-ns is half of it, what ib_write_lat and ucp_put_lat
// report.
func BenchmarkWriteLat8(b *testing.B) { benchWriteLat8(b, false) }

// BenchmarkWriteLat8RegMR is BenchmarkWriteLat8 between RegMR'd Go
// memory on both sides: each WRITE is a COPY_WRITE round trip.
func BenchmarkWriteLat8RegMR(b *testing.B) { benchWriteLat8(b, true) }

func benchWriteLat8(b *testing.B, regMR bool) {
	s, p := benchPeerOpts(b, "wpong", regMR)
	mine := word(s.mr.Bytes()[8:])
	src := s.mr.Bytes()[:8]
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: p.info.addr, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 8)}}
	wc := make([]verbs.WC, 1)
	var i uint64
	b.ReportAllocs()
	for b.Loop() {
		i++
		binary.LittleEndian.PutUint64(src, i)
		wr.SendFlags = 0
		if i%16 == 0 {
			wr.SendFlags = verbs.SendSignaled
		}
		if err := s.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		for atomic.LoadUint64(mine) != i {
		}
		if i%16 == 0 {
			for n, _ := s.cq.Poll(wc); n == 0; n, _ = s.cq.Poll(wc) {
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "lat-ns")
}

// BenchmarkSendLat8 is ib_send_lat's loop: an 8-byte SEND each way, each
// side polling its CQ for the receive.
func BenchmarkSendLat8(b *testing.B) {
	s, _ := benchPeer(b, "spong")
	for i := range 32 {
		postRecv(b, s.qp, uint64(i), s.mr.SGE(8192+i*64, 64))
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(0, 8)}}
	rwr := verbs.RecvWR{SGList: []verbs.SGE{{}}}
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
					rwr.WRID = w.WRID
					rwr.SGList[0] = s.mr.SGE(8192+int(w.WRID)*64, 64)
					if err := s.qp.PostRecv(&rwr); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "lat-ns")
}

// BenchmarkSendRate8 streams 8-byte SENDs to a peer that reposts its
// receives: ns/op is the inverse of the message rate.
func BenchmarkSendRate8(b *testing.B) {
	s, _ := benchPeer(b, "sink")
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(0, 8)}}
	b.ReportAllocs()
	streamSends(b, s, &wr)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}

// BenchmarkWriteBW64K streams 64 KiB RDMA WRITEs into the peer's region.
func BenchmarkWriteBW64K(b *testing.B) { benchWriteBW64K(b, false) }

// BenchmarkWriteBW64KRegMR streams 64 KiB WRITEs into the peer's RegMR'd
// Go memory (and out of ours): each is two COPY_WRITE round trips.
func BenchmarkWriteBW64KRegMR(b *testing.B) { benchWriteBW64K(b, true) }

func benchWriteBW64K(b *testing.B, regMR bool) {
	s, p := benchPeerOpts(b, "idle", regMR)
	const size = 64 << 10
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: p.info.addr + 65536, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(65536, size)}}
	b.SetBytes(size)
	b.ReportAllocs()
	streamSends(b, s, &wr)
}

// streamSends posts wr once per iteration, signaling every 16th and
// keeping at most 48 outstanding, like ib_*_bw with cq_mod 16.
func streamSends(b *testing.B, s *side, wr *verbs.SendWR) {
	wc := make([]verbs.WC, 8)
	posted, done := 0, 0
	for b.Loop() {
		for posted-done >= 48 {
			k, _ := s.cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					b.Fatalf("%+v", w)
				}
				done += 16
			}
		}
		posted++
		wr.SendFlags = 0
		if posted%16 == 0 {
			wr.SendFlags = verbs.SendSignaled
		}
		if err := s.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
	}
	for done < posted/16*16 {
		k, _ := s.cq.Poll(wc)
		done += 16 * k
	}
}

// BenchmarkMemcpy64K is the baseline for BenchmarkWriteBW64K: one 64 KiB
// copy between two memfd mappings, measured the same way.
func BenchmarkMemcpy64K(b *testing.B) {
	_, src, err := newMemfd("softrdma-shm-bench", 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	_, dst, err := newMemfd("softrdma-shm-bench", 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(64 << 10)
	for b.Loop() {
		copy(dst[65536:131072], src[65536:131072])
	}
}

// BenchmarkPostWrite8 is the requester's cost of one unsignaled 8-byte
// WRITE (post, execute, retire), in one process: the software overhead on
// top of the memcpy.
func BenchmarkPostWrite8(b *testing.B) {
	a, p := pair(b, sideOpts{}, sideOpts{})
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: p.mr.Addr(), RKey: p.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
	b.ReportAllocs()
	streamSends(b, a, &wr)
}

// BenchmarkWriteSync8 posts a signaled 8-byte WRITE into an idle peer's
// region and polls its completion, one at a time: ns/op is the time a
// requester waits for one WRITE. For AllocMR memory that is the post and
// the memcpy; for RegMR'd Go memory (BenchmarkWriteSync8RegMR) a
// COPY_WRITE round trip through the peer's device goroutine.
func BenchmarkWriteSync8(b *testing.B) { benchWriteSync8(b, false) }

// BenchmarkWriteSync8RegMR: see BenchmarkWriteSync8.
func BenchmarkWriteSync8RegMR(b *testing.B) { benchWriteSync8(b, true) }

func benchWriteSync8(b *testing.B, regMR bool) {
	s, p := benchPeerOpts(b, "idle", regMR)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, RemoteAddr: p.info.addr, RKey: p.info.rkey, SGList: []verbs.SGE{s.mr.SGE(0, 8)}}
	wc := make([]verbs.WC, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		n, _ := s.cq.Poll(wc)
		for ; n == 0; n, _ = s.cq.Poll(wc) {
		}
		if wc[0].Status != verbs.WCSuccess {
			b.Fatalf("%+v", wc[0])
		}
	}
}

// BenchmarkWakeSleeping is one SEND to a device whose progress goroutine
// sleeps (nobody polls it): the time from PostSend until the sender's
// completion, which needs the receiver to wake (the doorbell) and
// consume. Waiting for the receiver to fall asleep is not timed.
func BenchmarkWakeSleeping(b *testing.B) {
	x, y := pair(b, sideOpts{}, sideOpts{})
	for i := range 64 {
		postRecv(b, y.qp, uint64(i), y.mr.SGE(i*64, 64))
	}
	wr := verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(0, 8)}}
	wc := make([]verbs.WC, 4)
	sleeping := y.dev.bell.word(bellSleeping)
	var timed time.Duration
	for range b.N {
		for m, _ := y.cq.Poll(wc); m > 0; m, _ = y.cq.Poll(wc) {
			for _, w := range wc[:m] {
				postRecv(b, y.qp, w.WRID, y.mr.SGE(int(w.WRID)*64, 64))
			}
		}
		for atomic.LoadUint32(sleeping) == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Millisecond) // in its futex wait by now
		start := time.Now()
		if err := x.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		for k := 0; k == 0; {
			k, _ = x.cq.Poll(wc)
			if k > 0 && wc[0].Status != verbs.WCSuccess {
				b.Fatalf("%+v", wc[0])
			}
		}
		timed += time.Since(start)
	}
	b.ReportMetric(float64(timed.Nanoseconds())/float64(b.N), "wake-ns")
}
