// Command grpc runs gRPC over RDMA: a grpc.Server serves an rdmanet
// listener, and a client connects with a context dialer that dials
// rdmanet, each on its own softrdma device in this process. It calls the
// standard health service (no generated code of its own needed) and a
// streaming Watch.
//
// This example is a module of its own so that gRPC's dependencies stay
// out of softrdma's go.mod.
//
//	cd examples/grpc && go run .
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/rdmanet"
)

func main() {
	client := flag.String("client", "127.0.0.6", "IP address of the client's device")
	server := flag.String("server", "127.0.0.7", "IP address of the server's device")
	port := flag.Uint("udp", 4791, "UDP port of both devices")
	flag.Parse()
	if err := run(*client, *server, uint16(*port), 5); err != nil {
		log.Fatal(err)
	}
}

func run(clientIP, serverIP string, udpPort uint16, calls int) error {
	for _, ip := range []string{clientIP, serverIP} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(ip), Port: udpPort})
		if err != nil {
			return err
		}
		defer dev.Close()
	}
	ln, err := rdmanet.Listen("rdma", serverIP+":0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("rdma", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	defer srv.Stop()

	var d rdmanet.Dialer
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for i := 0; i < calls; i++ {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "rdma"})
		if err != nil {
			return fmt.Errorf("Check: %w", err)
		}
		fmt.Println("Check:", r.GetStatus())
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "rdma"})
	if err != nil {
		return err
	}
	r, err := w.Recv()
	if err != nil {
		return fmt.Errorf("Watch: %w", err)
	}
	fmt.Println("Watch:", r.GetStatus())
	hs.SetServingStatus("rdma", healthpb.HealthCheckResponse_NOT_SERVING)
	if r, err = w.Recv(); err != nil {
		return fmt.Errorf("Watch: %w", err)
	}
	fmt.Println("Watch:", r.GetStatus())
	return nil
}
