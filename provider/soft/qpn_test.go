package soft

import (
	"net"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
)

// TestQPNEntropy: QPNs of a device that does not share its address are
// random in all 24 bits; a device that shares it has its slot in the top
// reuseport bits and the rest random. Before, an unshared device put
// slot 0 in the top 6 bits: 18 random bits, not the 24 the docs counted.
// The engine's own test (internal/roce TestUnguessableIdentifiers) drew
// its QPNs with no slot configured and could not see it.
func TestQPNEntropy(t *testing.T) {
	for _, exclusive := range []bool{true, false} {
		addr := netip.MustParseAddr("127.0.85.1")
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr.AsSlice()})
		if err != nil {
			t.Skip(err)
		}
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c.Close()
		dev, err := Open(Config{Addr: addr, Port: port, UDP: udp.Config{Exclusive: exclusive}})
		if err != nil {
			t.Skip(err)
		}
		slot, bits, shared := dev.SharedSlot()
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(4, nil)
		top := map[uint32]bool{}
		low := map[uint32]bool{}
		for range 300 {
			qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			n := qp.QPNum()
			top[n>>(24-bits)] = true
			low[n&(1<<(24-bits)-1)] = true
			qp.Destroy()
		}
		switch {
		case shared && (len(top) != 1 || !top[slot]):
			t.Errorf("shared device in slot %d: QPN top bits took %d values, want only the slot", slot, len(top))
		case !shared && len(top) < 40:
			t.Errorf("unshared device: the top %d bits of 300 QPNs took %d of %d values: not random", bits, len(top), 1<<bits)
		case len(low) < 295:
			t.Errorf("the low %d bits of 300 QPNs took %d values: not random", 24-bits, len(low))
		}
		t.Logf("exclusive=%v shared=%v: %d top values, %d low values", exclusive, shared, len(top), len(low))
		cq.Destroy()
		pd.Dealloc()
		dev.Close()
	}
}
