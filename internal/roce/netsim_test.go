package roce

import (
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/verbs"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

// runNetsim runs one suite case on a simulated network in virtual time.
func runNetsim(t *testing.T, cfg netsim.Config, c suiteCase) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		if c.opts != nil {
			c.opts(&o)
		}
		n := netsim.New(cfg)
		t.Cleanup(n.Close)
		ea, err := n.Endpoint(addrA)
		must(t, err)
		eb, err := n.Endpoint(addrB)
		must(t, err)
		a, b := pair(t, ea, eb, o)
		t.Cleanup(func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("network: %+v", n.Stats())
				t.Logf("a: %v", nonZero(a.dev))
				t.Logf("b: %v", nonZero(b.dev))
			}
		})
		c.run(t, a, b)
	})
}

func nonZero(d *Device) []Counter {
	var out []Counter
	for _, c := range d.Counters.Snapshot() {
		if c.Value != 0 {
			out = append(out, c)
		}
	}
	return out
}

func TestSuiteNetsim(t *testing.T) {
	for _, c := range slices.Concat(basicSuite, mwSuite) {
		t.Run(c.name, func(t *testing.T) {
			runNetsim(t, netsim.Config{Delay: 5 * time.Microsecond, Seed: 1, MTU: 9000}, c)
		})
	}
}

// TestReliabilityNetsim: under 10% loss plus reordering, duplication and 2%
// corruption (caught by the ICRC) in
// both directions, every message arrives once, in order, with its bytes,
// and N fetch-adds add exactly N.
func TestReliabilityNetsim(t *testing.T) {
	for _, seed := range reliabilitySeeds() {
		for _, c := range reliabilitySuite {
			t.Run(c.name+"/"+seedName(seed), func(t *testing.T) {
				runNetsim(t, netsim.Config{
					Loss: 0.10, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.02, ReorderDelay: 30 * time.Microsecond,
					Delay: 5 * time.Microsecond, Jitter: 3 * time.Microsecond, Seed: seed,
				}, c)
			})
		}
	}
}

// TestRetryExceeded: a peer that never answers exhausts retry_cnt.
func TestRetryExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := defaultOpts()
		o.retry = 3
		n := netsim.New(netsim.Config{Seed: 1})
		ea, _ := n.Endpoint(addrA)
		eb, _ := n.Endpoint(addrB)
		a, b := pair(t, ea, eb, o)
		n.SetConfig(netsim.Config{Loss: 1, Seed: 1})
		start := time.Now()
		a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCRetryExcErr, 0)
		t.Cleanup(n.Close)
		// 1 + retry_cnt attempts, each waiting the local ACK timeout plus
		// a jitter below a quarter of it.
		want := 4 * 4096 * time.Nanosecond << o.timeout
		if el := time.Since(start); el < want || el >= want+want/4 {
			t.Fatalf("retry exceeded after %v, want about %v", el, want)
		}
		// Four timeouts: three lead to a retransmission, the fourth fails.
		if got, re := a.dev.Counters.Timeouts.Load(), a.dev.Counters.Retransmits.Load(); got != 4 || re != 3 {
			t.Fatalf("%d timeouts and %d retransmissions, want 4 and 3", got, re)
		}
	})
}

// reliabilitySeeds are the seeds the reliability suite runs: 1..3, or
// 1..N with SOFTRDMA_SEEDS=N for a longer soak.
func reliabilitySeeds() []uint64 {
	n := 3
	if v, err := strconv.Atoi(os.Getenv("SOFTRDMA_SEEDS")); err == nil && v > 0 {
		n = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}
