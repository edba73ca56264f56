package bench

// Latency measurement, as perftest 4.5's run_iter_lat_write, run_iter_lat
// and run_iter_lat_send do it. Every sample is the time between two
// consecutive posts (perftest.ComputeLat), each post waiting for the
// previous exchange:
//
//	WRITE  ping-pong of RDMA WRITEs: each side writes the iteration number
//	       into the last byte of its message and polls the last byte of its
//	       receive buffer for the peer's (the server starts); half a round
//	       trip per sample
//	SEND   ping-pong of SENDs, waiting for the receive completion (the
//	       client starts); half a round trip per sample
//	READ,  the client posts one request and polls its completion; one
//	atomic round trip per sample

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// LatRun is one latency measurement of one message size, on QP 0, at one
// end.
type LatRun struct {
	t    *Test
	ep   *Endpoint
	size uint64
	qp   verbs.QP

	wr   verbs.SendWR
	sge  [1]verbs.SGE
	rwr  verbs.RecvWR
	rsge [1]verbs.SGE

	iters   uint64 // 0 in duration mode
	dur     bool
	ph      *Phases
	sample  uint64
	tposted []uint64
	wc      [1]verbs.WC
	scnt    uint64
	rcnt    uint64
}

// NewLatRun prepares QP 0's send request (ctx_set_send_wqes, with the
// length each run_iter_lat* sets). A SEND test then posts its receives
// (SetRecvWQEs) and both ends run RunSend; a WRITE test runs RunWrite at
// both ends; a READ or atomic test runs RunRead at the client only.
func NewLatRun(t *Test, ep *Endpoint) *LatRun {
	size := t.Size
	l := &LatRun{t: t, ep: ep, size: size, qp: ep.QPs[0], iters: t.Iters, dur: t.dur()}
	l.tposted = make([]uint64, max(l.iters, 1))
	rem := ep.Remote[0]
	l.sge[0] = verbs.SGE{Addr: ep.Base + ep.SendOff(0), Length: uint32(size), LKey: ep.LKey}
	l.wr = verbs.SendWR{WRID: 0, SGList: l.sge[:], RemoteAddr: rem.VAddr, RKey: rem.RKey}
	switch t.Verb {
	case perftest.Write:
		l.wr.Opcode = verbs.WRRDMAWrite
	case perftest.Read:
		l.wr.Opcode = verbs.WRRDMARead
	case perftest.Send:
		l.wr.Opcode = verbs.WRSend
		l.wr.RemoteAddr, l.wr.RKey = 0, 0
		if rem.AH != nil {
			l.wr.AH, l.wr.RemoteQPN, l.wr.RemoteQKey = rem.AH, rem.QPN, rem.QKey
		}
	case perftest.Atomic:
		l.wr.Opcode = verbs.WRAtomicFetchAndAdd
		l.wr.CompareAdd = 1
		if t.AtomicOp == perftest.CmpAndSwap {
			l.wr.Opcode = verbs.WRAtomicCmpAndSwp
			l.wr.CompareAdd, l.wr.Swap = 0, 0
		}
	}
	return l
}

// SetRecvWQEs posts the SEND test's receives, all at the start of the
// receive region (ctx_set_recv_wqes; latency tests do not step).
func (l *LatRun) SetRecvWQEs() error {
	l.rsge[0] = verbs.SGE{Addr: l.ep.Base + l.ep.RecvOff(0) + l.ep.RecvShift, Length: uint32(l.size) + l.ep.RecvExtra, LKey: l.ep.LKey}
	l.rwr = verbs.RecvWR{WRID: 0, SGList: l.rsge[:]}
	for j := 0; j < l.t.RxDepth; j++ {
		if err := l.qp.PostRecv(&l.rwr); err != nil {
			return fmt.Errorf("Couldn't post recv Qp = 0: counter=%d: %w", j, err)
		}
	}
	return nil
}

// start begins the duration-mode phases.
func (l *LatRun) start() {
	if l.dur {
		l.ph = newPhases(l.t, Ticks())
	}
}

// ended reports whether a duration-mode run is over.
func (l *LatRun) ended() bool { return l.dur && l.ph.At(Ticks()) == PhaseEnd }

// sampled counts an exchange completed in the sampled interval.
func (l *LatRun) sampled() {
	if l.dur && l.ph.At(Ticks()) == PhaseSample {
		l.sample++
	}
}

// pollSend waits for one send completion.
func (l *LatRun) pollSend(w *watch) error {
	for {
		n, err := w.poll(l.ep.SendCQ, l.wc[:])
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if n == 1 {
			w.progress()
			if l.wc[0].Status != verbs.WCSuccess {
				return compError("client", &l.wc[0], fmt.Sprintf("scnt=%d", l.scnt))
			}
			return nil
		}
		if err := w.wait(l.ep.SendCQ); err != nil {
			return err
		}
	}
}

// RunWrite is run_iter_lat_write.
func (l *LatRun) RunWrite() error {
	l.wr.SendFlags = verbs.SendSignaled
	if l.size <= uint64(l.t.Inline) {
		l.wr.SendFlags |= verbs.SendInline
	}
	buf := l.ep.Buf
	postOff := l.ep.SendOff(0) + l.size - 1
	pollOff := l.ep.VAddrOff(0) + l.size - 1
	server := l.t.Role == perftest.Server
	l.start()
	w := newWatch(l.t, l.ep)
	var ccnt uint64
	for l.scnt < l.iters || ccnt < l.iters || l.rcnt < l.iters || (l.dur && !l.ended()) {
		if (l.rcnt < l.iters || l.dur) && !(l.scnt < 1 && server) {
			l.rcnt++
			want := byte(l.rcnt)
			for Load8(buf, pollOff) != want {
				if l.ended() {
					break
				}
				verbs.Progress(l.ep.Ctx)
				if err := w.idle(); err != nil {
					return err
				}
			}
			w.progress()
		}
		if l.scnt < l.iters || l.dur {
			if !l.dur {
				l.tposted[l.scnt] = Ticks()
			}
			l.scnt++
			buf[postOff] = byte(l.scnt)
			if err := l.qp.PostSend(&l.wr); err != nil {
				return fmt.Errorf("Couldn't post send: scnt=%d: %w", l.scnt, err)
			}
		}
		if l.ended() {
			break
		}
		if ccnt < l.iters || l.dur {
			if err := l.pollSend(&w); err != nil {
				return err
			}
			ccnt++
			l.sampled()
		}
	}
	return nil
}

// RunRead is run_iter_lat: READ and atomic latency, on the client only.
func (l *LatRun) RunRead() error {
	l.wr.SendFlags = verbs.SendSignaled
	l.start()
	w := newWatch(l.t, l.ep)
	for l.scnt < l.iters || (l.dur && !l.ended()) {
		if !l.dur {
			l.tposted[l.scnt] = Ticks()
		}
		l.scnt++
		if err := l.qp.PostSend(&l.wr); err != nil {
			return fmt.Errorf("Couldn't post send: scnt=%d: %w", l.scnt, err)
		}
		if l.ended() {
			break
		}
		if err := l.pollSend(&w); err != nil {
			return err
		}
		l.sampled()
	}
	return nil
}

// RunSend is run_iter_lat_send: the client sends first; each side reposts a
// receive as long as more messages are due.
func (l *LatRun) RunSend() error {
	l.wr.SendFlags = 0
	if l.size <= uint64(l.t.Inline) {
		l.wr.SendFlags |= verbs.SendInline
	}
	client := l.t.Role == perftest.Client
	cqMod := uint64(l.t.CQMod)
	rxDepth := uint64(l.t.RxDepth)
	first := true
	w := newWatch(l.t, l.ep)
	for l.scnt < l.iters || l.rcnt < l.iters || (l.dur && !l.ended()) {
		if (l.rcnt < l.iters || l.dur) && !(l.scnt < 1 && client) {
			for {
				n, err := w.poll(l.ep.RecvCQ, l.wc[:])
				if err != nil {
					return fmt.Errorf("poll CQ failed: %w", err)
				}
				if l.ended() {
					break
				}
				if n == 0 {
					if err := w.wait(l.ep.RecvCQ); err != nil {
						return err
					}
					continue
				}
				w.progress()
				if first {
					first = false
					l.start() // set_on_first_rx_packet
				}
				if l.wc[0].Status != verbs.WCSuccess {
					return compError("server", &l.wc[0], fmt.Sprintf("rcnt=%d", l.rcnt))
				}
				l.rcnt++
				l.sampled()
				if l.dur || l.rcnt+rxDepth <= l.iters {
					if err := l.qp.PostRecv(&l.rwr); err != nil {
						return fmt.Errorf("Couldn't post recv: rcnt=%d: %w", l.rcnt, err)
					}
				}
				break
			}
		}
		if l.scnt < l.iters || (l.dur && !l.ended()) {
			if !l.dur {
				l.tposted[l.scnt] = Ticks()
			}
			l.scnt++
			poll := false
			if l.scnt%cqMod == 0 || (!l.dur && l.scnt == l.iters) {
				poll = true
				l.wr.SendFlags |= verbs.SendSignaled
			}
			if l.ended() {
				break
			}
			if err := l.qp.PostSend(&l.wr); err != nil {
				return fmt.Errorf("Couldn't post send: scnt=%d: %w", l.scnt, err)
			}
			if poll {
				if err := l.pollSend(&w); err != nil {
					return err
				}
				l.wr.SendFlags &^= verbs.SendSignaled
			}
		}
	}
	return nil
}

// Stats computes this end's statistics (print_report_lat): in iteration
// mode s; in duration mode (Test.Duration > 0) d, with the CPU
// utilisation if StartCPU was set.
func (l *LatRun) Stats() (s perftest.LatStats, d perftest.LatDurationStats, err error) {
	p := perftest.LatParams{Size: l.size, TicksPerUsec: TicksPerUsec, RTTFactor: l.t.Verb.RTTFactor()}
	if l.dur {
		if l.ph == nil || l.sample == 0 {
			return s, d, fmt.Errorf("no exchange completed in the %d s measured", l.t.Duration-2*l.t.Margin)
		}
		d, err = perftest.ComputeLatDuration(l.sample, l.ph.SampleEnd-l.ph.SampleStart, p)
		if err != nil {
			return s, d, err
		}
		d.CPUUtil = l.ph.cpuUtil()
		return s, d, nil
	}
	s, err = perftest.ComputeLat(l.tposted, p)
	return s, d, err
}

// Samples returns the run's latency samples in microseconds, in
// measurement order or sorted without the tail (perftest.LatSamples); nil
// in duration mode.
func (l *LatRun) Samples(sorted bool) ([]float64, error) {
	if l.dur {
		return nil, nil
	}
	p := perftest.LatParams{Size: l.size, TicksPerUsec: TicksPerUsec, RTTFactor: l.t.Verb.RTTFactor()}
	return perftest.LatSamples(l.tposted, p, sorted)
}

// Sent and Received return how many messages QP 0 posted and received.
func (l *LatRun) Sent() uint64     { return l.scnt }
func (l *LatRun) Received() uint64 { return l.rcnt }

// Load8 reads the byte at b[off] with an atomic load of the aligned
// 32-bit word holding it: the peer's RDMA WRITE fills the buffer behind the
// Go memory model's back. b must start 4-byte aligned (MR memory is page
// aligned).
func Load8(b []byte, off uint64) byte {
	word := (*uint32)(unsafe.Pointer(&b[off&^3]))
	var w [4]byte
	binary.NativeEndian.PutUint32(w[:], atomic.LoadUint32(word))
	return w[off&3]
}
