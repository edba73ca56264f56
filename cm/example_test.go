package cm_test

import (
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// side is one end of the example: a device with a PD, a CQ, a registered
// buffer and an RC QP.
type side struct {
	dev *soft.Device
	cq  verbs.CQ
	mr  verbs.MR
	qp  verbs.QP
	gid verbs.GID
}

func open(addr netip.Addr, port uint16) (*side, error) {
	dev, err := soft.Open(soft.Config{Addr: addr, Port: port})
	if err != nil {
		return nil, err
	}
	s := &side{dev: dev}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	if s.cq, err = dev.CreateCQ(4, nil); err != nil {
		return nil, err
	}
	if s.mr, err = pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if s.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	// GID index 1 is the device's IPv4 address (index 0 is link-local IPv6).
	s.gid, err = dev.QueryGID(1, 1)
	return s, err
}

// Connect two RC QPs on two softrdma devices in one process and move one
// RDMA WRITE. In a real program each side sends its Endpoint to the other
// out of band (over TCP, say) before calling Connect.
func ExampleConnect() {
	// Two loopback addresses sharing a free UDP port.
	a, b := netip.MustParseAddr("127.0.61.1"), netip.MustParseAddr("127.0.61.2")
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: a.AsSlice()})
	if err != nil {
		log.Fatal(err)
	}
	port := uint16(probe.LocalAddr().(*net.UDPAddr).Port)
	probe.Close()
	client, err := open(a, port)
	if err != nil {
		log.Fatal(err)
	}
	defer client.dev.Close()
	server, err := open(b, port)
	if err != nil {
		log.Fatal(err)
	}
	defer server.dev.Close()

	cli := cm.Endpoint{QPN: client.qp.QPNum(), PSN: 0x1234, GID: client.gid}
	srv := cm.Endpoint{QPN: server.qp.QPNum(), PSN: 0x5678, GID: server.gid}
	p := cm.DefaultParams()
	p.SGIDIndex = 1
	if err := cm.Connect(client.qp, cli, srv, &p); err != nil {
		log.Fatal(err)
	}
	if err := cm.Connect(server.qp, srv, cli, &p); err != nil {
		log.Fatal(err)
	}

	msg := "hello, world"
	copy(client.mr.Bytes(), msg)
	err = client.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList:     []verbs.SGE{client.mr.SGE(0, len(msg))},
		RemoteAddr: server.mr.Addr(), RKey: server.mr.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if n, err := client.cq.Poll(wc); err != nil {
			log.Fatal(err)
		} else if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			log.Fatal("no completion")
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println(wc[0].Status, string(server.mr.Bytes()[:len(msg)]))
	// Output: success hello, world
}
