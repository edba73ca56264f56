package bench

import (
	"testing"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// TestBWAndLat runs every operation of softrdma bench through the engine,
// both ends in this process: small messages (slots stepping through the
// page, cq_mod 100) and a large one (cq_mod 1), busy-polled and blocking.
// A SEND never meets an empty receive queue: the sender waits for credits
// instead, so no RNR NAK is sent.
func TestBWAndLat(t *testing.T) {
	da, db := devicePair(t)
	sa, err := NewSide(da, 9000)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sb, err := NewSide(db, 9000)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := Connect(sa, sb, verbs.MTU1024); err != nil {
		t.Fatal(err)
	}
	rnrNAKs := func() uint64 { x, _ := da.Counter("send_rnr_err"); y, _ := db.Counter("send_rnr_err"); return x + y }
	rnr0 := rnrNAKs()
	for _, block := range []bool{false, true} {
		for _, op := range []Op{Write, Read, Send} {
			for _, size := range []int{2, 9000} {
				cfg := Config{Op: op, Size: size, Iters: 700, Block: block}
				bw, err := BW(sa, sb, cfg)
				if err != nil {
					logCounters(t, da, db)
					t.Fatalf("%v BW %d B block=%v: %v", op, size, block, err)
				}
				if bw.Iters != 700 || !(bw.MsgRate > 0) || !(bw.AvgMBps > 0) {
					t.Fatalf("%v BW %d B block=%v: %+v", op, size, block, bw)
				}
				cfg.Iters = 100
				lat, err := Lat(sa, sb, cfg)
				if err != nil {
					logCounters(t, da, db)
					t.Fatalf("%v latency %d B block=%v: %v", op, size, block, err)
				}
				if !(lat.Min > 0 && lat.Min <= lat.Typical && lat.Typical <= lat.Max) {
					t.Fatalf("%v latency %d B block=%v: %+v", op, size, block, lat)
				}
			}
		}
	}
	if rnr := rnrNAKs() - rnr0; rnr != 0 {
		t.Fatalf("%d RNR NAKs: a SEND met an empty receive queue", rnr)
	}
	if _, err := BW(sa, sb, Config{Op: Write, Size: 9001, Iters: 10}); err == nil {
		t.Fatal("a message larger than the buffers was accepted")
	}
}

// logCounters logs the devices' non-zero counters, so that a failed run
// says what the engines saw (retransmissions, drops, timeouts).
func logCounters(t *testing.T, devs ...*soft.Device) {
	t.Helper()
	for _, d := range devs {
		for _, c := range d.Counters() {
			if c.Value != 0 {
				t.Logf("%s %s=%d", d.Name(), c.Name, c.Value)
			}
		}
	}
}
