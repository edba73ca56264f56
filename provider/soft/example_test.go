package soft_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/softrdma/softrdma/provider/soft"
)

// Open a device on a loopback address and look at its port: the active
// MTU follows the link's (65536 on Linux loopback, so 4096), and GID
// index 1 is the device's IPv4 address, mapped.
func ExampleOpen() {
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.63.1")})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	port, err := dev.QueryPort(1)
	if err != nil {
		log.Fatal(err)
	}
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dev.LocalAddr(), port.State, port.ActiveMTU, gid)
	sent, _ := dev.Counter("sent_pkts")
	calls, ok := dev.Counter("send_calls")
	fmt.Println("sent_pkts", sent, "send_calls", calls, ok)
	// Output:
	// 127.0.63.1 PORT_ACTIVE 4096 ::ffff:127.0.63.1
	// sent_pkts 0 send_calls 0 true
}
