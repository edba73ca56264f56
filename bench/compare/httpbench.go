//go:build linux

package main

// The net/http echo: a client POSTs a body of -size bytes over one
// keep-alive connection and reads the server's echo of it back, -n times;
// each call's time (request written to response read, a full round trip)
// is a sample. The transport is any of package sockets' (TCP, rdmanet over
// a soft device or over shm), so the same net/http code runs over each.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/softrdma/softrdma/bench/internal/harness"
	"github.com/softrdma/softrdma/bench/internal/sockets"
)

// httpServer serves the echo until the client closes its connection.
func httpServer(o goOpts) error {
	l, err := sockets.Listen(sockOpts(o))
	if err != nil {
		return err
	}
	defer l.Close()
	one := sockets.NewOneConn(l)
	fmt.Printf("READY %s\n", l.Addr())
	buf := make([]byte, o.size)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.ReadFull(r.Body, buf)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(n))
		w.Write(buf[:n])
	})}
	go srv.Serve(one)
	<-one.Done()
	return srv.Close()
}

// httpClient runs the echo calls and prints their times.
func httpClient(o goOpts) error {
	so := sockOpts(o)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return sockets.Dial(ctx, so, addr)
		},
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := make([]byte, o.size)
	for i := range body {
		body[i] = byte(i)
	}
	got := make([]byte, o.size)
	url := "http://" + o.addr + "/echo"
	call := func() error {
		resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("echo: %s", resp.Status)
		}
		if _, err := io.ReadFull(resp.Body, got); err != nil {
			return err
		}
		if n, _ := io.Copy(io.Discard, resp.Body); n != 0 {
			return fmt.Errorf("echo: %d bytes more than sent", n)
		}
		return nil
	}
	for i := 0; i < o.warm; i++ {
		if err := call(); err != nil {
			return err
		}
	}
	if !bytes.Equal(got, body) {
		return fmt.Errorf("echo: the body came back changed")
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
