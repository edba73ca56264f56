// Command writeread is a two-process softrdma example: a server and a client,
// each with its own softrdma device, exchange their QP numbers, PSNs, GIDs
// and memory keys over TCP, connect RC queue pairs, and the client RDMA
// WRITEs 64 KiB into the server's memory and RDMA READs 64 KiB back out of
// it. Both sides verify the bytes.
//
//	go run ./examples/writeread -listen 127.0.0.1:18515 -addr 127.0.0.2
//	go run ./examples/writeread -connect 127.0.0.1:18515 -addr 127.0.0.3
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

const size = 64 << 10

// peerInfo is what the two sides exchange before they can talk RDMA.
type peerInfo struct {
	QPN  uint32
	PSN  uint32
	GID  verbs.GID
	RKey uint32
	Addr uint64
}

func main() {
	listen := flag.String("listen", "", "run as server: accept the exchange on this TCP address")
	connect := flag.String("connect", "", "run as client: connect the exchange to this TCP address")
	addr := flag.String("addr", "", "IP address of this side's softrdma device (e.g. 127.0.0.2)")
	port := flag.Uint("port", 4791, "RoCEv2 UDP port (both sides must agree)")
	flag.Parse()
	if (*listen == "") == (*connect == "") || *addr == "" {
		fmt.Fprintln(os.Stderr, "usage: writeread (-listen HOST:PORT | -connect HOST:PORT) -addr DEVICE_IP")
		os.Exit(2)
	}
	if err := run(*listen, *connect, *addr, uint16(*port)); err != nil {
		log.Fatal(err)
	}
}

// pattern fills b with bytes that depend on seed and position.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

func run(listen, connect, addr string, port uint16) error {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return err
	}
	dev, err := soft.Open(soft.Config{Addr: ip, Port: port})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	cq, err := dev.CreateCQ(16, nil)
	if err != nil {
		return err
	}
	defer cq.Destroy()
	// Two halves: [0, size) is this side's data, [size, 2*size) receives.
	mr, err := pd.AllocMR(2*size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy()
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		return err
	}
	server := listen != ""
	seed := byte(0x5a)
	if server {
		seed = 0xc3
	}
	pattern(mr.Bytes()[:size], seed)
	// The initial PSN is random: a predictable one (the clock's) is half
	// of what a blind attacker must guess (docs/security.md).
	var psn [4]byte
	if _, err := rand.Read(psn[:]); err != nil {
		return err
	}
	me := peerInfo{QPN: qp.QPNum(), PSN: binary.BigEndian.Uint32(psn[:]) & 0xFFFFFF, GID: gid, RKey: mr.RKey(), Addr: mr.Addr()}

	// The out-of-band exchange: one JSON line each way over TCP.
	var conn net.Conn
	if server {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		fmt.Printf("server: device %s (%v), QPN %#x, waiting on %s\n", dev.Name(), ip, me.QPN, listen)
		conn, err = ln.Accept()
		ln.Close()
		if err != nil {
			return err
		}
	} else {
		for i := 0; ; i++ {
			conn, err = net.Dial("tcp", connect)
			if err == nil || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return err
		}
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(me); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	var peer peerInfo
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	if err := json.Unmarshal(line, &peer); err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	if err := connectQP(qp, me, peer); err != nil {
		return err
	}
	if server {
		// The client does the RDMA; wait for its "done", then verify what
		// it wrote into our second half.
		if _, err := rd.ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the client: %w", err)
		}
		want := make([]byte, size)
		pattern(want, 0x5a)
		if !bytes.Equal(mr.Bytes()[size:], want) {
			return fmt.Errorf("server: the bytes the client wrote differ")
		}
		fmt.Printf("server: verified %d bytes the client RDMA-wrote into our memory\n", size)
		_, err = conn.Write([]byte("ok\n"))
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// RDMA WRITE our first half into the server's second half, then RDMA
	// READ the server's first half into our second half.
	if err := doRDMA(ctx, qp, cq, &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, size)}, RemoteAddr: peer.Addr + size, RKey: peer.RKey}); err != nil {
		return err
	}
	if err := doRDMA(ctx, qp, cq, &verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(size, size)}, RemoteAddr: peer.Addr, RKey: peer.RKey}); err != nil {
		return err
	}
	want := make([]byte, size)
	pattern(want, 0xc3)
	if !bytes.Equal(mr.Bytes()[size:], want) {
		return fmt.Errorf("client: the bytes read from the server differ")
	}
	fmt.Printf("client: RDMA WRITE of %d bytes completed; RDMA READ of %d bytes verified\n", size, size)
	if _, err := conn.Write([]byte("done\n")); err != nil {
		return err
	}
	reply, err := rd.ReadString('\n')
	if err != nil || reply != "ok\n" {
		return fmt.Errorf("client: the server did not confirm the written bytes (%q, %v)", reply, err)
	}
	fmt.Println("client: the server verified the written bytes")
	return nil
}

func doRDMA(ctx context.Context, qp verbs.QP, cq verbs.CQ, wr *verbs.SendWR) error {
	if err := qp.PostSend(wr); err != nil {
		return err
	}
	wc := make([]verbs.WC, 1)
	for {
		if n, err := cq.Poll(wc); err != nil {
			return err
		} else if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return fmt.Errorf("%v failed: %v", wr.Opcode, wc[0].Status)
			}
			return nil
		}
		if err := cq.Wait(ctx); err != nil {
			return fmt.Errorf("%v: %w", wr.Opcode, err)
		}
	}
}

// connectQP moves qp through INIT and RTR to RTS towards peer with cm's
// defaults, except for the 4096-byte path MTU that loopback allows and the
// GID index of the device's IPv4 address.
func connectQP(qp verbs.QP, me, peer peerInfo) error {
	p := cm.DefaultParams()
	p.PathMTU = verbs.MTU4096
	p.SGIDIndex = 1
	return cm.Connect(qp, cm.Endpoint{QPN: me.QPN, PSN: me.PSN, GID: me.GID},
		cm.Endpoint{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID}, &p)
}
