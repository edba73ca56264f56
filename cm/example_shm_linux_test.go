package cm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/verbs"
)

// The connection manager over shared memory: each process opens a shm
// device and names it in the options; the client dials the host and the
// port, and cm finds the process that listens on it. The two devices are
// in one process here; in two processes the code is the same.
func ExampleDial_sharedMemory() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func() *shm.Device {
		dev, err := shm.Open(shm.Config{})
		if err != nil {
			log.Fatal(err)
		}
		return dev
	}
	server, client := open(), open()
	defer server.Close()
	defer client.Close()

	ln, err := cm.Listen("rdma", "127.0.0.1:0", &cm.Options{Context: server}) // port 0: any free one
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
		pd, _ := server.AllocPD()
		mr, _ := pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		offer := binary.BigEndian.AppendUint64(nil, mr.Addr())
		offer = binary.BigEndian.AppendUint32(offer, mr.RKey())
		conn, err := req.Accept(ctx, &cm.Options{PD: pd, PrivateData: offer})
		if err != nil {
			log.Fatal(err)
		}
		<-conn.Done() // the client disconnects when it is done
		b := append([]byte(nil), mr.Bytes()[:18]...)
		conn.Close()
		mr.Dereg()
		pd.Dealloc()
		got <- b
	}()

	addr := fmt.Sprintf("127.0.0.1:%d", ln.Addr().Port())
	conn, err := cm.Dial(ctx, "rdma", addr, &cm.Options{Context: client})
	if err != nil {
		log.Fatal(err)
	}
	mr, _ := conn.PD.AllocMR(64, verbs.AccessLocalWrite)
	copy(mr.Bytes(), "one memcpy, no NIC")
	raddr, rkey := binary.BigEndian.Uint64(conn.PeerPrivateData), binary.BigEndian.Uint32(conn.PeerPrivateData[8:])
	conn.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 18)}, RemoteAddr: raddr, RKey: rkey})
	wc := make([]verbs.WC, 1)
	for n, _ := conn.SendCQ.Poll(wc); n == 0; n, _ = conn.SendCQ.Poll(wc) {
		conn.SendCQ.Wait(ctx)
	}
	fmt.Println(wc[0].Status)
	mr.Dereg()
	conn.Close() // DREQ: the server's conn.Done()
	fmt.Printf("the server's memory: %q\n", <-got)
	// Output:
	// success
	// the server's memory: "one memcpy, no NIC"
}
