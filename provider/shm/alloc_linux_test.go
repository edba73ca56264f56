package shm

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestZeroAllocs holds the data path to no allocation per operation:
// posting, executing, polling, for WRITE, READ, atomics and SEND/RECV.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := pair(t, sideOpts{}, sideOpts{})
	wc := make([]verbs.WC, 4)
	sge := []verbs.SGE{a.mr.SGE(0, 8)}
	rsge := []verbs.SGE{b.mr.SGE(0, 64)}
	ops := []verbs.SendWR{
		{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), SGList: sge},
		{Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), SGList: sge},
		{Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, CompareAdd: 1, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), SGList: sge},
		{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: sge},
	}
	for _, wr := range ops {
		t.Run(wr.Opcode.String(), func(t *testing.T) {
			rwr := verbs.RecvWR{SGList: rsge}
			once := func() {
				if wr.Opcode == verbs.WRSend {
					if err := b.qp.PostRecv(&rwr); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.qp.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				for n := 0; n < 1; {
					k, _ := a.cq.Poll(wc)
					n += k
					b.dev.Progress() // AllocsPerRun runs with GOMAXPROCS=1
				}
				if wr.Opcode == verbs.WRSend {
					for n := 0; n < 1; {
						k, _ := b.cq.Poll(wc)
						n += k
					}
				}
			}
			once() // the first use of an rkey asks the owner for it
			if n := testing.AllocsPerRun(200, once); n != 0 {
				t.Errorf("%v: %v allocations per operation", wr.Opcode, n)
			}
		})
	}
}

// TestNoLeaks: after Close, no goroutine and no mapping of the device
// remains.
func TestNoLeaks(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	maps := countMaps(t)
	t.Run("traffic", func(t *testing.T) { // pair's cleanups run when it ends
		a, b := pair(t, sideOpts{}, sideOpts{srq: true})
		postRecv(t, b.srq, 1, b.mr.SGE(0, 8))
		postSend(t, a.qp, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		postSend(t, a.qp, verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		poll(t, a.cq, 2)
		poll(t, b.cq, 1)
	})
	func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > goroutines {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
		}
		if m := countMaps(t); m != maps {
			b, _ := readMaps()
			t.Errorf("%d softrdma-shm mappings before, %d after:\n%s", maps, m, b)
		}
	}()
}

func readMaps() (string, error) {
	var sb strings.Builder
	b, err := readFile("/proc/self/maps")
	for _, l := range strings.Split(b, "\n") {
		if strings.Contains(l, "softrdma-shm") {
			sb.WriteString(l + "\n")
		}
	}
	return sb.String(), err
}

func readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}
