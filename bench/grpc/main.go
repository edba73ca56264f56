// Command grpc is bench/compare's gRPC row: unary calls (the standard
// health service's Check, so no generated code of its own) over Go's TCP,
// rdmanet over a soft device, or rdmanet over a shared-memory device,
// through the same listeners and dialers as bench/compare's other Go loops
// (bench/internal/sockets). It speaks bench/compare's child protocol: the
// server prints "READY addr", the client "RESULT {json}" with the calls'
// times (each a whole call, not half a round trip).
//
// It is a module of its own so that gRPC stays out of softrdma's go.mod;
// bench/compare builds it when its rdmanet stack runs.
//
//	go run . _go-server -proto tcp -addr 127.0.0.1:0
//	go run . _go-client -proto tcp -addr 127.0.0.1:PORT -n 10000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/softrdma/softrdma/bench/internal/harness"
	"github.com/softrdma/softrdma/bench/internal/sockets"
)

type opts struct {
	sock       sockets.Opts
	n, warm    int
	cpuProfile string
	trace      string
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "_go-server" && os.Args[1] != "_go-client") {
		fmt.Fprintln(os.Stderr, "usage: grpc _go-server|_go-client -proto tcp|rdmanet|rdmanet-shm [-dev addr] -addr host:port [-n calls] [-warm calls]")
		os.Exit(2)
	}
	role := os.Args[1]
	var o opts
	fs := flag.NewFlagSet(role, flag.ExitOnError)
	fs.StringVar(&o.sock.Proto, "proto", "tcp", "tcp, rdmanet (a soft device) or rdmanet-shm (a shared-memory device)")
	fs.StringVar(&o.sock.Dev, "dev", "", "rdmanet: the address of this side's soft device")
	fs.StringVar(&o.sock.Addr, "addr", "127.0.0.1:0", "listen / connect address")
	fs.IntVar(&o.n, "n", 1000, "timed calls")
	fs.IntVar(&o.warm, "warm", 100, "untimed calls first")
	fs.Int("size", 0, "ignored (bench/compare passes it to every Go loop)")
	fs.String("mode", "", "ignored (bench/compare passes it to every Go loop)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write this process's CPU profile to the file (go tool pprof)")
	fs.StringVar(&o.trace, "trace", "", "write this process's runtime trace to the file (go tool trace)")
	fs.Parse(os.Args[2:])
	err := o.sock.Check()
	if err == nil && (o.n < 1 || o.warm < 0) {
		err = errors.New("-n must be positive and -warm not negative")
	}
	if err == nil {
		var stop func()
		if stop, err = harness.StartProfiles(o.cpuProfile, o.trace); err == nil {
			if role == "_go-server" {
				err = server(o)
			} else {
				err = client(o)
			}
			stop()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		os.Exit(1)
	}
}

// server serves the health service until the client's connection closes.
func server(o opts) error {
	l, err := sockets.Listen(o.sock)
	if err != nil {
		return err
	}
	defer l.Close()
	one := sockets.NewOneConn(l)
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("bench", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	fmt.Printf("READY %s\n", l.Addr())
	go srv.Serve(one)
	<-one.Done()
	srv.Stop()
	return nil
}

// client makes the calls on one connection and prints their times.
func client(o opts) error {
	conn, err := grpc.NewClient("passthrough:///"+o.sock.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return sockets.Dial(ctx, o.sock, addr)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{Service: "bench"}
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, req)
		if err != nil {
			return fmt.Errorf("Check: %w", err)
		}
		if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("Check: status %v", r.GetStatus())
		}
		return nil
	}
	for i := 0; i < o.warm; i++ {
		if err := call(); err != nil {
			return err
		}
	}
	samples := make([]time.Duration, o.n)
	for i := range samples {
		d, err := harness.Call(call)
		if err != nil {
			return err
		}
		samples[i] = d
	}
	harness.PrintResult(harness.LatMetrics(samples))
	return nil
}
