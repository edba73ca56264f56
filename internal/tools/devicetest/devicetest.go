// Package devicetest opens the softrdma devices the tools' tests run
// against.
package devicetest

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/provider/soft"
)

// Pair opens two softrdma devices, softrdma_srv on a and softrdma_cli on
// b, two loopback addresses in a random 127.0.x.0/24, sharing a UDP port
// no other test uses; the test's cleanup closes them.
func Pair(t testing.TB) (da, db *soft.Device, a, b netip.Addr, port uint16) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		net3 := 100 + rand.IntN(150)
		a = netip.AddrFrom4([4]byte{127, 0, byte(net3), 1})
		b = netip.AddrFrom4([4]byte{127, 0, byte(net3), 2})
		probe, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
		if err != nil {
			t.Fatal(err)
		}
		port = uint16(probe.LocalAddr().(*net.UDPAddr).Port)
		probe.Close()
		da, err = soft.Open(soft.Config{Name: "softrdma_srv", Addr: a, Port: port})
		if err != nil {
			if attempt < 5 {
				continue
			}
			t.Fatal(err)
		}
		db, err = soft.Open(soft.Config{Name: "softrdma_cli", Addr: b, Port: port})
		if err != nil {
			da.Close()
			if attempt < 5 {
				continue
			}
			t.Fatal(err)
		}
		t.Cleanup(func() {
			db.Close()
			da.Close()
		})
		return da, db, a, b, port
	}
}
