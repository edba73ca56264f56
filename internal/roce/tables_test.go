package roce

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// TestKeyTable: keys inserted are found, keys removed are not, through
// rehashes and churn; readers running meanwhile (under -race) never see a
// torn table.
func TestKeyTable(t *testing.T) {
	var kt keyTable
	want := map[uint32]*MR{}
	rng := rand.New(rand.NewPCG(1, 2))
	// Stable keys stay in the table throughout: a reader must always find
	// them, whatever rehash or deletion happens meanwhile.
	stable := make([]*MR, 100)
	kt.mu.Lock()
	for i := range stable {
		stable[i] = &MR{lkey: 0xF0000000 + uint32(i)}
		kt.insert(stable[i].lkey, stable[i])
	}
	kt.mu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lost atomic.Int64
	wg.Add(1)
	go func() { // a reader, as the receive path
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				mr := stable[i%len(stable)]
				if kt.lookup(mr.lkey) != mr {
					lost.Add(1)
				}
			}
		}
	}()
	var keys []uint32
	for i := range 20000 {
		kt.mu.Lock()
		if len(keys) > 0 && i%3 == 0 {
			j := rng.IntN(len(keys))
			kt.remove(keys[j])
			delete(want, keys[j])
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
		} else {
			k := uint32(i)*2654435761 + 1
			if !kt.has(k) {
				mr := &MR{lkey: k}
				kt.insert(k, mr)
				want[k] = mr
				keys = append(keys, k)
			}
		}
		kt.mu.Unlock()
	}
	close(stop)
	wg.Wait()
	if n := lost.Load(); n != 0 {
		t.Fatalf("a concurrent reader missed a stable key %d times", n)
	}
	for _, mr := range stable {
		want[mr.lkey] = mr
	}
	for k, mr := range want {
		if got := kt.lookup(k); got != mr {
			t.Fatalf("key %#x: got %p, want %p", k, got, mr)
		}
	}
	n := 0
	kt.each(func(uint32, *MR) bool { n++; return true })
	if n != len(want) || kt.used != len(want) {
		t.Fatalf("%d keys iterated, %d counted, want %d", n, kt.used, len(want))
	}
	if got := kt.lookup(0xDEADBEEF); got != nil && want[0xDEADBEEF] == nil {
		t.Fatal("found a key never inserted")
	}
}

// TestQPTable: QPNs are random 24-bit numbers from firstQPN up, unique,
// found, and not handed out again soon after they are freed.
func TestQPTable(t *testing.T) {
	var qt qpTable
	rng := rand.New(rand.NewPCG(3, 4))
	qps := make([]*QP, 3000)
	seen := map[uint32]bool{}
	for i := range qps {
		qps[i] = &QP{}
		if !qt.add(qps[i], rng.Uint32) {
			t.Fatal("table full")
		}
		q := qps[i].qpn
		if q < firstQPN || q > 0xFFFFFF || seen[q] {
			t.Fatalf("QPN %#x: out of range or repeated", q)
		}
		seen[q] = true
	}
	for _, qp := range qps {
		if qt.get(qp.qpn) != qp {
			t.Fatalf("QPN %#x not found", qp.qpn)
		}
	}
	freed := qps[1500].qpn
	qt.remove(qps[1500])
	if qt.get(freed) != nil || qt.get(0) != nil || qt.get(1) != nil {
		t.Fatal("found a QP that is not there")
	}
	// A generator that offers the freed QPN first: it is refused while
	// recent.
	offers := []uint32{freed, freed, 0x123456}
	again := &QP{}
	qt.add(again, func() uint32 { x := offers[0]; offers = offers[1:]; return x })
	if again.qpn != 0x123456 {
		t.Fatalf("got QPN %#x; want the freed %#x skipped", again.qpn, freed)
	}
}

// TestSetupScales: registering an MR and creating a QP cost the same with
// 4096 of them in place as with 16 — the tables grow in amortised O(1)
// instead of being copied whole on every change. Measured as bytes
// allocated per operation (deterministic), not time.
func TestSetupScales(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	buf := make([]byte, 64)
	perOp := func(n int, op func()) float64 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		for range n {
			op()
		}
		runtime.ReadMemStats(&b)
		return float64(b.TotalAlloc-a.TotalAlloc) / float64(n)
	}
	var mrs []verbs.MR
	reg := func() {
		mr, err := f.pd.RegMR(buf, verbs.AccessLocalWrite)
		must(t, err)
		mrs = append(mrs, mr)
	}
	var qps []verbs.QP
	create := func() {
		qp, err := f.pd.CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		must(t, err)
		qps = append(qps, qp)
	}
	mrs = make([]verbs.MR, 0, 8192)
	qps = make([]verbs.QP, 0, 8192)
	smallMR, smallQP := perOp(256, reg), perOp(256, create)
	for len(mrs) < 4096 {
		reg()
		create()
	}
	bigMR, bigQP := perOp(256, reg), perOp(256, create)
	for _, mr := range mrs {
		mr.Dereg()
	}
	for _, qp := range qps {
		qp.Destroy()
	}
	t.Logf("bytes per RegMR: %.0f at 256 MRs, %.0f at 4352; per CreateQP: %.0f at 256 QPs, %.0f at 4352", smallMR, bigMR, smallQP, bigQP)
	if bigMR > 2*smallMR+512 || bigQP > 2*smallQP+512 {
		t.Fatalf("setup grows with the tables: RegMR %.0f → %.0f bytes, CreateQP %.0f → %.0f bytes", smallMR, bigMR, smallQP, bigQP)
	}
}

// TestQPTableSlot: with a slot every QPN carries it in its top bits, the
// rest random, none reserved; a slot that does not fit is refused.
func TestQPTableSlot(t *testing.T) {
	var qt qpTable
	if err := qt.setSlot(5, 6); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	low := map[uint32]bool{}
	for range 500 {
		qp := &QP{}
		if !qt.add(qp, rng.Uint32) {
			t.Fatal("table full")
		}
		if qp.qpn>>18 != 5 || qp.qpn < firstQPN {
			t.Fatalf("QPN %#x: slot %d, want 5", qp.qpn, qp.qpn>>18)
		}
		low[qp.qpn&0x3FFFF] = true
	}
	if len(low) < 490 {
		t.Fatalf("%d distinct low parts in 500 QPNs: not random", len(low))
	}
	var z qpTable
	if z.setSlot(64, 6) == nil || z.setSlot(0, 0) == nil {
		t.Fatal("a slot that does not fit its bits was taken")
	}
	if err := z.setSlot(0, 6); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		qp := &QP{}
		z.add(qp, rng.Uint32)
		if qp.qpn < firstQPN || qp.qpn>>18 != 0 {
			t.Fatalf("slot 0 gave QPN %#x", qp.qpn)
		}
	}
}
