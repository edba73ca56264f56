package roce

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/verbs"
)

// keepalivePair connects two devices with keepalive ka over a simulated
// network, in virtual time.
func keepalivePair(t *testing.T, ka time.Duration, o qpOpts) (*netsim.Network, *node, *node) {
	n := netsim.New(netsim.Config{Delay: 5 * time.Microsecond, Seed: 1})
	t.Cleanup(n.Close)
	ea, err := n.Endpoint(addrA)
	must(t, err)
	eb, err := n.Endpoint(addrB)
	must(t, err)
	a, b := pairWith(t, Config{Transport: ea, Keepalive: ka}, Config{Transport: eb, Keepalive: ka}, o)
	return n, a, b
}

// noWC fails the test if cq holds a completion.
func noWC(t *testing.T, n *node, cq verbs.CQ, what string) {
	t.Helper()
	if k, _ := cq.Poll(n.wcs); k != 0 {
		t.Fatalf("%s: %d completions, first %+v; keepalive probes must post none", what, k, n.wcs[0])
	}
}

// TestKeepaliveIdle: two idle QPs probe each other, answer each other's
// probes, stay in RTS and see no completion; traffic afterwards works.
func TestKeepaliveIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := keepalivePair(t, time.Second, defaultOpts())
		time.Sleep(time.Minute)
		synctest.Wait()
		for _, n := range []*node{a, b} {
			if st := n.qp.State(); st != verbs.QPStateRTS {
				t.Fatalf("an idle QP whose peer answers went to %v", st)
			}
			// 60 s of silence at 1 s: one probe a second or so from
			// whichever side's timer comes first (a probe's ACK is news
			// from the peer for the prober only).
			if p := n.dev.Counters.KeepaliveProbes.Load(); p < 30 || p > 61 {
				t.Fatalf("%d probes in 60 s at a 1 s keepalive", p)
			}
			noWC(t, n, n.scq, "send CQ")
			noWC(t, n, n.rcq, "recv CQ")
		}
		b.postRecv(1, 0, 64)
		a.post(&verbs.SendWR{WRID: 7, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
		expectWC(t, a.waitWC(a.scq), 7, verbs.WCSuccess, verbs.WCSend)
		expectWC(t, b.waitWC(b.rcq), 1, verbs.WCSuccess, verbs.WCRecv)
	})
}

// TestKeepaliveIdleNoRemoteAccess: QPs that grant no remote access
// (perftest's exchange QP, ibv_rc_pingpong's) stay up while idle: their
// peers' probes, zero-length RDMA WRITEs repeating an acknowledged PSN,
// are answered as duplicates, not refused as invalid requests (which
// failed both QPs after 5 s of silence).
func TestKeepaliveIdleNoRemoteAccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.access = verbs.AccessLocalWrite
		_, a, b := keepalivePair(t, time.Second, o)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		for _, n := range []*node{a, b} {
			if st := n.qp.State(); st != verbs.QPStateRTS {
				t.Fatalf("an idle QP without remote access went to %v", st)
			}
			if p := n.dev.Counters.KeepaliveProbes.Load(); p == 0 {
				t.Fatal("no probe in 20 s at a 1 s keepalive")
			}
			if f := n.dev.Counters.KeepaliveFailures.Load(); f != 0 {
				t.Fatalf("%d probes failed", f)
			}
			noWC(t, n, n.scq, "send CQ")
			noWC(t, n, n.rcq, "recv CQ")
		}
	})
}

// TestKeepaliveProbeRepeatsPSN: the probe repeats the last acknowledged
// PSN, so the peer's responder takes it as a duplicate (no access check,
// nothing executed) and its expected PSN does not move; traffic after
// the idle spell goes on with the PSNs it had, before and after the
// first request (a responder with no request yet answers the probe too).
func TestKeepaliveProbeRepeatsPSN(t *testing.T) {
	for _, sendFirst := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			o := defaultOpts()
			o.access = verbs.AccessLocalWrite
			_, a, b := keepalivePair(t, time.Second, o)
			send := func(id uint64) {
				b.postRecv(id, 0, 64)
				a.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
				expectWC(t, a.waitWC(a.scq), id, verbs.WCSuccess, 0)
				expectWC(t, b.waitWC(b.rcq), id, verbs.WCSuccess, verbs.WCRecv)
			}
			if sendFirst {
				send(1)
			}
			dup := b.dev.Counters.DuplicateRequest.Load()
			time.Sleep(10 * time.Second)
			synctest.Wait()
			probes := a.dev.Counters.KeepaliveProbes.Load()
			if probes == 0 {
				t.Fatal("a sent no probe in 10 s at a 1 s keepalive")
			}
			if d := b.dev.Counters.DuplicateRequest.Load() - dup; d < probes {
				t.Fatalf("b counted %d duplicates for a's %d probes; every probe must be one", d, probes)
			}
			if r := a.dev.Counters.Retransmits.Load(); r != 0 {
				t.Fatalf("%d retransmits counted; a probe is not one", r)
			}
			send(2)
			send(3)
			for _, n := range []*node{a, b} {
				if st := n.qp.State(); st != verbs.QPStateRTS {
					t.Fatalf("state %v after the idle spell", st)
				}
			}
		})
	}
}

// TestKeepaliveDeadPeer: an idle QP whose peer stops answering goes to ERR
// within the keepalive interval plus its retries, with EventQPFatal and
// without a completion for the probe; work the application posted while
// the probe was out is flushed, and a full send queue still takes it.
func TestKeepaliveDeadPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.sendWR = 4
		const ka = 2 * time.Second
		nw, a, b := keepalivePair(t, ka, o)
		_ = b
		time.Sleep(10 * time.Second) // a few rounds of probes, answered
		synctest.Wait()
		nw.SetConfig(netsim.Config{Loss: 1, Seed: 1}) // the peer dies
		start := time.Now()
		time.Sleep(ka + time.Millisecond) // a's probe is out
		synctest.Wait()
		for i := range uint64(4) { // Cap.MaxSendWR, despite the probe
			a.post(&verbs.SendWR{WRID: 10 + i, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		}
		for i := range uint64(4) {
			expectWC(t, a.waitWC(a.scq), 10+i, verbs.WCWRFlushErr, 0)
		}
		noWC(t, a, a.scq, "send CQ after the flushes")
		if st := a.qp.State(); st != verbs.QPStateErr {
			t.Fatalf("QP in %v after the probe's retries, want ERR", st)
		}
		// Up to ka of silence, then 1 + retry_cnt local ACK timeouts of
		// at most 1.25 × 4.096 µs × 2^timeout each.
		bound := ka + time.Duration(o.retry+1)*(4096*time.Nanosecond<<o.timeout)*5/4
		if el := time.Since(start); el > bound {
			t.Fatalf("dead peer found after %v, want at most %v", el, bound)
		}
		select {
		case ev := <-a.dev.AsyncEvents():
			if ev.Type != verbs.EventQPFatal || ev.QP != a.qp {
				t.Fatalf("event %v, want QP_FATAL for the QP", ev.Type)
			}
		default:
			t.Fatal("no asynchronous event for the QP whose probe failed")
		}
		if f := a.dev.Counters.KeepaliveFailures.Load(); f != 1 {
			t.Fatalf("keepalive_failures %d, want 1", f)
		}
	})
}

// TestKeepaliveOff: a negative Keepalive sends no probe, and a silent peer
// goes unnoticed, as before keepalive existed.
func TestKeepaliveOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw, a, b := keepalivePair(t, -1, defaultOpts())
		nw.SetConfig(netsim.Config{Loss: 1, Seed: 1})
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		for _, n := range []*node{a, b} {
			if p := n.dev.Counters.KeepaliveProbes.Load(); p != 0 {
				t.Fatalf("%d probes with keepalive off", p)
			}
			if st := n.qp.State(); st != verbs.QPStateRTS {
				t.Fatalf("QP in %v with keepalive off", st)
			}
		}
	})
}

// TestKeepaliveBusy: a QP that hears from its peer all the time never
// probes.
func TestKeepaliveBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := keepalivePair(t, time.Second, defaultOpts())
		for i := range uint64(40) {
			a.post(&verbs.SendWR{WRID: i, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			expectWC(t, a.waitWC(a.scq), i, verbs.WCSuccess, verbs.WCRDMAWrite)
			time.Sleep(500 * time.Millisecond)
		}
		if p := a.dev.Counters.KeepaliveProbes.Load(); p != 0 {
			t.Fatalf("a busy QP sent %d probes", p)
		}
	})
}

// TestKeepaliveProbeReset: a QP reset while its probe is out reuses the
// probe's slot for the application's work, which completes as usual.
func TestKeepaliveProbeReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		nw, a, b := keepalivePair(t, time.Second, o)
		nw.SetConfig(netsim.Config{Loss: 1, Seed: 1})
		time.Sleep(time.Second + time.Millisecond) // a's probe is out
		synctest.Wait()
		if a.dev.Counters.KeepaliveProbes.Load() == 0 {
			t.Fatal("no probe")
		}
		must(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState))
		must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState))
		nw.SetConfig(netsim.Config{Delay: 5 * time.Microsecond, Seed: 1})
		connect(t, a, b, o)
		connect(t, b, a, o)
		a.post(&verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.waitWC(a.scq), 5, verbs.WCSuccess, verbs.WCRDMAWrite)
	})
}
