package perftest

// Bandwidth tests: the measurement loops are internal/bench's (BWRun:
// perftest 4.5's run_iter_bw, run_iter_bw_server and run_iter_bi); what
// stays here is checking the data a softrdma peer moved.

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/perftest"
)

// newPTBW prepares the bandwidth measurement of one message size on the
// shared engine (bench.BWRun).
func newPTBW(r *ptRun, size uint64) *bench.BWRun {
	return bench.NewBWRun(r.benchTest(size), r.endpoint())
}

// verifyRead checks, on a READ client, that what each QP read is what a
// softrdma server filled its buffer with (nothing is checked against other
// peers).
func (r *ptRun) verifyRead(b *bench.BWRun, size uint64) error {
	if r.o.test.verb != perftest.Read || (r.o.role() != perftest.Client && !r.o.duplex) || r.res.qpMRs != nil {
		return nil // (with --mr_per_qp the checks' offsets do not apply)
	}
	_, n := r.res.slots(size)
	seed := ptSeed(r.remote[0].PSN)
	for i := range r.res.qps {
		slots := min(b.Posted(i), n)
		if slots == 0 {
			continue
		}
		if err := r.res.verifySlots("RDMA READ data", i, r.res.sendOff(i), r.remote[i].VAddr, seed, size, slots); err != nil {
			return err
		}
	}
	return nil
}

// verifyServer checks what the client of a one-sided bandwidth test left in
// this server's memory, knowing the client's report rem:
//
//   - WRITE: every slot the client wrote holds the softrdma client's pattern
//     (skipped for other clients, whose data is random);
//   - FETCH_AND_ADD: the slots' values grew by one per message in total.
//     perftest clients add 1 per message too, but may do extra warm-up
//     iterations, so a mismatch is a warning, not an error.
func (r *ptRun) verifyServer(rem perftest.BWReport) error {
	o, res := r.o, r.res
	nq := uint64(o.numQPs)
	if o.duration > 0 || rem.Iters == 0 || rem.Size == 0 || rem.Size > o.size || res.qpMRs != nil {
		return nil
	}
	switch {
	case o.test.verb == perftest.Write:
		_, n := res.slots(rem.Size)
		slots := min(rem.Iters/nq, n)
		seed := ptSeed(r.remote[0].PSN)
		for i := range r.remote {
			peerSend := r.remote[i].VAddr - nq*res.buffSize
			if err := res.verifySlots("RDMA WRITE data", i, res.vaddrOff(i), peerSend, seed, rem.Size, slots); err != nil {
				return err
			}
		}
	case o.test.verb == perftest.Atomic && o.atomicOp == perftest.FetchAndAdd:
		stride, n := res.slots(8)
		seed := ptSeed(r.local[0].PSN)
		var sum uint64
		for i := 0; i < o.numQPs; i++ {
			for s := uint64(0); s < n; s++ {
				off := res.vaddrOff(i) + s*stride
				var init [8]byte
				ptFill(init[:], res.base+off, seed)
				now := atomic.LoadUint64((*uint64)(unsafe.Pointer(&res.buf[off])))
				sum += now - ptNativeUint64(init)
			}
		}
		if sum != rem.Iters {
			fmt.Fprintf(r.env.errOut, " Warning: the client reported %d FETCH_AND_ADDs, the server's counters grew by %d\n", rem.Iters, sum)
		}
	}
	return nil
}
