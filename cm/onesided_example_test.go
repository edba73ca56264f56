package cm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// A remote buffer travels in private data: the server describes its
// region, the client parses the description.
func ExampleRemoteBuffer() {
	offer, _ := cm.RemoteBuffer{Addr: 0x7f3a_0000_1000, RKey: 0x2f41, Length: 4096}.AppendBinary(nil)
	private := append(offer, make([]byte, 100)...) // as a REP's private data arrives: padded

	remote, _, err := cm.ParseRemoteBuffer(private)
	if err != nil {
		log.Fatal(err)
	}
	word, _ := remote.Slice(64, 8)
	fmt.Println(len(offer), remote)
	fmt.Println(word)
	// Output:
	// 20 0x7f3a00001000+4096 (rkey 0x2f41)
	// 0x7f3a00001040+8 (rkey 0x2f41)
}

// The client WRITEs into the server's memory, READs it back, counts with
// a fetch-and-add, and learns what a wrong key gets.
func ExampleConn_Write() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range []string{"127.0.62.5", "127.0.62.6"} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: freePort})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close() // ends the listener and the connections too
	}

	// The server offers 4 KiB that the client may read, write and
	// update atomically.
	ln, err := cm.Listen("rdma", "127.0.62.6:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	var mem verbs.MR
	served := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			served <- err
			return
		}
		pd, _ := req.Context().AllocPD()
		mem, _ = pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		offer, _ := cm.RemoteBufferOf(mem).AppendBinary(nil)
		_, err = req.Accept(ctx, &cm.Options{PD: pd, PrivateData: offer})
		served <- err
	}()

	conn, err := cm.Dial(ctx, "rdma", "127.0.62.6:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := <-served; err != nil {
		log.Fatal(err)
	}
	remote, _, err := cm.ParseRemoteBuffer(conn.PeerPrivateData)
	if err != nil {
		log.Fatal(err)
	}
	local, _ := conn.PD.AllocMR(4096, verbs.AccessLocalWrite)

	copy(local.Bytes(), "hello, memory")
	if err := conn.Write(ctx, local.SGE(0, 13), remote); err != nil {
		log.Fatal(err)
	}
	if err := conn.Read(ctx, local.SGE(100, 5), remote); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server memory: %s; read back: %s\n", mem.Bytes()[:13], local.Bytes()[100:105])

	counter, _ := remote.Slice(1024, 8)
	for range 3 {
		if _, err := conn.FetchAndAdd(ctx, counter, 10); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("counter:", binary.LittleEndian.Uint64(mem.Bytes()[1024:]))

	forged := remote
	forged.RKey++
	err = conn.Write(ctx, local.SGE(0, 8), forged)
	fmt.Println("forged key:", errors.Is(err, verbs.WCRemAccessErr))
	// Output:
	// server memory: hello, memory; read back: hello
	// counter: 30
	// forged key: true
}

// Several operations in flight at once, each waited for by its Op.
func ExampleConn_PostRead() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range []string{"127.0.62.7", "127.0.62.8"} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: freePort})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close()
	}
	ln, err := cm.Listen("rdma", "127.0.62.8:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		pd, _ := req.Context().AllocPD()
		mem, _ := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
		for i := range 4 {
			copy(mem.Bytes()[i*1024:], fmt.Sprintf("page %d", i))
		}
		offer, _ := cm.RemoteBufferOf(mem).AppendBinary(nil)
		req.Accept(ctx, &cm.Options{PD: pd, PrivateData: offer})
	}()
	conn, err := cm.Dial(ctx, "rdma", "127.0.62.8:7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	remote, _, _ := cm.ParseRemoteBuffer(conn.PeerPrivateData)
	local, _ := conn.PD.AllocMR(4096, verbs.AccessLocalWrite)

	var ops [4]cm.Op
	for i := range ops {
		part, _ := remote.Slice(uint64(i)*1024, 6)
		if err := conn.PostRead(&ops[i], local.SGE(i*1024, 6), part); err != nil {
			log.Fatal(err)
		}
	}
	for i := range ops {
		if err := ops[i].Wait(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", local.Bytes()[i*1024:i*1024+6])
	}
	// Output:
	// page 0
	// page 1
	// page 2
	// page 3
}
