// Package bench runs perftest-style bandwidth and latency measurements
// between two RC queue pairs through the verbs API: RDMA WRITE, RDMA READ
// and SEND, as ib_write_bw / ib_write_lat / ib_read_* / ib_send_* do. The
// CLI's bench command and the comparison harness use it; it knows nothing
// about where the two sides live (one process over loopback, or two).
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/verbs"
)

// Op is the operation measured.
type Op uint8

// Operations.
const (
	Write Op = iota
	Read
	Send
)

func (o Op) String() string {
	switch o {
	case Write:
		return "RDMA_Write"
	case Read:
		return "RDMA_Read"
	case Send:
		return "Send"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ParseOp parses "write", "read" or "send".
func ParseOp(s string) (Op, error) {
	switch s {
	case "write":
		return Write, nil
	case "read":
		return Read, nil
	case "send":
		return Send, nil
	}
	return 0, fmt.Errorf("unknown operation %q: use write, read or send", s)
}

// Side is one end: a QP with its CQ and a registered buffer.
type Side struct {
	Ctx verbs.Context
	PD  verbs.PD
	CQ  verbs.CQ
	QP  verbs.QP
	MR  verbs.MR
	Buf []byte
	GID verbs.GID
	wcs []verbs.WC

	recvPosted int // receive WQEs posted and not yet completed
	// recvCredit is the number of posted receive WQEs that no SEND of
	// the peer has been aimed at yet: the peer's SEND bandwidth loop
	// posts a SEND only against a credit, so it never meets an empty
	// receive queue (an RNR NAK) because this side's reposting goroutine
	// was slow to run. Shared by the two goroutines of a SEND test.
	recvCredit atomic.Int64
}

// topUpRecv keeps RecvDepth receive WQEs posted, each covering the receive
// half of the buffer so that any message size fits.
func (s *Side) topUpRecv() error {
	half := len(s.Buf) / 2
	for s.recvPosted < RecvDepth {
		if err := s.QP.PostRecv(&verbs.RecvWR{WRID: 1 << 32, SGList: []verbs.SGE{s.MR.SGE(half, half)}}); err != nil {
			return err
		}
		s.recvPosted++
		s.recvCredit.Add(1)
	}
	return nil
}

// Depth is the send queue depth and the bandwidth tests' window
// (perftest's default tx depth for bandwidth tests is 128).
const Depth = 128

// RecvDepth is the receive queue depth (perftest's default rx depth for
// SEND bandwidth tests is 512): deeper than the sender's window, so that
// the receiver's reposting can fall behind a little without the sender
// waiting for credits.
const RecvDepth = 4 * Depth

// NewSide creates the verbs objects of one end with a buffer of bufSize
// bytes allocated off the Go heap.
func NewSide(ctx verbs.Context, bufSize int) (*Side, error) {
	s := &Side{Ctx: ctx, wcs: make([]verbs.WC, 64)}
	var err error
	if s.PD, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.CQ, err = ctx.CreateCQ(RecvDepth+Depth, nil); err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if s.MR, err = s.PD.AllocMR(bufSize, access); err != nil {
		return nil, err
	}
	s.Buf = s.MR.Bytes()
	if s.QP, err = s.PD.CreateQP(&verbs.QPInitAttr{SendCQ: s.CQ, RecvCQ: s.CQ, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: Depth, MaxRecvWR: RecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		return nil, err
	}
	if s.GID, err = ctx.QueryGID(1, 1); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the side's objects (not the context).
func (s *Side) Close() {
	if s.QP != nil {
		s.QP.Destroy()
	}
	if s.MR != nil {
		s.MR.Dereg()
	}
	if s.CQ != nil {
		s.CQ.Destroy()
	}
	if s.PD != nil {
		s.PD.Dealloc()
	}
}

// Connect moves both QPs to RTS towards each other.
func Connect(a, b *Side, mtu verbs.MTU) error {
	if err := connectOne(a, b, mtu, 0x1000, 0x2000); err != nil {
		return err
	}
	return connectOne(b, a, mtu, 0x2000, 0x1000)
}

func connectOne(s, peer *Side, mtu verbs.MTU, sq, rq uint32) error {
	return connectQP(s.QP, peer.QP.QPNum(), peer.GID, mtu, sq, rq)
}

// connectQP moves qp through INIT and RTR to RTS towards QP peerQPN at
// peerGID, with perftest's defaults (timeout 14, 7 retries, 7 RNR retries).
func connectQP(qp verbs.QP, peerQPN uint32, peerGID verbs.GID, mtu verbs.MTU, sq, rq uint32) error {
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: mtu, DestQPNum: peerQPN, RQPSN: rq,
		MaxDestRdAtomic: 16, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peerGID, SGIDIndex: 1, HopLimit: 64}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

// Config is one measurement.
type Config struct {
	Op    Op
	Size  int
	Iters int
	// Block waits for completions with CQ.Wait (spin, then sleep) instead
	// of busy polling.
	Block bool
}

// BWResult is a bandwidth measurement, as ib_*_bw reports it.
type BWResult struct {
	Config
	Elapsed  time.Duration
	PeakMBps float64 // best rate over any completion interval
	AvgMBps  float64 // bytes / elapsed, MB = 2^20 bytes as perftest
	MsgRate  float64 // million messages per second
	CPUTime  time.Duration
	Stalls   Stalls // RNR NAKs, timeouts and retransmissions during the run; the caller fills it in
}

// LatResult is a latency measurement, as ib_*_lat reports it: one-way
// (half the round trip) for WRITE and SEND, the round trip for READ.
type LatResult struct {
	Config
	Min, Max, Typical, Avg, Stdev, P99, P999 time.Duration
	Samples                                  []time.Duration
	Stalls                                   Stalls // as in BWResult
}

var errTimeout = errors.New("bench: no completion for 10 s; is the peer alive?")

// poll returns the next completion.
func (s *Side) poll(block bool) (verbs.WC, error) {
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		n, err := s.CQ.Poll(s.wcs[:1])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			wc := s.wcs[0]
			if wc.Status != verbs.WCSuccess {
				return wc, fmt.Errorf("bench: completion %v for wr_id %d", wc.Status, wc.WRID)
			}
			return wc, nil
		}
		if block {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			err := s.CQ.Wait(ctx)
			cancel()
			if err != nil {
				return verbs.WC{}, errTimeout
			}
		} else {
			spin.Idle(i + 1)
			if i&65535 == 65535 && time.Now().After(deadline) {
				return verbs.WC{}, errTimeout
			}
		}
	}
}

// BW measures bandwidth from a to b: a keeps up to Depth operations
// outstanding, signaling one in every signalEvery.
func BW(a, b *Side, cfg Config) (BWResult, error) {
	if cfg.Size > len(a.Buf) || cfg.Size > len(b.Buf) {
		return BWResult{}, fmt.Errorf("bench: size %d exceeds the %d-byte buffers", cfg.Size, len(a.Buf))
	}
	const signalEvery = 32
	stop := make(chan struct{})
	recvDone := make(chan error, 1)
	if cfg.Op == Send {
		if err := b.topUpRecv(); err != nil {
			return BWResult{}, err
		}
		go func() { recvDone <- b.repost(stop) }()
	}
	wr := verbs.SendWR{SGList: []verbs.SGE{a.MR.SGE(0, cfg.Size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	switch cfg.Op {
	case Write:
		wr.Opcode = verbs.WRRDMAWrite
	case Read:
		wr.Opcode = verbs.WRRDMARead
	case Send:
		wr.Opcode = verbs.WRSend
	}
	iters := cfg.Iters - cfg.Iters%signalEvery
	if iters == 0 {
		iters = signalEvery
	}
	var peak float64
	cpu0 := cpuTime()
	start := time.Now()
	last := start
	posted, completed := 0, 0
	for completed < iters {
		for posted < iters && posted-completed < Depth {
			if cfg.Op == Send && !b.takeCredit() {
				break
			}
			wr.WRID = uint64(posted)
			wr.SendFlags = 0
			if (posted+1)%signalEvery == 0 {
				wr.SendFlags = verbs.SendSignaled
			}
			if err := a.QP.PostSend(&wr); err != nil {
				close(stop)
				return BWResult{}, err
			}
			posted++
		}
		if posted-completed < signalEvery {
			// No signaled SEND is outstanding: what holds the loop up
			// is b's receive queue, which b's goroutine is refilling.
			if err := b.awaitCredit(); err != nil {
				close(stop)
				return BWResult{}, err
			}
			continue
		}
		if _, err := a.poll(cfg.Block); err != nil {
			close(stop)
			return BWResult{}, err
		}
		completed += signalEvery
		now := time.Now()
		if d := now.Sub(last); d > 0 {
			peak = max(peak, float64(signalEvery*cfg.Size)/d.Seconds()/(1<<20))
		}
		last = now
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	close(stop)
	if cfg.Op == Send {
		if err := <-recvDone; err != nil {
			return BWResult{}, err
		}
	}
	r := BWResult{Config: cfg, Elapsed: elapsed, PeakMBps: peak, CPUTime: cpu}
	r.Iters = iters
	r.AvgMBps = float64(iters*cfg.Size) / elapsed.Seconds() / (1 << 20)
	r.MsgRate = float64(iters) / elapsed.Seconds() / 1e6
	return r, nil
}

// takeCredit claims one of s's posted receive WQEs for a SEND about to be
// posted towards s, or reports that none is left.
func (s *Side) takeCredit() bool {
	if s.recvCredit.Load() <= 0 {
		return false
	}
	s.recvCredit.Add(-1) // only the sending goroutine takes credits
	return true
}

// awaitCredit waits until s has a receive WQE that no SEND is aimed at.
func (s *Side) awaitCredit() error {
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; s.recvCredit.Load() <= 0; i++ {
		spin.Idle(i + 1)
		if i&65535 == 65535 && time.Now().After(deadline) {
			return errTimeout
		}
	}
	return nil
}

// repost keeps b's receive queue full until stop is closed and every
// receive it expects has arrived.
func (s *Side) repost(stop <-chan struct{}) error {
	idle := 0
	for {
		n, err := s.CQ.Poll(s.wcs)
		if err != nil {
			return err
		}
		for _, wc := range s.wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("bench: receive completion %v", wc.Status)
			}
			s.recvPosted--
		}
		if err := s.topUpRecv(); err != nil {
			return err
		}
		if n == 0 {
			idle++
			select {
			case <-stop:
				return nil
			default:
				spin.Idle(idle)
			}
		} else {
			idle = 0
		}
	}
}

// Lat measures latency between a and b with cfg.Iters round trips.
func Lat(a, b *Side, cfg Config) (LatResult, error) {
	if cfg.Size > len(a.Buf)/2 || cfg.Size < 1 {
		return LatResult{}, fmt.Errorf("bench: size %d must be 1..%d", cfg.Size, len(a.Buf)/2)
	}
	samples := make([]time.Duration, 0, cfg.Iters)
	var err error
	switch cfg.Op {
	case Read:
		samples, err = readLat(a, b, cfg, samples)
	case Write:
		samples, err = pingPong(a, b, cfg, samples)
	case Send:
		samples, err = pingPong(a, b, cfg, samples)
	}
	if err != nil {
		return LatResult{}, err
	}
	return summarize(cfg, samples), nil
}

func readLat(a, b *Side, cfg Config, samples []time.Duration) ([]time.Duration, error) {
	wr := verbs.SendWR{Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, cfg.Size)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	for i := 0; i < cfg.Iters; i++ {
		t0 := time.Now()
		wr.WRID = uint64(i)
		if err := a.QP.PostSend(&wr); err != nil {
			return nil, err
		}
		if _, err := a.poll(cfg.Block); err != nil {
			return nil, err
		}
		samples = append(samples, time.Since(t0))
	}
	return samples, nil
}

// pingPong bounces a message between a and b: WRITE polls the last byte of
// the target buffer as ib_write_lat does; SEND waits for the receive
// completion as ib_send_lat does. Each sample is half a round trip.
func pingPong(a, b *Side, cfg Config, samples []time.Duration) ([]time.Duration, error) {
	if cfg.Op == Send {
		for _, s := range []*Side{a, b} {
			if err := s.topUpRecv(); err != nil {
				return nil, err
			}
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- echo(b, a, cfg) }()
	for i := 0; i < cfg.Iters; i++ {
		t0 := time.Now()
		if err := bounce(a, b, cfg, i, true); err != nil {
			return nil, err
		}
		samples = append(samples, time.Since(t0)/2)
	}
	return samples, <-errc
}

func echo(b, a *Side, cfg Config) error {
	for i := 0; i < cfg.Iters; i++ {
		if err := bounce(b, a, cfg, i, false); err != nil {
			return err
		}
	}
	return nil
}

// bounce does one leg pair from s's point of view: if first, send then wait
// for the reply; else wait then reply.
func bounce(s, peer *Side, cfg Config, i int, first bool) error {
	if first {
		if err := s.send(peer, cfg, i); err != nil {
			return err
		}
		return s.await(cfg, i)
	}
	if err := s.await(cfg, i); err != nil {
		return err
	}
	return s.send(peer, cfg, i)
}

// marker is the value of the last byte of iteration i's message.
func marker(i int) byte { return byte(i%255) + 1 }

// Latency tests send from the first half of a side's buffer into the
// second half of the peer's, so a side never mistakes its own marker for
// the peer's.
func (s *Side) send(peer *Side, cfg Config, i int) error {
	last := cfg.Size - 1
	// The message carries its marker in its last byte.
	s.Buf[last] = marker(i)
	wr := verbs.SendWR{WRID: uint64(i), SGList: []verbs.SGE{s.MR.SGE(0, cfg.Size)}, RemoteAddr: peer.MR.Addr() + uint64(len(peer.Buf)/2), RKey: peer.MR.RKey()}
	wr.Opcode = verbs.WRRDMAWrite
	if cfg.Op == Send {
		wr.Opcode = verbs.WRSend
		peer.recvCredit.Add(-1) // one message in flight: the peer always has a receive posted
	}
	if cfg.Size <= 64 {
		wr.SendFlags |= verbs.SendInline
	}
	if i%16 == 15 || cfg.Op == Send {
		wr.SendFlags |= verbs.SendSignaled
	}
	if err := s.QP.PostSend(&wr); err != nil {
		return err
	}
	if wr.SendFlags&verbs.SendSignaled != 0 && cfg.Op != Send {
		_, err := s.poll(cfg.Block)
		return err
	}
	return nil
}

// await waits for iteration i's message from the peer.
func (s *Side) await(cfg Config, i int) error {
	if cfg.Op == Send {
		// The send completion of our own previous message and the
		// receive completion arrive on one CQ; wait for the receive.
		for {
			wc, err := s.poll(cfg.Block)
			if err != nil {
				return err
			}
			if wc.Opcode&verbs.WCRecv != 0 {
				s.recvPosted--
				return s.topUpRecv()
			}
		}
	}
	last := len(s.Buf)/2 + cfg.Size - 1
	word := (*uint32)(unsafe.Pointer(&s.Buf[last&^3]))
	shift := uint(last&3) * 8
	want := uint32(marker(i))
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		if atomic.LoadUint32(word)>>shift&0xFF == want {
			return nil
		}
		verbs.Progress(s.Ctx)
		spin.Idle(n + 1)
		if n&65535 == 65535 && time.Now().After(deadline) {
			return errTimeout
		}
	}
}

func summarize(cfg Config, s []time.Duration) LatResult {
	r := LatResult{Config: cfg, Samples: s}
	if len(s) == 0 {
		return r
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	r.Min, r.Max = sorted[0], sorted[len(sorted)-1]
	r.Typical = sorted[len(sorted)/2]
	var sum float64
	for _, d := range sorted {
		sum += float64(d)
	}
	avg := sum / float64(len(sorted))
	var sq float64
	for _, d := range sorted {
		sq += (float64(d) - avg) * (float64(d) - avg)
	}
	r.Avg = time.Duration(avg)
	r.Stdev = time.Duration(math.Sqrt(sq / float64(len(sorted))))
	r.P99 = sorted[min(len(sorted)-1, len(sorted)*99/100)]
	r.P999 = sorted[min(len(sorted)-1, len(sorted)*999/1000)]
	return r
}
