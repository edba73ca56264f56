//go:build linux

package main

// The plain-Go baselines: TCP and UDP ping-pong (one-way latency = RTT/2) and
// TCP/UDP streams. The harness re-executes its own binary twice, as
// "_go-server" and "_go-client", so these are two processes like every other
// stack. The client prints "RESULT {json}"; so does the UDP stream server,
// which is the side that knows what arrived.
//
// The same code measures softrdma's sockets (package rdmanet) with the
// protos "rdmanet" (a soft RoCEv2 device per process on loopback, rdma_cm
// over it) and "rdmanet-shm" (a shared-memory device per process; the QPs
// are connected over a TCP stream, rdmanet.Connect): byte for byte the
// loops the TCP baseline runs.
//
// The protos "udp-busy" and "udp-gso" are the kernel-floor anchors, raw
// system calls rather than package net: floor.go.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/bench/internal/harness"
	"github.com/softrdma/softrdma/bench/internal/sockets"
)

const udpChunk = 65000 // largest datagram the UDP stream sends (fits lo's MTU)

type goOpts struct {
	proto, mode string // tcp|udp|rdmanet|rdmanet-shm|udp-busy|udp-gso, pp|stream
	addr        string
	dev         string // rdmanet: this side's soft device address
	size, n     int
	warm        int
	cpuProfile  string // write a CPU profile of this process here
	trace       string // write a runtime trace of this process here
}

// stream reports whether proto is a byte stream (TCP, rdmanet).
func (o goOpts) stream() bool {
	return o.proto == "tcp" || o.proto == "rdmanet" || o.proto == "rdmanet-shm"
}

// floor reports whether proto is one of the kernel-floor anchors (floor.go).
func (o goOpts) floor() bool { return o.proto == "udp-busy" || o.proto == "udp-gso" }

func parseGoOpts(args []string) (goOpts, error) {
	var o goOpts
	fs := flag.NewFlagSet("go-baseline", flag.ContinueOnError)
	fs.StringVar(&o.proto, "proto", "tcp", "tcp, udp, rdmanet, rdmanet-shm, udp-busy (-mode pp) or udp-gso (-mode stream)")
	fs.StringVar(&o.dev, "dev", "", "rdmanet: the address of this side's soft device")
	fs.StringVar(&o.mode, "mode", "pp", "pp (ping-pong), stream, or http (net/http echo of -size bytes; a call's whole time per sample)")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "listen / connect address")
	fs.IntVar(&o.size, "size", 8, "message size")
	fs.IntVar(&o.n, "n", 1000, "messages (stream) or round trips (pp)")
	fs.IntVar(&o.warm, "warm", 100, "untimed round trips first (pp)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write this process's CPU profile to the file (go tool pprof)")
	fs.StringVar(&o.trace, "trace", "", "write this process's runtime trace to the file (go tool trace)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.size < 1 || o.n < 1 {
		return o, errors.New("size and n must be positive")
	}
	if o.mode != "pp" && o.mode != "stream" && o.mode != "http" {
		return o, fmt.Errorf("unknown -mode %q (want pp, stream or http)", o.mode)
	}
	if o.mode == "http" && !o.stream() {
		return o, fmt.Errorf("-mode http runs over tcp, rdmanet or rdmanet-shm, not %q", o.proto)
	}
	switch o.proto {
	case "tcp", "udp", "rdmanet-shm":
	case "udp-busy":
		if o.mode != "pp" {
			return o, errors.New("-proto udp-busy is a ping-pong: -mode pp")
		}
		if floorPacket(o.size) > udpChunk {
			return o, fmt.Errorf("udp-busy: a WRITE ONLY of %d bytes is a datagram of %d > %d", o.size, floorPacket(o.size), udpChunk)
		}
	case "udp-gso":
		if o.mode != "stream" {
			return o, errors.New("-proto udp-gso is a stream: -mode stream")
		}
	case "rdmanet":
		if _, err := netip.ParseAddr(o.dev); err != nil {
			return o, fmt.Errorf("-proto rdmanet needs -dev, the soft device's address: %v", err)
		}
	default:
		return o, fmt.Errorf("unknown -proto %q", o.proto)
	}
	if o.proto == "udp" && o.mode == "pp" && o.size > udpChunk {
		return o, fmt.Errorf("UDP ping-pong size %d > %d", o.size, udpChunk)
	}
	return o, nil
}

// goBaselineMain runs the hidden _go-server / _go-client modes.
func goBaselineMain(role string, args []string) {
	o, err := parseGoOpts(args)
	stop := func() {}
	if err == nil {
		stop, err = harness.StartProfiles(o.cpuProfile, o.trace)
	}
	if err == nil {
		switch {
		case o.mode == "http" && role == "_go-server":
			err = httpServer(o)
		case o.mode == "http":
			err = httpClient(o)
		case role == "_go-server":
			err = goServer(o)
		default:
			err = goClient(o)
		}
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		os.Exit(1)
	}
}

func goServer(o goOpts) error {
	if o.floor() {
		return floorServer(o, func(addr string) { fmt.Printf("READY %s\n", addr) })
	}
	buf := make([]byte, max(o.size, 4<<20))
	if o.stream() {
		c, err := acceptStream(o)
		if err != nil {
			return err
		}
		defer c.Close()
		if o.mode == "pp" {
			for {
				if _, err := io.ReadFull(c, buf[:o.size]); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if _, err := c.Write(buf[:o.size]); err != nil {
					return err
				}
			}
		}
		total := int64(o.size) * int64(o.n)
		for got := int64(0); got < total; {
			k, err := c.Read(buf)
			if err != nil {
				return fmt.Errorf("after %d of %d bytes: %w", got, total, err)
			}
			got += int64(k)
		}
		_, err = c.Write([]byte{1})
		return err
	}

	pc, err := net.ListenUDP("udp", mustUDPAddr(o.addr))
	if err != nil {
		return err
	}
	defer pc.Close()
	bigBuffers(pc)
	fmt.Printf("READY %s\n", pc.LocalAddr())
	if o.mode == "pp" {
		pc.SetReadDeadline(time.Now().Add(30 * time.Second))
		for i := 1; ; i++ {
			k, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && i > 1 {
					return nil // the goodbye was lost; the client is done
				}
				return err
			}
			if i%256 == 1 {
				pc.SetReadDeadline(time.Now().Add(3 * time.Second))
			}
			if k == 0 {
				return nil // the client's goodbye
			}
			if _, err := pc.WriteToUDP(buf[:k], from); err != nil {
				return err
			}
		}
	}
	// Stream: count what arrives until all of it did or the sender has been
	// quiet for a while (datagrams were dropped).
	total := int64(o.size) * int64(o.n)
	var got, dgrams int64
	var first, last time.Time
	// The deadline is renewed every 256 datagrams, not per read (a timer
	// per datagram would make this baseline slower than UDP is).
	const idle = 300 * time.Millisecond
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for got < total {
		k, err := pc.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && dgrams > 0 {
				if time.Since(last) < idle {
					pc.SetReadDeadline(time.Now().Add(idle))
					continue
				}
				break
			}
			return err
		}
		last = time.Now()
		if dgrams == 0 {
			first = last
		}
		got += int64(k)
		dgrams++
		if dgrams%256 == 1 {
			pc.SetReadDeadline(last.Add(idle))
		}
	}
	chunk := min(o.size, udpChunk)
	per := (o.size + chunk - 1) / chunk // datagrams per message
	ns := float64(last.Sub(first).Nanoseconds())
	// first..last spans dgrams-1 datagram gaps.
	gaps := float64(dgrams - 1)
	if gaps < 1 || ns <= 0 {
		return fmt.Errorf("only %d datagrams arrived", dgrams)
	}
	bytesPerGap := float64(got) * gaps / float64(dgrams)
	harness.PrintResult(map[string]float64{
		"bw_MiBps":   bytesPerGap / ns * 1e9 / (1 << 20),
		"msg_rate_M": gaps / float64(per) / ns * 1e3,
		"loss":       1 - float64(got)/float64(total),
		"recv_bytes": float64(got),
	})
	return nil
}

func mustUDPAddr(s string) *net.UDPAddr {
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	}
	return a
}

// bigBuffers asks for 16 MiB socket buffers, past rmem_max if root.
func bigBuffers(c *net.UDPConn) {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { forceBuffers(int(fd)) })
	}
}

// forceBuffers asks for 16 MiB socket buffers: up to rmem_max/wmem_max,
// and past them if root (the FORCE options).
func forceBuffers(fd int) {
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<20)
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 16<<20)
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 16<<20)
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, 16<<20)
}

func goClient(o goOpts) error {
	if o.floor() {
		m, err := floorClient(o)
		if err == nil {
			harness.PrintResult(m)
		}
		return err
	}
	buf := make([]byte, o.size)
	for i := range buf {
		buf[i] = byte(i)
	}
	rbuf := make([]byte, max(o.size, 65536))
	var c net.Conn
	var err error
	if o.stream() {
		c, err = dialStream(o)
	} else {
		var uc *net.UDPConn
		uc, err = net.DialUDP("udp", nil, mustUDPAddr(o.addr))
		if err == nil {
			bigBuffers(uc)
			c = uc
		}
	}
	if err != nil {
		return err
	}
	defer c.Close()

	if o.mode == "pp" {
		once := func() error {
			if _, err := c.Write(buf); err != nil {
				return err
			}
			if o.stream() {
				_, err := io.ReadFull(c, rbuf[:o.size])
				return err
			}
			k, err := c.Read(rbuf)
			if err != nil {
				return fmt.Errorf("no reply (datagram lost?): %w", err)
			}
			if k != o.size {
				return fmt.Errorf("reply of %d bytes, want %d", k, o.size)
			}
			return nil
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for i := 0; i < o.warm; i++ {
			if err := once(); err != nil {
				return err
			}
		}
		samples := make([]time.Duration, o.n)
		for i := range samples {
			if o.proto == "udp" && i%1024 == 0 {
				// One deadline per 1024 round trips: a lost datagram ends
				// the run with an error instead of hanging it.
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
			}
			t0 := time.Now()
			if err := once(); err != nil {
				return err
			}
			samples[i] = time.Since(t0) / 2
		}
		if o.proto == "udp" {
			for i := 0; i < 3; i++ {
				c.Write(nil) // goodbye
			}
		}
		harness.PrintResult(harness.LatMetrics(samples))
		return nil
	}

	if o.stream() {
		t0 := time.Now()
		for i := 0; i < o.n; i++ {
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(c, rbuf[:1]); err != nil {
			return fmt.Errorf("no acknowledgement: %w", err)
		}
		ns := float64(time.Since(t0).Nanoseconds())
		harness.PrintResult(map[string]float64{
			"bw_MiBps":   float64(o.size) * float64(o.n) / ns * 1e9 / (1 << 20),
			"msg_rate_M": float64(o.n) / ns * 1e3,
		})
		return nil
	}
	chunk := min(o.size, udpChunk)
	for i := 0; i < o.n; i++ {
		for off := 0; off < o.size; off += chunk {
			end := min(off+chunk, o.size)
			for {
				_, err := c.Write(buf[off:end])
				if errors.Is(err, syscall.ENOBUFS) {
					time.Sleep(10 * time.Microsecond)
					continue
				}
				if err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// sockOpts is o's transport for package sockets.
func sockOpts(o goOpts) sockets.Opts {
	return sockets.Opts{Proto: o.proto, Addr: o.addr, Dev: o.dev}
}

// acceptStream prints "READY addr" and accepts one connection: TCP, or
// rdmanet over a soft device (rdma_cm) or a shm device (rdmanet.Connect
// over a TCP stream). Closing the connection closes the device.
func acceptStream(o goOpts) (net.Conn, error) {
	l, err := sockets.Listen(sockOpts(o))
	if err != nil {
		return nil, err
	}
	fmt.Printf("READY %s\n", l.Addr())
	c, err := l.Accept()
	if err != nil {
		l.Close()
		return nil, err
	}
	return closer{c, func() { l.Close() }}, nil
}

// closer closes a connection, then its listener (and device).
type closer struct {
	net.Conn
	done func()
}

func (c closer) Close() error {
	err := c.Conn.Close()
	c.done()
	return err
}

// dialStream connects to acceptStream.
func dialStream(o goOpts) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return sockets.Dial(ctx, sockOpts(o), o.addr)
}
