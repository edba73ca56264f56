package cm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// A server listens, accepts a connection and tells the client in its
// private data where the client may WRITE; the client dials, WRITEs and
// disconnects. The CM exchange (REQ, REP, RTU, DREQ, DREP) is rdma_cm's:
// rping or ucmatose could be either side.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range []string{"127.0.62.1", "127.0.62.2"} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: freePort})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close()
	}

	// The server: its QP and memory share a PD so the REP can offer the MR.
	ln, err := cm.Listen("rdma", "127.0.62.2:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		pd, _ := ln.Context().AllocPD()
		mr, _ := pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		offer := binary.BigEndian.AppendUint64(nil, mr.Addr())
		offer = binary.BigEndian.AppendUint32(offer, mr.RKey())
		conn, err := req.Accept(ctx, &cm.Options{PD: pd, PrivateData: offer})
		if err != nil {
			log.Fatal(err)
		}
		select { // the client disconnects when it is done
		case <-conn.Done():
		case <-ctx.Done():
			log.Fatal("the server never saw the client disconnect")
		}
		got <- mr.Bytes()[:12]
		conn.Close()
	}()

	// The client: Dial finds the device that reaches the address.
	conn, err := cm.Dial(ctx, "rdma", "127.0.62.2:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	mr, _ := conn.PD.AllocMR(64, verbs.AccessLocalWrite)
	copy(mr.Bytes(), "hello, world")
	addr, rkey := binary.BigEndian.Uint64(conn.PeerPrivateData), binary.BigEndian.Uint32(conn.PeerPrivateData[8:])
	err = conn.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 12)}, RemoteAddr: addr, RKey: rkey})
	if err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; n, _ = conn.SendCQ.Poll(wc) {
		if conn.SendCQ.Wait(ctx) != nil {
			log.Fatal("no completion")
		}
	}
	fmt.Println("client:", wc[0].Status)
	mr.Dereg()
	conn.Close()
	select {
	case b := <-got:
		fmt.Printf("server: %s\n", b)
	case <-ctx.Done():
		log.Fatal("the server did not finish")
	}
	// Output:
	// client: success
	// server: hello, world
}

// freePort is a UDP port free on loopback, so that the example's devices
// do not need 4791.
var freePort = func() uint16 {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 62, 1)})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}()
