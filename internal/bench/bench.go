// Package bench is softrdma's one benchmark engine: perftest's bandwidth
// and latency loops through the verbs API (RDMA WRITE, RDMA READ, SEND and
// atomics, as ib_write_bw / ib_write_lat / ib_read_* / ib_send_* /
// ib_atomic_* run them; engine.go, bwrun.go, latrun.go). The
// perftest-compatible tools run one end each against a peer; softrdma
// bench and the comparison harness run both ends in one process (Side, BW,
// Lat); the -scale measurement (scale.go) drives many QPs.
package bench

import (
	"crypto/rand"

	"fmt"
	"github.com/softrdma/softrdma/cm"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/internal/perftest"
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

// Side is one end of softrdma bench: a QP with its send and receive CQs
// and a registered buffer laid out as perftest lays out one QP's (Layout).
type Side struct {
	Ctx    verbs.Context
	PD     verbs.PD
	SendCQ verbs.CQ
	RecvCQ verbs.CQ
	QP     verbs.QP
	MR     verbs.MR
	Buf    []byte
	GID    verbs.GID
	// GIDIndex is GID's index: the QP sends from it.
	GIDIndex int
	layout   Layout

	// credits counts the receives this side posted that no SEND of the
	// peer is aimed at yet (Test.Credits): the peer's SEND bandwidth loop
	// never meets an empty receive queue (an RNR NAK) because this side's
	// goroutine was slow to repost.
	credits atomic.Int64
}

// Depth is the send queue depth and the bandwidth tests' window
// (perftest's default tx depth for bandwidth tests is 128).
const Depth = 128

// RecvDepth is the receive queue depth (perftest's default rx depth for
// SEND bandwidth tests is 512): deeper than the sender's window, so that
// the receiver's reposting can fall behind a little without the sender
// waiting for credits.
const RecvDepth = 4 * Depth

// inline is the largest message sent inline (the QPs' MaxInlineData).
const inline = 64

// NewSide creates the verbs objects of one end, for messages of up to
// maxSize bytes, with a buffer allocated off the Go heap.
func NewSide(ctx verbs.Context, maxSize int) (*Side, error) {
	s := &Side{Ctx: ctx, layout: NewLayout(1, uint64(maxSize), 4096, 64)}
	var err error
	if s.PD, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.SendCQ, err = ctx.CreateCQ(Depth, nil); err != nil {
		return nil, err
	}
	if s.RecvCQ, err = ctx.CreateCQ(RecvDepth, nil); err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if s.MR, err = s.PD.AllocMR(int(s.layout.Bytes()), access); err != nil {
		return nil, err
	}
	s.Buf = s.MR.Bytes()
	if s.QP, err = s.PD.CreateQP(&verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: Depth, MaxRecvWR: RecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: inline}}); err != nil {
		return nil, err
	}
	if s.GID, s.GIDIndex, err = sourceGID(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// sourceGID is the GID a QP of ctx sends from and its index: index 1 of a
// softrdma RoCEv2 device (its address; index 0 is the link-local
// address), the only one, index 0, of a device with one GID (shared
// memory).
func sourceGID(ctx verbs.Context) (verbs.GID, int, error) {
	port, err := ctx.QueryPort(1)
	if err != nil {
		return verbs.GID{}, 0, err
	}
	idx := min(1, port.GIDTblLen-1)
	g, err := ctx.QueryGID(1, idx)
	return g, idx, err
}

// Close releases the side's objects (not the context).
func (s *Side) Close() {
	if s.QP != nil {
		s.QP.Destroy()
	}
	if s.MR != nil {
		s.MR.Dereg()
	}
	for _, cq := range []verbs.CQ{s.SendCQ, s.RecvCQ} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if s.PD != nil {
		s.PD.Dealloc()
	}
}

// endpoint is the engine's view of s, towards peer.
func (s *Side) endpoint(peer *Side) *Endpoint {
	return &Endpoint{Ctx: s.Ctx, QPs: []verbs.QP{s.QP}, SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, LKey: s.MR.LKey(),
		Buf: s.Buf, Base: s.MR.Addr(), Layout: s.layout,
		Remote: []Remote{{VAddr: peer.MR.Addr() + peer.layout.VAddrOff(0), RKey: peer.MR.RKey()}}}
}

// Connect moves both QPs to RTS towards each other.
func Connect(a, b *Side, mtu verbs.MTU) error { return ConnectSecure(a, b, mtu, 0) }

// connectQP moves qp to RTS towards peer at peerGID, sending from GID
// index gidIndex and PSN sq
// and receiving from rq, with ConnectSecure's parameters.
func connectQP(qp, peer verbs.QP, gidIndex int, peerGID verbs.GID, mtu verbs.MTU, sq, rq uint32) error {
	p := perftestParams(mtu, gidIndex)
	return cm.Connect(qp, cm.Endpoint{QPN: qp.QPNum(), PSN: sq}, cm.Endpoint{QPN: peer.QPNum(), PSN: rq, GID: peerGID}, &p)
}

// perftestParams are the QP parameters perftest uses, sending from GID
// index gidIndex.
func perftestParams(mtu verbs.MTU, gidIndex int) cm.Params {
	p := cm.DefaultParams()
	p.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	p.PathMTU, p.SGIDIndex, p.MaxRdAtomic, p.MaxDestRdAtomic = mtu, uint8(gidIndex), 16, 16
	return p
}

// ConnectSecure is Connect with the QPs protecting their packets in mode
// (verbs.Securer) under a fresh random secret; mode 0 is plain RoCEv2.
// The parameters are perftest's (timeout 14, 7 retries, 7 RNR retries, 16
// outstanding READs/atomics each way).
func ConnectSecure(a, b *Side, mtu verbs.MTU, mode verbs.SecurityMode) error {
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return err
	}
	ea := cm.Endpoint{QPN: a.QP.QPNum(), PSN: 0x1000, GID: a.GID}
	eb := cm.Endpoint{QPN: b.QP.QPNum(), PSN: 0x2000, GID: b.GID}
	for _, s := range []struct {
		side          *Side
		qp            verbs.QP
		local, remote cm.Endpoint
		initiator     bool
	}{{a, a.QP, ea, eb, true}, {b, b.QP, eb, ea, false}} {
		p := perftestParams(mtu, s.side.GIDIndex)
		if err := cm.Init(s.qp, &p); err != nil {
			return err
		}
		if mode != 0 {
			sq, ok := s.qp.(verbs.Securer)
			if !ok {
				return fmt.Errorf("bench: this provider's QPs cannot protect packets: %w", verbs.ErrNotSupported)
			}
			if err := sq.Secure(verbs.Security{Mode: mode, Secret: secret, Initiator: s.initiator}); err != nil {
				return err
			}
		}
		if err := cm.ReadyToReceive(s.qp, s.remote, &p); err != nil {
			return err
		}
		if err := cm.ReadyToSend(s.qp, s.local, &p); err != nil {
			return err
		}
	}
	return nil
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
	Stalls                                   Stalls // as in BWResult
}

// test is the engine's parameters for cfg, with perftest's defaults: tx
// depth 128, cq_mod 100 (1 above 8 KiB), no peak above 20000 messages.
func (cfg Config) test(verb perftest.Verb, role perftest.Role) *Test {
	t := &Test{Verb: verb, Role: role, Size: uint64(cfg.Size), Iters: uint64(cfg.Iters),
		TxDepth: Depth, RxDepth: min(RecvDepth, cfg.Iters), CQMod: 100, NoPeak: cfg.Iters > 20000,
		Inline: inline, Block: cfg.Block, StallTimeout: 10 * time.Second}
	if cfg.Size > 8192 {
		t.CQMod = 1
	}
	return t
}

// checkSize checks that a message of size bytes fits both sides' buffers.
func checkSize(a, b *Side, size int) error {
	if room := min(a.layout.BuffSize, b.layout.BuffSize); size < 1 || uint64(size) > room {
		return fmt.Errorf("bench: size %d must be 1..%d", size, room)
	}
	return nil
}

func (o Op) verb() perftest.Verb {
	switch o {
	case Read:
		return perftest.Read
	case Send:
		return perftest.Send
	}
	return perftest.Write
}

// BW measures bandwidth from a to b with the engine's BWRun, as ib_*_bw
// does: a keeps up to Depth operations outstanding; for SEND, b runs
// perftest's receiving loop in a goroutine and a posts a SEND only against
// a receive b has posted (Test.Credits).
func BW(a, b *Side, cfg Config) (BWResult, error) {
	if err := checkSize(a, b, cfg.Size); err != nil {
		return BWResult{}, err
	}
	if cfg.Iters < 1 {
		return BWResult{}, fmt.Errorf("bench: %d iterations", cfg.Iters)
	}
	verb := cfg.Op.verb()
	ct := cfg.test(verb, perftest.Client)
	client := NewBWRun(ct, a.endpoint(b))
	client.SetSendWQEs()
	recvDone := make(chan error, 1)
	if verb == perftest.Send {
		b.credits.Store(0)
		st := cfg.test(verb, perftest.Server)
		ct.Credits, st.Credits = &b.credits, &b.credits
		server := NewBWRun(st, b.endpoint(a))
		if err := server.SetRecvWQEs(); err != nil {
			return BWResult{}, err
		}
		go func() { recvDone <- server.RunServer() }()
	}
	cpu0 := cpuTime()
	start := time.Now()
	err := client.Run()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	if verb == perftest.Send {
		if rerr := <-recvDone; err == nil {
			err = rerr
		}
	}
	if err != nil {
		return BWResult{}, err
	}
	rep, err := client.Report()
	if err != nil {
		return BWResult{}, err
	}
	return BWResult{Config: cfg, Elapsed: elapsed, PeakMBps: rep.BWPeak, AvgMBps: rep.BWAvg, MsgRate: rep.MsgRate, CPUTime: cpu}, nil
}

// Lat measures latency between a and b with cfg.Iters exchanges, with the
// engine's LatRun: WRITE and SEND ping-pong between a (the client) and b
// (the server) in two goroutines, READ from a alone.
func Lat(a, b *Side, cfg Config) (LatResult, error) {
	if err := checkSize(a, b, cfg.Size); err != nil {
		return LatResult{}, err
	}
	if cfg.Iters < 5 {
		return LatResult{}, fmt.Errorf("bench: %d round trips; latency needs at least 5", cfg.Iters)
	}
	verb := cfg.Op.verb()
	ct, st := cfg.test(verb, perftest.Client), cfg.test(verb, perftest.Server)
	ct.CQMod, st.CQMod = 1, 1 // every SEND signaled, as the SEND latency test does
	client, server := NewLatRun(ct, a.endpoint(b)), NewLatRun(st, b.endpoint(a))
	var run func(*LatRun) error
	switch verb {
	case perftest.Write:
		// Each side polls the last byte of its receive region for the
		// iteration number: start from zero, whatever ran before.
		clear(a.Buf)
		clear(b.Buf)
		run = (*LatRun).RunWrite
	case perftest.Send:
		for _, l := range []*LatRun{client, server} {
			if err := l.SetRecvWQEs(); err != nil {
				return LatResult{}, err
			}
		}
		run = (*LatRun).RunSend
	}
	done := make(chan error, 1)
	if run != nil {
		go func() { done <- run(server) }()
	} else {
		done <- nil
		run = (*LatRun).RunRead
	}
	err := run(client)
	if serr := <-done; err == nil {
		err = serr
	}
	if err != nil {
		return LatResult{}, err
	}
	s, _, err := client.Stats()
	if err != nil {
		return LatResult{}, err
	}
	us := func(v float64) time.Duration { return time.Duration(v * 1e3) }
	return LatResult{Config: cfg, Min: us(s.TMin), Max: us(s.TMax), Typical: us(s.TTypical), Avg: us(s.TAvg),
		Stdev: us(s.TStdev), P99: us(s.P99), P999: us(s.P999)}, nil
}
