package main

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
	"fmt"
	"io"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// ptLat is one latency measurement of one message size, on QP 0.
type ptLat struct {
	r    *ptRun
	o    *ptOptions
	res  *ptResources
	size uint64
	qp   verbs.QP

	wr   verbs.SendWR
	sge  [1]verbs.SGE
	rwr  verbs.RecvWR
	rsge [1]verbs.SGE

	iters   uint64 // 0 in duration mode
	dur     bool
	ph      *ptPhases
	sample  uint64
	tposted []uint64
	wc      [1]verbs.WC
	scnt    uint64
	rcnt    uint64
}

// newPTLat prepares QP 0's send request (ctx_set_send_wqes, with the
// length each run_iter_lat* sets).
func newPTLat(r *ptRun, size uint64) *ptLat {
	o := r.o
	l := &ptLat{r: r, o: o, res: r.res, size: size, qp: r.res.qps[0], iters: uint64(o.iters), dur: o.duration > 0}
	l.tposted = make([]uint64, max(l.iters, 1))
	rem := r.remote[0]
	l.sge[0] = verbs.SGE{Addr: l.res.base + l.res.sendOff(0), Length: uint32(size), LKey: l.res.mr.LKey()}
	l.wr = verbs.SendWR{WRID: 0, SGList: l.sge[:], RemoteAddr: rem.VAddr, RKey: rem.RKey}
	switch o.test.verb {
	case perftest.Write:
		l.wr.Opcode = verbs.WRRDMAWrite
	case perftest.Read:
		l.wr.Opcode = verbs.WRRDMARead
	case perftest.Send:
		l.wr.Opcode = verbs.WRSend
		l.wr.RemoteAddr, l.wr.RKey = 0, 0
	case perftest.Atomic:
		l.wr.Opcode = verbs.WRAtomicFetchAndAdd
		l.wr.CompareAdd = 1
		if o.atomicOp == perftest.CmpAndSwap {
			l.wr.Opcode = verbs.WRAtomicCmpAndSwp
			l.wr.CompareAdd, l.wr.Swap = 0, 0
		}
	}
	return l
}

// setRecvWQEs posts the SEND test's receives, all at the start of the
// receive region (ctx_set_recv_wqes; latency tests do not step).
func (l *ptLat) setRecvWQEs() error {
	l.rsge[0] = verbs.SGE{Addr: l.res.base + l.res.recvOff(0), Length: uint32(l.size), LKey: l.res.mr.LKey()}
	l.rwr = verbs.RecvWR{WRID: 0, SGList: l.rsge[:]}
	for j := 0; j < l.o.rxDepth; j++ {
		if err := l.qp.PostRecv(&l.rwr); err != nil {
			return fmt.Errorf("Couldn't post recv Qp = 0: counter=%d: %w", j, err)
		}
	}
	return nil
}

// start begins the duration-mode phases.
func (l *ptLat) start() {
	if l.dur {
		l.ph = newPTPhases(l.o, ptTicks())
	}
}

// ended reports whether a duration-mode run is over.
func (l *ptLat) ended() bool { return l.dur && l.ph.at(ptTicks()) == ptPhaseEnd }

// sampled counts an exchange completed in the sampled interval.
func (l *ptLat) sampled() {
	if l.dur && l.ph.at(ptTicks()) == ptPhaseSample {
		l.sample++
	}
}

// pollSend waits for one send completion.
func (l *ptLat) pollSend(w *ptWatch) error {
	for {
		n, err := l.res.sendCQ.Poll(l.wc[:])
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if n == 1 {
			w.progress()
			if l.wc[0].Status != verbs.WCSuccess {
				return ptCompError("client", &l.wc[0], fmt.Sprintf("scnt=%d", l.scnt))
			}
			return nil
		}
		if err := w.idle(); err != nil {
			return err
		}
	}
}

// runWrite is run_iter_lat_write.
func (l *ptLat) runWrite() error {
	l.wr.SendFlags = verbs.SendSignaled
	if l.size <= uint64(l.r.inline) {
		l.wr.SendFlags |= verbs.SendInline
	}
	buf := l.res.buf
	postOff := l.res.sendOff(0) + l.size - 1
	pollOff := l.res.vaddrOff(0) + l.size - 1
	server := l.o.role() == perftest.Server
	l.start()
	w := newPTWatch(l.r.env.ctx)
	var ccnt uint64
	for l.scnt < l.iters || ccnt < l.iters || l.rcnt < l.iters || (l.dur && !l.ended()) {
		if (l.rcnt < l.iters || l.dur) && !(l.scnt < 1 && server) {
			l.rcnt++
			want := byte(l.rcnt)
			for ptLoad8(buf, pollOff) != want {
				if l.ended() {
					break
				}
				verbs.Progress(l.res.ctx)
				if err := w.idle(); err != nil {
					return err
				}
			}
			w.progress()
		}
		if l.scnt < l.iters || l.dur {
			if !l.dur {
				l.tposted[l.scnt] = ptTicks()
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

// runRead is run_iter_lat: READ and atomic latency, on the client only.
func (l *ptLat) runRead() error {
	l.wr.SendFlags = verbs.SendSignaled
	l.start()
	w := newPTWatch(l.r.env.ctx)
	for l.scnt < l.iters || (l.dur && !l.ended()) {
		if !l.dur {
			l.tposted[l.scnt] = ptTicks()
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

// runSend is run_iter_lat_send: the client sends first; each side reposts a
// receive as long as more messages are due.
func (l *ptLat) runSend() error {
	l.wr.SendFlags = 0
	if l.size <= uint64(l.r.inline) {
		l.wr.SendFlags |= verbs.SendInline
	}
	client := l.o.role() == perftest.Client
	cqMod := uint64(l.o.cqMod)
	rxDepth := uint64(l.o.rxDepth)
	first := true
	w := newPTWatch(l.r.env.ctx)
	for l.scnt < l.iters || l.rcnt < l.iters || (l.dur && !l.ended()) {
		if (l.rcnt < l.iters || l.dur) && !(l.scnt < 1 && client) {
			for {
				n, err := l.res.recvCQ.Poll(l.wc[:])
				if err != nil {
					return fmt.Errorf("poll CQ failed: %w", err)
				}
				if l.ended() {
					break
				}
				if n == 0 {
					if err := w.idle(); err != nil {
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
					return ptCompError("server", &l.wc[0], fmt.Sprintf("rcnt=%d", l.rcnt))
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
				l.tposted[l.scnt] = ptTicks()
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

// report prints this size's row (print_report_lat,
// print_report_lat_duration) and rewrites the JSON file.
func (l *ptLat) report() error {
	r := l.r
	p := perftest.LatParams{Size: l.size, TicksPerUsec: ptTicksPerUsec, RTTFactor: l.o.test.verb.RTTFactor()}
	if l.dur {
		if l.ph == nil || l.sample == 0 {
			return fmt.Errorf("no exchange completed in the %d s measured", l.o.duration-2*l.o.margin)
		}
		s, err := perftest.ComputeLatDuration(l.sample, l.ph.sampleEnd-l.ph.sampleStart, p)
		if err != nil {
			return err
		}
		s.CPUUtil = l.ph.cpu.util()
		r.outs.latDur = append(r.outs.latDur, s)
		r.outs.bar.pause()
		if err := perftest.WriteLatDurationRow(r.out, s, r.o.cpuUtilOn()); err != nil {
			return err
		}
		if r.o.outJSON {
			return r.writeJSON(func(w io.Writer) error {
				return perftest.WriteLatDurationJSON(w, perftest.JSONValid, r.ti, s, r.o.cpuUtilOn())
			})
		}
		return nil
	}
	s, err := perftest.ComputeLat(l.tposted, p)
	if err != nil {
		return err
	}
	r.outs.lat = append(r.outs.lat, s)
	r.outs.bar.pause()
	if err := perftest.WriteLatRow(r.out, s); err != nil {
		return err
	}
	if r.o.outJSON {
		return r.writeJSON(func(w io.Writer) error {
			return perftest.WriteLatJSON(w, perftest.JSONValid, r.ti, s)
		})
	}
	return nil
}

// verify checks the last data moved, when the peer is softrdma: what a
// READ client read, what a SEND side received.
func (l *ptLat) verify() error {
	r := l.r
	seed := ptSeed(r.remote[0].PSN)
	switch {
	case l.o.test.verb == perftest.Read && l.scnt > 0:
		return l.res.verifySlots("RDMA READ data", 0, l.res.sendOff(0), r.remote[0].VAddr, seed, l.size, 1)
	case l.o.test.verb == perftest.Send && l.rcnt > 0:
		peerSend := r.remote[0].VAddr - uint64(l.o.numQPs)*l.res.buffSize
		return l.res.verifySlots("received SEND data", 0, l.res.recvOff(0), peerSend, seed, l.size, 1)
	}
	return nil
}
