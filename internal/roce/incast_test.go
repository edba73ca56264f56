package roce

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/verbs"
)

// The incast: N senders, each with its own 10 Gbit/s link and one RC QP,
// stream long WRITEs to one receiver behind a switch port of 10 Gbit/s
// with a shallow buffer and RED/ECN marking, while a probe QP on a host
// of its own measures the latency of small WRITEs through the same port.
// All in virtual time (testing/synctest).

// incastSetup is one incast run's parameters.
type incastSetup struct {
	senders int
	cc      CCAlgorithm
	flows   bool          // false: the probe alone (its idle latency)
	measure time.Duration // the measured interval, after warm-up
	seed    uint64
	red     *netsim.Switch // the port's marking curve; nil: incastRED
	params  CCConfig       // DCQCN's parameters (Algorithm and LineRate are set)
}

// incastRED is the port's marking curve: ECN marks from 5 KB of queue
// (the DCQCN paper's Kmin), rising linearly to every ECT packet at 40 KB.
// The paper's own curve (Kmax 200 KB, Pmax 1 %) marks one packet in a
// hundred at most below 200 KB: with 16 flows of 4 KB packets at
// 10 Gbit/s that is too few CNPs to hold the queue, which then swings
// around 200 KB (docs/congestion.md has both).
var incastRED = netsim.Switch{Kmin: 5_000, Kmax: 40_000, Pmax: 1}

// paperRED is the DCQCN paper's marking curve.
var paperRED = netsim.Switch{Kmin: 5_000, Kmax: 200_000, Pmax: 0.01}

// Link and switch of the incast: 10 Gbit/s everywhere, a 1 MB port
// buffer, the DCQCN paper's marking curve (Kmin 5 KB, Kmax 200 KB,
// Pmax 1 %), 2 µs from host to switch and from switch to host.
const (
	incastRate   = 10_000_000_000 / 8 // bytes per second
	incastBuffer = 1 << 20
	incastDelay  = 2 * time.Microsecond
	incastMsg    = 64 << 10 // bytes per WRITE
	incastDepth  = 16       // WRITEs each sender keeps outstanding
	// The warm-up covers the start: every sender begins at its line
	// rate, 16 MB or more meet a 1 MB buffer before the first CNP can
	// come back, and the losses are recovered by go-back-N, the last of
	// them after a local ACK timeout (16.8 ms). What follows is the
	// steady state that is measured; the start's losses are reported
	// apart (startDrops, startRetransmitted).
	incastWarmup = 50 * time.Millisecond
	probeEvery   = 50 * time.Microsecond
	probeSize    = 64
)

// incastResult is what one run measured.
type incastResult struct {
	setup         incastSetup
	goodput       float64 // fraction of the link carrying first-time WRITE bytes that completed
	fairness      float64 // Jain's index over the senders' goodputs
	maxQueue      int     // bytes
	meanQueue     float64 // bytes, as arrivals found it
	probeP50      time.Duration
	probeP99      time.Duration
	probes        int
	retransmitted uint64 // bytes sent again (packets × path MTU)
	retryExceeded int    // WRITEs (flows' and probe's) that failed with retry exceeded
	otherErrors   int
	cnpsSent      uint64
	cnpsRcvd      uint64
	rateCuts      uint64
	marked        uint64
	drops         uint64 // switch drops: tail and RED
	minRate       int64  // the lowest rate of any sender at a probe (bits/s)
	// What the warm-up (the start of the incast) cost.
	startDrops         uint64
	startRetransmitted uint64
}

func (r incastResult) String() string {
	cc := r.setup.cc.String()
	return fmt.Sprintf("%d→1 cc=%s: goodput %.1f%% of link, fairness %.3f, queue max %d B mean %.0f B, probe p50 %v p99 %v (%d), retransmitted %d B, retry-exceeded %d, other errors %d, CNPs sent %d rcvd %d, cuts %d, marked %d, switch drops %d; start: %d drops, %d B retransmitted",
		r.setup.senders, cc, 100*r.goodput, r.fairness, r.maxQueue, r.meanQueue, r.probeP50, r.probeP99, r.probes,
		r.retransmitted, r.retryExceeded, r.otherErrors, r.cnpsSent, r.cnpsRcvd, r.rateCuts, r.marked, r.drops, r.startDrops, r.startRetransmitted)
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when
// one takes everything.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// runIncast runs one incast inside a synctest bubble of its own.
func runIncast(t *testing.T, s incastSetup) incastResult {
	var res incastResult
	synctest.Test(t, func(t *testing.T) { res = incast(t, s) })
	return res
}

func incast(t *testing.T, s incastSetup) incastResult {
	net := netsim.New(netsim.Config{Delay: incastDelay, Bandwidth: incastRate, MTU: 4200, Seed: s.seed, QueueLimit: 1 << 16})
	t.Cleanup(net.Close)
	rcvAddr := netip.MustParseAddr("10.0.0.100")
	red := incastRED
	if s.red != nil {
		red = *s.red
	}
	red.Rate, red.Buffer = incastRate, incastBuffer
	must(t, net.SetSwitch(rcvAddr, red))
	ccfg := s.params
	ccfg.Algorithm, ccfg.LineRate = s.cc, incastRate*8
	o := defaultOpts()
	o.mtu = verbs.MTU4096
	o.timeout = 12 // 16.8 ms
	o.retry = 7
	o.sendWR = incastDepth + 1
	endpoint := func(a netip.Addr) *netsim.Endpoint {
		e, err := net.Endpoint(a)
		must(t, err)
		return e
	}
	nflows := s.senders
	if !s.flows {
		nflows = 0
	}
	// The receiver: one QP per sender, then the probe's.
	rcv := newManyQPsWith(t, Config{Transport: endpoint(rcvAddr), CC: ccfg}, nflows+1, (nflows+1)*incastMsg, o)
	senders := make([]*manyQPs, nflows+1)
	for i := range senders {
		a := netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
		senders[i] = newManyQPsWith(t, Config{Transport: endpoint(a), CC: ccfg}, 1, incastMsg, o)
		connectOne(t, senders[i], rcv, i, o)
	}
	probe := senders[nflows]

	start := time.Now()
	measureFrom := start.Add(incastWarmup)
	stop := measureFrom.Add(s.measure)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var mu sync.Mutex
	goodBytes := make([]float64, nflows)
	retryExc, otherErr := 0, 0
	fail := func(st verbs.WCStatus) {
		mu.Lock()
		defer mu.Unlock()
		if st == verbs.WCRetryExcErr {
			retryExc++
		} else {
			otherErr++
		}
	}
	var wg sync.WaitGroup
	for i := range nflows {
		m := senders[i]
		wg.Go(func() {
			qp := m.qps[0]
			post := func(id uint64) error {
				return qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{m.mr.SGE(0, incastMsg)}, RemoteAddr: rcv.mr.Addr() + uint64(i*incastMsg), RKey: rcv.mr.RKey()})
			}
			out := 0
			for ; out < incastDepth; out++ {
				if post(uint64(out)) != nil {
					return
				}
			}
			wcs := make([]verbs.WC, 32)
			for out > 0 {
				k, err := m.cq.Poll(wcs)
				if err != nil {
					return
				}
				if k == 0 {
					if m.cq.Wait(ctx) != nil {
						return
					}
					continue
				}
				now := time.Now()
				for _, wc := range wcs[:k] {
					out--
					if wc.Status != verbs.WCSuccess {
						fail(wc.Status)
						continue
					}
					if !now.Before(measureFrom) && now.Before(stop) {
						mu.Lock()
						goodBytes[i] += incastMsg
						mu.Unlock()
					}
					if now.Before(stop) && post(wc.WRID) == nil {
						out++
					}
				}
			}
		})
	}
	// The probe: a small WRITE every probeEvery, one at a time, from
	// the end of warm-up to the end of the measured interval. It also
	// takes the warm-up's figures and starts the measurement.
	var lat []time.Duration
	minRate := int64(incastRate * 8) // the lowest rate a sender had at a probe
	var startStats netsim.SwitchStats
	var startRetx, startCNPs, startRcvd, startCuts uint64
	counted := func(f func(c *Counters) uint64) (sum uint64) {
		for _, m := range senders {
			sum += f(&m.dev.Counters)
		}
		return sum
	}
	wg.Go(func() {
		qp := probe.qps[0]
		wcs := make([]verbs.WC, 1)
		time.Sleep(time.Until(measureFrom))
		startStats = net.SwitchStats(rcvAddr)
		net.ResetSwitchStats(rcvAddr)
		startRetx = counted(func(c *Counters) uint64 { return c.Retransmits.Load() })
		startRcvd = counted(func(c *Counters) uint64 { return c.CNPsRcvd.Load() })
		startCuts = counted(func(c *Counters) uint64 { return c.CCRateCuts.Load() })
		startCNPs = rcv.dev.Counters.CNPsSent.Load()
		for id := uint64(0); time.Now().Before(stop); id++ {
			t0 := time.Now()
			if qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{probe.mr.SGE(0, probeSize)}, RemoteAddr: rcv.mr.Addr() + uint64(nflows*incastMsg), RKey: rcv.mr.RKey()}) != nil {
				return
			}
			for {
				k, err := probe.cq.Poll(wcs)
				if err != nil {
					return
				}
				if k == 1 {
					break
				}
				if probe.cq.Wait(ctx) != nil {
					return
				}
			}
			if wcs[0].Status != verbs.WCSuccess {
				fail(wcs[0].Status)
				return
			}
			lat = append(lat, time.Since(t0))
			for _, m := range senders[:nflows] {
				if r := m.qps[0].(*QP).CCState(); r.Limited {
					minRate = min(minRate, r.Rate)
				}
			}
			time.Sleep(time.Until(t0.Add(probeEvery)))
		}
	})
	wg.Wait()

	res := incastResult{setup: s, probes: len(lat), retryExceeded: retryExc, otherErrors: otherErr}
	var total float64
	for _, b := range goodBytes {
		total += b
	}
	res.goodput = total / (incastRate * s.measure.Seconds())
	res.fairness = jain(goodBytes)
	st := net.SwitchStats(rcvAddr)
	res.maxQueue, res.meanQueue, res.marked, res.drops = st.MaxQueue, st.MeanQueue(), st.Marked, st.TailDrops+st.REDDrops
	if len(lat) > 0 {
		slices.Sort(lat)
		res.probeP50 = lat[len(lat)/2]
		res.probeP99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	res.minRate = minRate
	// Packets are counted until the end of the run: the measured
	// interval and the drain after it.
	res.retransmitted = (counted(func(c *Counters) uint64 { return c.Retransmits.Load() }) - startRetx) * 4096
	res.cnpsRcvd = counted(func(c *Counters) uint64 { return c.CNPsRcvd.Load() }) - startRcvd
	res.rateCuts = counted(func(c *Counters) uint64 { return c.CCRateCuts.Load() }) - startCuts
	res.cnpsSent = rcv.dev.Counters.CNPsSent.Load() - startCNPs
	res.startDrops = startStats.TailDrops + startStats.REDDrops
	res.startRetransmitted = startRetx * 4096
	return res
}

// connectOne connects sender m's only QP with the receiver's i-th QP,
// both ways.
func connectOne(t *testing.T, m, rcv *manyQPs, i int, o qpOpts) {
	t.Helper()
	ga, err := m.dev.QueryGID(1, 1)
	must(t, err)
	gb, err := rcv.dev.QueryGID(1, 1)
	must(t, err)
	p := cm.Params{
		Port: 1, Access: o.access, PathMTU: o.mtu, SGIDIndex: 1, HopLimit: 64,
		Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MinRNRTimer: o.minRNRTimer,
		MaxRdAtomic: o.rdAtomic, MaxDestRdAtomic: o.rdAtomic,
	}
	ea := cm.Endpoint{QPN: m.qps[0].QPNum(), PSN: uint32(0xFFFF00+i) & 0xFFFFFF, GID: ga}
	eb := cm.Endpoint{QPN: rcv.qps[i].QPNum(), PSN: uint32(0x100 * i), GID: gb}
	must(t, cm.Connect(m.qps[0], ea, eb, &p))
	must(t, cm.Connect(rcv.qps[i], eb, ea, &p))
}

// TestIncastDCQCN: with DCQCN, 16 senders into one port share it at
// nearly its rate, fairly, with no QP out of retries and a probe whose
// tail latency stays within 10× its idle value; the receiver sent CNPs
// and the senders cut their rates. Without congestion control the same
// incast loses packets at the port and retransmits (what CC buys).
func TestIncastDCQCN(t *testing.T) {
	const measure = 100 * time.Millisecond
	idle := runIncast(t, incastSetup{senders: 16, cc: CCDCQCN, measure: 10 * time.Millisecond, seed: 1})
	t.Logf("idle probe: p50 %v p99 %v (%d probes)", idle.probeP50, idle.probeP99, idle.probes)
	on := runIncast(t, incastSetup{senders: 16, cc: CCDCQCN, flows: true, measure: measure, seed: 1})
	t.Log(on)
	off := runIncast(t, incastSetup{senders: 16, cc: CCOff, flows: true, measure: measure, seed: 1})
	t.Log(off)

	if on.cnpsSent == 0 || on.cnpsRcvd == 0 || on.rateCuts == 0 || on.marked == 0 {
		t.Errorf("with DCQCN: %d packets marked, %d CNPs sent, %d received, %d rate cuts: the loop never closed", on.marked, on.cnpsSent, on.cnpsRcvd, on.rateCuts)
	}
	if on.retryExceeded != 0 || on.otherErrors != 0 {
		t.Errorf("with DCQCN: %d WRITEs out of retries, %d other errors", on.retryExceeded, on.otherErrors)
	}
	// The goals are 90 %, 0.95 and 10×; the margins absorb the
	// scheduling of goroutines that are runnable at the same virtual
	// instant, which varies between runs.
	if on.goodput < 0.88 {
		t.Errorf("with DCQCN: goodput %.1f%% of the link, want ≥ 88%%", 100*on.goodput)
	}
	if on.fairness < 0.9 {
		t.Errorf("with DCQCN: Jain's fairness %.3f, want ≥ 0.9", on.fairness)
	}
	if on.probeP99 > 15*idle.probeP99 {
		t.Errorf("with DCQCN: probe p99 %v, more than 15× its idle %v", on.probeP99, idle.probeP99)
	}
	if on.retransmitted != 0 || on.drops != 0 {
		t.Errorf("with DCQCN: %d switch drops and %d bytes retransmitted in the steady state", on.drops, on.retransmitted)
	}
	if on.minRate >= incastRate*8/2 {
		t.Errorf("with DCQCN: the slowest sender runs at %d bit/s: no rate was cut below half the line rate", on.minRate)
	}
	if off.marked != 0 || off.cnpsSent != 0 {
		t.Errorf("without CC: %d packets marked, %d CNPs sent: packets must leave not ECN-capable", off.marked, off.cnpsSent)
	}
	if off.drops == 0 || off.retransmitted <= on.retransmitted {
		t.Errorf("without CC: %d switch drops, %d bytes retransmitted (with DCQCN %d): the incast shows nothing", off.drops, off.retransmitted, on.retransmitted)
	}
	if off.fairness >= on.fairness || off.probeP99 <= on.probeP99 {
		t.Errorf("without CC: fairness %.3f and probe p99 %v, with DCQCN %.3f and %v: CC bought nothing", off.fairness, off.probeP99, on.fairness, on.probeP99)
	}
}

// TestIncastTable runs the 16→1 and 64→1 incasts with and without DCQCN
// and prints the table docs/congestion.md shows. It is the incast's
// benchmark: a Go benchmark cannot run in a synctest bubble, and the
// figures are of virtual time, so they are the same on every machine.
// Slow (tens of seconds): it runs with SOFTRDMA_INCAST_TABLE=1 only.
func TestIncastTable(t *testing.T) {
	if os.Getenv("SOFTRDMA_INCAST_TABLE") == "" {
		t.Skip("set SOFTRDMA_INCAST_TABLE=1 to run the incast table")
	}
	type run struct {
		n      int
		red    netsim.Switch
		params CCConfig
		name   string
	}
	var rows []string
	for _, r := range []run{
		{16, incastRED, CCConfig{}, "5-40 KB, 100 %; paper"},
		{64, incastRED, CCConfig{}, "5-40 KB, 100 %; paper"},
		{16, incastRED, mlx5Like, "5-40 KB, 100 %; mlx5-like"},
		{64, incastRED, mlx5Like, "5-40 KB, 100 %; mlx5-like"},
		{16, paperRED, CCConfig{}, "5-200 KB, 1 %; paper"},
		{16, incastRED, CCConfig{Algorithm: CCDelay}, "5-40 KB, 100 %; delay, target 25 µs"},
		{64, incastRED, CCConfig{Algorithm: CCDelay}, "5-40 KB, 100 %; delay, target 25 µs"},
	} {
		idle := runIncast(t, incastSetup{senders: r.n, cc: CCDCQCN, measure: 10 * time.Millisecond, seed: 1, red: &r.red, params: r.params})
		algs := []CCAlgorithm{CCDCQCN, CCOff}
		if r.params.Algorithm == CCDelay {
			algs = []CCAlgorithm{CCDelay}
		}
		for _, cc := range algs {
			if cc == CCOff && r.params != (CCConfig{}) {
				continue // the same as with the paper's parameters
			}
			res := runIncast(t, incastSetup{senders: r.n, cc: cc, flows: true, measure: 100 * time.Millisecond, seed: 1, red: &r.red, params: r.params})
			t.Log(res)
			rows = append(rows, fmt.Sprintf("| %d→1 | %s | %v | %.1f %% | %.3f | %d / %.0f | %v (%.1f× idle %v) | %d | %d | %d / %d | %d / %d |",
				r.n, r.name, cc, 100*res.goodput, res.fairness, res.maxQueue, res.meanQueue, res.probeP99.Round(100*time.Nanosecond),
				float64(res.probeP99)/float64(max(idle.probeP99, 1)), idle.probeP99, res.retransmitted, res.retryExceeded, res.cnpsSent, res.rateCuts,
				res.startDrops, res.startRetransmitted))
		}
	}
	t.Log("\n| incast | marking; DCQCN parameters | CC | goodput (of link) | Jain's fairness | queue max / mean (B) | probe p99 | retransmitted (B) | retry-exceeded | CNPs / rate cuts | start: drops / retransmitted (B) |\n|---|---|---|---|---|---|---|---|---|---|---|\n" + strings.Join(rows, "\n"))
}

// mlx5Like are the increase parameters of mlx5's defaults (rpg_ai_rate
// 5 Mbit/s, rpg_hai_rate 50 Mbit/s, rpg_time_reset 300 µs): gentler than
// the paper's, which suits many flows per port.
var mlx5Like = CCConfig{AIRate: 5_000_000, HAIRate: 50_000_000, RateTimer: 300 * time.Microsecond}
