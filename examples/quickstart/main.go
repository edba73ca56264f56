// Command quickstart is the README's API example as a program that runs:
// a server listens for RDMA connections and offers a buffer; a client
// dials it (rdma_cm's protocol, so rping or ucmatose could be either
// side), RDMA WRITEs into the buffer and waits for the completion
// (cm.Conn's one-sided calls). Both
// run in this process, each with its own softrdma device, so one command
// runs it all:
//
//	go run ./examples/quickstart
//
// The lines between "README begin" and "README end" are the README's
// example; main_test.go checks that the README shows them as they are
// here, so the README's code is code that compiles and runs. Like the
// README, they leave out error handling for brevity (a failure there
// panics); examples/writeread checks every error.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

func main() {
	addr := flag.String("addr", "127.0.0.2", "IP address of the client's device")
	peerIP := flag.String("peer", "127.0.0.3", "IP address of the server's device, in this process")
	flag.Parse()
	if err := run(*addr, *peerIP); err != nil {
		log.Fatal(err)
	}
}

// serve is the server: it listens on ip, accepts one connection, offers
// 4 KiB of memory to WRITE into in its private data, and sends what was
// written on got once the client has disconnected.
func serve(ctx context.Context, ip string, listening chan<- struct{}, got chan<- []byte) {
	// README begin
	// The server (a process of its own, on this host or another):
	dev, _ := soft.Open(soft.Config{Addr: netip.MustParseAddr(ip)})
	defer dev.Close()
	ln, _ := cm.Listen("rdma", ip+":7471", nil)
	// README end
	defer ln.Close()
	close(listening)
	// README begin
	req, _ := ln.Accept(ctx)
	pd, _ := dev.AllocPD()
	buf, _ := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	offer, _ := cm.RemoteBufferOf(buf).AppendBinary(nil) // where to WRITE, with which key
	conn, _ := req.Accept(ctx, &cm.Options{PD: pd, PrivateData: offer})
	<-conn.Done() // the client disconnects when it is done
	// README end
	got <- bytes.Clone(buf.Bytes())
}

func run(addr, peerIP string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listening, got := make(chan struct{}), make(chan []byte, 1)
	go serve(ctx, peerIP, listening, got)
	select {
	case <-listening:
	case <-ctx.Done():
		return fmt.Errorf("the server did not listen: %w", ctx.Err())
	}

	// README begin

	// The client:
	dev, _ := soft.Open(soft.Config{Addr: netip.MustParseAddr(addr)})
	defer dev.Close()
	conn, _ := cm.Dial(ctx, "rdma", peerIP+":7471", nil) // finds the device that reaches it
	mr, _ := conn.PD.AllocMR(4096, verbs.AccessLocalWrite)
	copy(mr.Bytes(), "hello, RDMA")
	remote, _, _ := cm.ParseRemoteBuffer(conn.PeerPrivateData)
	err := conn.Write(ctx, mr.SGE(0, 4096), remote) // RDMA WRITE, wait for its completion
	conn.Close()                                    // DREQ/DREP: the server sees conn.Done()
	// README end

	if err != nil {
		return err // a *cm.CompletionError: errors.Is(err, verbs.WCRemAccessErr), ...
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, mr.Bytes()) {
			return fmt.Errorf("the server's memory does not hold the bytes written")
		}
	case <-ctx.Done():
		return fmt.Errorf("the server did not see the disconnect: %w", ctx.Err())
	}
	fmt.Println("RDMA WRITE of 4096 bytes completed and landed in the server's memory")
	return nil
}
