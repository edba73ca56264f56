package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/verbs"
)

// ScaleConfig is one scale measurement: QPs connected RC QP pairs between
// two contexts, all of one side's QPs sharing one PD, one MR and one CQ, as
// an application with many connections shares them (a CQ per QP is not how
// verbs programs scale, and a device's CQs are fewer than its QPs).
type ScaleConfig struct {
	QPs int
	// Size and Msgs make the bandwidth run: Msgs RDMA WRITEs of Size bytes,
	// round-robin over the QPs (at least two per QP).
	Size, Msgs int
	// RateMsgs 8-byte WRITEs make the message-rate run; 0 skips it.
	RateMsgs int
	// Outstanding bounds the WRITEs in flight over all QPs together; each
	// QP has at most max(1, Outstanding/QPs), and no more than its send
	// queue holds (128). Default 256.
	Outstanding int
	MTU         verbs.MTU
	// Timeout is the QPs' local ACK timeout exponent (IBTA: 4.096 µs ×
	// 2^Timeout); 0 means perftest's 14 (67 ms).
	Timeout uint8
}

// ScaleResult is what Scale measured.
type ScaleResult struct {
	QPs int
	// Setup is the time to create and connect the QPs of both sides.
	Setup time.Duration
	// HeapPerQP and RSSPerQP are the growth of the Go heap and of the
	// process's resident memory from creating and connecting the QPs,
	// divided by the QPs of both sides (2 × QPs): the cost of one QP.
	HeapPerQP, RSSPerQP int64
	BW, Rate            ScaleRun
	// Verified is how many QPs' last WRITE was checked in the target's
	// memory (all of them).
	Verified int
}

// ScaleRun is one bandwidth or message-rate run.
type ScaleRun struct {
	Size, Msgs int
	Elapsed    time.Duration
	CPUTime    time.Duration
	MBps       float64 // MB = 2^20 bytes, as perftest
	MsgRate    float64 // million messages per second
	CPUPerGB   float64 // CPU seconds (whole process) per 10^9 bytes
}

// scaleEnd is one side of a scale measurement.
type scaleEnd struct {
	ctx    verbs.Context
	pd     verbs.PD
	cq     verbs.CQ
	mr     verbs.MR
	gid    verbs.GID
	gidIdx int
	qps    []verbs.QP
}

func (e *scaleEnd) close() {
	for _, qp := range e.qps {
		if qp != nil {
			qp.Destroy()
		}
	}
	if e.mr != nil {
		e.mr.Dereg()
	}
	if e.cq != nil {
		e.cq.Destroy()
	}
	if e.pd != nil {
		e.pd.Dealloc()
	}
}

// scaleSQDepth is each QP's send queue depth (perftest's default tx depth);
// receive queues are small, as a WRITE-only workload needs none.
const (
	scaleSQDepth = 128
	scaleRQDepth = 16
	scaleData    = 16 << 20 // each side's data area; WRITEs wrap around it
)

// Scale creates cfg.QPs QP pairs between a and b and measures memory per
// QP, WRITE bandwidth and the 8-byte WRITE rate over all of them. b's
// receiving is left to its device (nothing polls b).
func Scale(a, b verbs.Context, cfg ScaleConfig) (ScaleResult, error) {
	if cfg.QPs < 1 || cfg.Size < 8 || cfg.Size > scaleData {
		return ScaleResult{}, fmt.Errorf("bench: scale needs at least 1 QP and a size of 8 bytes to %d MiB", scaleData>>20)
	}
	if cfg.Outstanding <= 0 {
		cfg.Outstanding = 256
	}
	if cfg.MTU == 0 {
		cfg.MTU = verbs.MTU4096
	}
	n := cfg.QPs
	res := ScaleResult{QPs: n}
	// Stamps: 8 bytes per QP after the data area, written last and checked.
	mrLen := scaleData + 8*n
	var ea, eb scaleEnd
	defer ea.close()
	defer eb.close()
	cqe := min(4*cfg.Outstanding+64, 1<<15-1)
	for _, e := range []struct {
		end *scaleEnd
		ctx verbs.Context
	}{{&ea, a}, {&eb, b}} {
		var err error
		e.end.ctx = e.ctx
		if e.end.pd, err = e.ctx.AllocPD(); err != nil {
			return res, err
		}
		if e.end.cq, err = e.ctx.CreateCQ(cqe, nil); err != nil {
			return res, err
		}
		access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
		if e.end.mr, err = e.end.pd.AllocMR(mrLen, access); err != nil {
			return res, err
		}
		if e.end.gid, e.end.gidIdx, err = sourceGID(e.ctx); err != nil {
			return res, err
		}
	}
	heap0, rss0 := memNow()
	t0 := time.Now()
	attr := verbs.QPInitAttr{QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: scaleSQDepth, MaxRecvWR: scaleRQDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
	for i := 0; i < n; i++ {
		for _, e := range []*scaleEnd{&ea, &eb} {
			attr.SendCQ, attr.RecvCQ = e.cq, e.cq
			qp, err := e.pd.CreateQP(&attr)
			if err != nil {
				return res, fmt.Errorf("creating QP %d of %d: %w", i+1, n, err)
			}
			e.qps = append(e.qps, qp)
		}
		psn := uint32(i*7919) & 0xFFFFFF
		if err := connectScaleQP(ea.qps[i], eb.qps[i], ea.gidIdx, eb.gid, cfg, psn, psn^0x5A5A5A); err != nil {
			return res, fmt.Errorf("connecting QP %d: %w", i+1, err)
		}
		if err := connectScaleQP(eb.qps[i], ea.qps[i], eb.gidIdx, ea.gid, cfg, psn^0x5A5A5A, psn); err != nil {
			return res, fmt.Errorf("connecting QP %d: %w", i+1, err)
		}
	}
	res.Setup = time.Since(t0)
	heap1, rss1 := memNow()
	res.HeapPerQP = (heap1 - heap0) / int64(2*n)
	res.RSSPerQP = (rss1 - rss0) / int64(2*n)

	var err error
	if res.BW, err = scaleRun(&ea, &eb, cfg, cfg.Size, max(cfg.Msgs, 2*n)); err != nil {
		return res, fmt.Errorf("%d-byte WRITEs over %d QPs: %w", cfg.Size, n, err)
	}
	if cfg.RateMsgs > 0 {
		if res.Rate, err = scaleRun(&ea, &eb, cfg, 8, max(cfg.RateMsgs, 2*n)); err != nil {
			return res, fmt.Errorf("8-byte WRITEs over %d QPs: %w", n, err)
		}
	}
	if res.Verified, err = scaleVerify(&ea, &eb, cfg); err != nil {
		return res, err
	}
	return res, nil
}

// scaleRun posts about msgs WRITEs of size bytes round-robin over the QPs,
// the same number on each, at most cfg.Outstanding in flight and
// max(1, Outstanding/QPs) per QP. As perftest does, a QP signals every
// 16th WRITE and its last, and also the WRITE that fills its share of the
// budget, so that a completion retires all of the QP's earlier WRITEs and
// none waits unsignaled while the budget is spent.
func scaleRun(a, b *scaleEnd, cfg ScaleConfig, size, msgs int) (ScaleRun, error) {
	n := len(a.qps)
	each := uint32((msgs + n - 1) / n)
	msgs = int(each) * n
	perQP := min(max(1, cfg.Outstanding/n), scaleSQDepth)
	posted := make([]uint32, n) // WRITEs posted per QP
	done := make([]uint32, n)   // WRITEs known complete per QP
	slots := scaleData / size
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, size)}, RKey: b.mr.RKey()}
	if size <= 64 {
		wr.SendFlags |= verbs.SendInline
	}
	wcs := make([]verbs.WC, 64)
	inflight, sent, completed, next := 0, 0, 0, 0
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	idle := 0
	for completed < msgs {
		// Post round-robin while the budget allows, the posts to idle
		// QPs leaving together (verbs.DoorbellBatcher).
		ring := verbs.HoldDoorbells(a.ctx)
		for tries := 0; sent < msgs && inflight < cfg.Outstanding && tries < n; tries++ {
			i := next
			if next++; next == n {
				next = 0
			}
			out := int(posted[i] - done[i])
			if out >= perQP || posted[i] == each {
				continue
			}
			seq := posted[i]
			wr.WRID = uint64(i)<<32 | uint64(seq)
			wr.SendFlags &^= verbs.SendSignaled
			if out+1 == perQP || seq%16 == 15 || seq+1 == each {
				wr.SendFlags |= verbs.SendSignaled
			}
			off := ((sent) % slots) * size
			wr.SGList[0] = a.mr.SGE(off, size)
			wr.RemoteAddr = b.mr.Addr() + uint64(off)
			if err := a.qps[i].PostSend(&wr); err != nil {
				ring()
				return ScaleRun{}, err
			}
			posted[i]++
			inflight++
			sent++
			tries = -1 // progress: look at every QP again
		}
		ring()
		k, err := a.cq.Poll(wcs)
		if err != nil {
			return ScaleRun{}, err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return ScaleRun{}, fmt.Errorf("completion %v on QP %d", wc.Status, wc.WRID>>32)
			}
			i, seq := int(wc.WRID>>32), uint32(wc.WRID)
			retired := int(seq + 1 - done[i])
			done[i] = seq + 1
			inflight -= retired
			completed += retired
		}
		if k > 0 {
			idle = 0
			continue
		}
		idle++
		spin.Idle(idle)
		if idle&0xFFFF == 0 && time.Now().After(deadline) {
			return ScaleRun{}, errors.New("no completions for 60 s")
		}
	}
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	bytes := float64(msgs) * float64(size)
	return ScaleRun{Size: size, Msgs: msgs, Elapsed: el, CPUTime: cpu,
		MBps: bytes / el.Seconds() / (1 << 20), MsgRate: float64(msgs) / el.Seconds() / 1e6,
		CPUPerGB: cpu.Seconds() / (bytes / 1e9)}, nil
}

// scaleVerify makes every QP write its own 8-byte stamp into its slot of
// b's stamp area, then checks all of them: every QP moved data to the
// right place.
func scaleVerify(a, b *scaleEnd, cfg ScaleConfig) (int, error) {
	n := len(a.qps)
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	stamp := func(i int) uint64 { return uint64(i+1)*0x9E3779B97F4A7C15 | 1 }
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(src[scaleData+8*i:], stamp(i))
	}
	wcs := make([]verbs.WC, 64)
	batch := max(1, min(cfg.Outstanding, 256))
	for lo := 0; lo < n; lo += batch {
		hi := min(n, lo+batch)
		for i := lo; i < hi; i++ {
			off := scaleData + 8*i
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.mr.SGE(off, 8)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
			if err := a.qps[i].PostSend(&wr); err != nil {
				return 0, err
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for got, idle := 0, 0; got < hi-lo; {
			k, err := a.cq.Poll(wcs)
			if err != nil {
				return 0, err
			}
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					return 0, fmt.Errorf("stamp WRITE on QP %d: %v", wc.WRID, wc.Status)
				}
			}
			got += k
			if k == 0 {
				idle++
				spin.Idle(idle)
				if idle&0xFFFF == 0 && time.Now().After(deadline) {
					return 0, errors.New("stamp WRITEs: no completions for 60 s")
				}
			}
		}
	}
	// The completions say the data landed: the responder wrote it before
	// it acknowledged.
	for i := 0; i < n; i++ {
		if got := binary.LittleEndian.Uint64(dst[scaleData+8*i:]); got != stamp(i) {
			return i, fmt.Errorf("QP %d: stamp %#x in the target, want %#x", i, got, stamp(i))
		}
	}
	return n, nil
}

// memNow returns the Go heap in use after a collection and the process's
// resident set size, in bytes.
func memNow() (heap, rss int64) {
	// Twice: sync.Pool keeps what one GC finds (the victim cache) until
	// the next, so the packet buffer pools would count on one side only.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = int64(ms.HeapAlloc)
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				rss = pages * int64(os.Getpagesize())
			}
		}
	}
	return heap, rss
}

// connectScaleQP is connectQP with the scale run's ACK timeout.
func connectScaleQP(qp, peer verbs.QP, gidIndex int, peerGID verbs.GID, cfg ScaleConfig, sq, rq uint32) error {
	p := perftestParams(cfg.MTU, gidIndex)
	if cfg.Timeout != 0 {
		p.Timeout = cfg.Timeout
	}
	return cm.Connect(qp, cm.Endpoint{QPN: qp.QPNum(), PSN: sq}, cm.Endpoint{QPN: peer.QPNum(), PSN: rq, GID: peerGID}, &p)
}
