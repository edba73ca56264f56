package device

import (
	"context"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/provider/soft"
)

func TestReadEnv(t *testing.T) {
	vars := map[string]string{
		"SOFTRDMA_ADDR": "127.0.0.9", "SOFTRDMA_DEVICE": "shm1", "SOFTRDMA_LOG": "1",
		"SOFTRDMA_TRACE": "t.out", "SOFTRDMA_CPUPROFILE": "cpu.pprof", "SOFTRDMA_COUNTERS": "c.txt", "SOFTRDMA_NO_PROGRESS": "yes", "SOFTRDMA_SPIN_POLLS": "-1",
		"SOFTRDMA_NO_INLINE_POLL": "1", "SOFTRDMA_NO_DEFERRED_ACK": "1", "SOFTRDMA_NO_GATHER": "1",
		"SOFTRDMA_NO_SPLIT_WRITES": "0", "SOFTRDMA_SPLIT_WRITES": "always", "SOFTRDMA_CC": "off",
		"SOFTRDMA_EVENT_SPIN": "20us",
	}
	e, err := ReadEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Env{Addr: "127.0.0.9", Device: "shm1", Log: true, Trace: "t.out", CPUProfile: "cpu.pprof", Counters: "c.txt", NoProgress: true, SpinPolls: -1,
		NoInlinePoll: true, NoDeferredAck: true, NoGather: true, SplitWritesAlways: true, CC: soft.CCOff, CCSet: true,
		EventSpin: 20 * time.Microsecond, EventSpinSet: true}
	if e != want {
		t.Fatalf("ReadEnv: %+v, want %+v", e, want)
	}
	cfg := soft.Config{SpinPolls: 500, NoSplitWrites: true}
	e.Tune(&cfg)
	if cfg.SpinPolls != 500 || !cfg.NoSplitWrites || !cfg.NoInlinePoll || !cfg.NoDeferredAck || !cfg.NoGather || !cfg.SplitWritesAlways || cfg.CC.Algorithm != soft.CCOff {
		t.Fatalf("Tune: %+v: want the code's SpinPolls and NoSplitWrites kept, the environment's switches on", cfg)
	}
	var zero soft.Config
	(&Env{}).Tune(&zero)
	if zero.SpinPolls != 0 || zero.NoInlinePoll || zero.NoDeferredAck || zero.NoGather || zero.NoSplitWrites || zero.SplitWritesAlways || zero.CC != (soft.CongestionControl{}) {
		t.Fatalf("an empty environment changed the config: %+v", zero)
	}
	for _, v := range []string{"0", "0s"} {
		e, err := ReadEnv(func(k string) string {
			if k == "SOFTRDMA_EVENT_SPIN" {
				return v
			}
			return ""
		})
		if err != nil || e.EventSpin != 0 || !e.EventSpinSet {
			t.Errorf("SOFTRDMA_EVENT_SPIN=%s: %v, %v set %v; want 0, set", v, err, e.EventSpin, e.EventSpinSet)
		}
	}
}

// A value that does not parse is an error naming the variable, not a
// setting silently ignored.
func TestReadEnvErrors(t *testing.T) {
	for k, v := range map[string]string{
		"SOFTRDMA_SPIN_POLLS": "many", "SOFTRDMA_NO_GATHER": "yes", "SOFTRDMA_SPLIT_WRITES": "sometimes", "SOFTRDMA_LOG": "true", "SOFTRDMA_CC": "cubic",
		"SOFTRDMA_EVENT_SPIN": "-5us",
	} {
		_, err := ReadEnv(func(name string) string {
			if name == k {
				return v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v, want an error naming the variable", k, v, err)
		}
	}
}

// With SOFTRDMA_COUNTERS, closing the Opener writes the counters of the
// devices it opened.
func TestOpenerWritesCounters(t *testing.T) {
	path := t.TempDir() + "/counters"
	o := &Opener{Env: Env{Counters: path}, ctx: context.Background(), stderr: io.Discard}
	d, err := o.OpenSoft(soft.Config{Name: "softrdma_ctr", Addr: netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	o.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.HasPrefix(got, "device softrdma_ctr\n") || !strings.Contains(got, "\nretransmits 0\n") || !strings.Contains(got, "\nretry_exceeded_err 0\n") {
		t.Fatalf("counters file:\n%s\nwant a device line and name value lines", got)
	}
}
