package perftest

// Latency tests: the measurement loops are internal/bench's (LatRun:
// perftest 4.5's run_iter_lat_write, run_iter_lat and run_iter_lat_send);
// what stays here is the report row and checking the data a softrdma peer
// moved.

import (
	"io"

	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/perftest"
)

// newPTLat prepares the latency measurement of one message size on the
// shared engine (bench.LatRun).
func newPTLat(r *ptRun, size uint64) *bench.LatRun {
	return bench.NewLatRun(r.benchTest(size), r.endpoint())
}

// reportLat prints this size's row (print_report_lat,
// print_report_lat_duration) and rewrites the JSON file.
func (r *ptRun) reportLat(l *bench.LatRun) error {
	ls, s, err := l.Stats()
	if err != nil {
		return err
	}
	if r.o.duration > 0 {
		r.outs.latDur = append(r.outs.latDur, s)
		r.outs.bar.Pause()
		if err := perftest.WriteLatDurationRow(r.out, s, r.o.cpuUtilOn()); err != nil {
			return err
		}
		if r.o.outJSON {
			return r.writeJSON(func(w io.Writer) error {
				return perftest.WriteLatDurationJSON(w, perftest.JSONValid, r.ti, s, r.o.cpuUtilOn())
			})
		}
		return nil
	}
	r.outs.lat = append(r.outs.lat, ls)
	r.outs.bar.Pause()
	if r.o.unsorted || r.o.histogram {
		// -U lists the samples as measured, -H sorted without the
		// tail; with both, both lists, then the heading once, as
		// print_report_lat.
		for _, sorted := range []bool{false, true} {
			if (sorted && !r.o.histogram) || (!sorted && !r.o.unsorted) {
				continue
			}
			us, err := l.Samples(sorted)
			if err != nil {
				return err
			}
			if err := perftest.WriteLatSamples(r.out, us); err != nil {
				return err
			}
		}
		if err := perftest.WriteLatHeader(r.out); err != nil {
			return err
		}
	}
	if err := perftest.WriteLatRow(r.out, ls); err != nil {
		return err
	}
	if r.o.outJSON {
		return r.writeJSON(func(w io.Writer) error {
			return perftest.WriteLatJSON(w, perftest.JSONValid, r.ti, ls)
		})
	}
	return nil
}

// verifyLat checks the last data moved, when the peer is softrdma: what a
// READ client read, what a SEND side received.
func (r *ptRun) verifyLat(l *bench.LatRun, size uint64) error {
	seed := ptSeed(r.remote[0].PSN)
	switch {
	case r.o.test.verb == perftest.Read && l.Sent() > 0:
		return r.res.verifySlots("RDMA READ data", 0, r.res.sendOff(0), r.remote[0].VAddr, seed, size, 1)
	case r.o.test.verb == perftest.Send && l.Received() > 0:
		peerSend := r.remote[0].VAddr - uint64(r.o.numQPs)*r.res.buffSize
		return r.res.verifySlots("received SEND data", 0, r.res.recvDataOff(0), peerSend, seed, size, 1)
	}
	return nil
}
