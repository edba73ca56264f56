package netsim

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/transport"
)

// TestSwitch: three senders burst into one switch port. The port
// forwards at its rate (one 1000-byte packet per millisecond at 1 MB/s),
// drops what does not fit its buffer, marks ECT packets CE along the RED
// curve and drops non-ECT ones instead, and the counters add up.
func TestSwitch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Seed: 7, Delay: 10 * time.Microsecond})
		defer n.Close()
		sw := Switch{Rate: 1_000_000, Buffer: 20_000, Kmin: 2_000, Kmax: 10_000, Pmax: 0.5}
		if err := n.SetSwitch(addrB, sw); err != nil {
			t.Fatal(err)
		}
		b := mustEndpoint(t, n, addrB)
		senders := []netip.Addr{addrA, netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")}
		type got struct {
			at     time.Duration
			tclass uint8
		}
		var arrivals []got
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			pkts := make([]transport.Datagram, 64)
			for i := range pkts {
				pkts[i].Buf = make([]byte, 0, 2000)
			}
			for {
				k, err := b.Recv(pkts)
				if err != nil {
					return
				}
				for _, p := range pkts[:k] {
					arrivals = append(arrivals, got{time.Since(start), p.TClass})
				}
			}
		}()
		// Two senders ECN-capable, one not; each sends 20 packets at once.
		for i, a := range senders {
			e := mustEndpoint(t, n, a)
			pkts := make([]transport.Datagram, 20)
			for j := range pkts {
				pkts[j] = transport.Datagram{Buf: testPacket(j, 1000, opSendOnly), Peer: b.LocalAddr(), Flow: uint32(i)}
				if i < 2 {
					pkts[j].TClass = 0x68 | transport.ECNECT0
				}
			}
			if _, err := e.Send(pkts); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		b.Close()
		<-done
		st := n.SwitchStats(addrB)
		ns := n.Stats()
		checkConservation(t, ns)
		if st.Packets != 60 || st.Forwarded+st.TailDrops+st.REDDrops != 60 || ns.SwitchDrops != st.TailDrops+st.REDDrops {
			t.Fatalf("port counters do not add up: %+v, network %+v", st, ns)
		}
		// The buffer holds 20 packets: the rest of the burst is dropped.
		if st.TailDrops < 30 || st.MaxQueue > sw.Buffer || st.MaxQueue < sw.Buffer-2000 {
			t.Errorf("tail drops %d, max queue %d: want ≥ 30 drops of a %d-byte buffer that filled", st.TailDrops, st.MaxQueue, sw.Buffer)
		}
		if st.Marked == 0 {
			t.Errorf("no ECT packet was marked with the queue at %d bytes (Kmin %d)", st.MaxQueue, sw.Kmin)
		}
		if len(arrivals) != int(st.Forwarded) {
			t.Fatalf("%d arrivals, %d forwarded", len(arrivals), st.Forwarded)
		}
		ce := 0
		for i, a := range arrivals {
			// Serialized at the port's rate, one per millisecond, plus
			// the delay behind the port.
			if want := time.Duration(i+1)*time.Millisecond + 10*time.Microsecond; a.at != want {
				t.Errorf("packet %d arrived at %v, want %v", i, a.at, want)
			}
			switch a.tclass {
			case 0x68 | transport.ECNCE:
				ce++
			case 0x68 | transport.ECNECT0, 0:
			default:
				t.Errorf("packet %d arrived with traffic class %#x", i, a.tclass)
			}
		}
		if ce != int(st.Marked) {
			t.Errorf("%d packets arrived CE, the port marked %d", ce, st.Marked)
		}
	})
}

// TestSwitchNonECTDropped: at a queue beyond Kmax every packet is
// "marked": ECT ones arrive CE, non-ECT ones are dropped.
func TestSwitchNonECTDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Seed: 1})
		defer n.Close()
		if err := n.SetSwitch(addrB, Switch{Rate: 1_000_000, Buffer: 1 << 20, Kmin: 1, Kmax: 1, Pmax: 1}); err != nil {
			t.Fatal(err)
		}
		a, b := mustEndpoint(t, n, addrA), mustEndpoint(t, n, addrB)
		wait := receive(b, time.Now())
		pkts := make([]transport.Datagram, 10)
		for j := range pkts {
			pkts[j] = transport.Datagram{Buf: testPacket(j, 500, opSendOnly), Peer: b.LocalAddr(), Flow: 1}
		}
		a.Send(pkts)
		time.Sleep(time.Second)
		got := wait()
		st := n.SwitchStats(addrB)
		// The first packet finds an empty queue; the others a full one.
		if len(got) != 1 || st.REDDrops != 9 {
			t.Fatalf("%d delivered, %d RED drops; want 1 and 9 (%+v)", len(got), st.REDDrops, st)
		}
	})
}

func TestSetSwitchErrors(t *testing.T) {
	n := New(Config{})
	defer n.Close()
	for _, s := range []Switch{{}, {Rate: 1}, {Rate: 1, Buffer: 10, Kmin: 5, Kmax: 4}, {Rate: 1, Buffer: 10, Kmax: 4, Pmax: 2}} {
		if err := n.SetSwitch(addrB, s); err == nil {
			t.Errorf("SetSwitch(%+v) accepted", s)
		}
	}
}
