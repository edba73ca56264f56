package rdmacm

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/rdmanet"
	"github.com/softrdma/softrdma/verbs"
)

// rstream: librdmacm's examples/rstream.c over rdmanet, the same command
// lines and output, so either side can be the C program.
//
// Test options (-T), as rstream's:
//
//	s|sockets      the test over TCP sockets instead of rsockets
//	b|blocking     calls that wait: Read and Write poll, then sleep
//	n|nonblocking  rstream's default: it retries non-blocking calls at once,
//	               so a waiting call here busy-polls and never sleeps
//	               (rdmanet.Config.BusyPoll); TCP sockets always block
//	a|async        rpoll before each call: Go's Read and Write wait for
//	               readiness themselves, so this changes nothing; b or n
//	               still says whether the wait sleeps
//	r|resolve      accepted: addresses always resolve through the CM
//	v|verify       check the data
//	f|fork         refused: the server forks per connection over TCP
//	               sockets, which a Go program cannot do
//
// Address formats (-f): ip and ipv6 take numeric addresses only, gid a
// RoCEv2 GID (the IP address in IPv6 notation, ::ffff:a.b.c.d for IPv4),
// anything else prints rstream's warning and resolves names.

type rstreamOpts struct {
	*runEnv
	dst, src, port          string
	bufSize, inline         int
	iterations, count, size int
	custom, sizeAll         bool
	verify, tcp             bool
	nonblock                bool   // -T n (the default) or b: see rdmanet.Config.BusyPoll
	format                  string // -f: "ip", "gid" or "" (names)
	name                    string
	fmtData, verData        uint8
	verTotal                int64
	buf                     []byte
	start, end              time.Time
	dev                     verbs.Context
	ln                      net.Listener
	riostream               bool // riostream: data by riowrite into the peer's riomap
}

var rstreamSizes = []struct{ size, option int }{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1}, {1 << 8, 1}, {1<<8 + 1<<7, 1},
	{1 << 9, 1}, {1<<9 + 1<<8, 1}, {1 << 10, 1}, {1<<10 + 1<<9, 1},
	{1 << 11, 1}, {1<<11 + 1<<10, 1}, {1 << 12, 0}, {1<<12 + 1<<11, 1},
	{1 << 13, 1}, {1<<13 + 1<<12, 1}, {1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1}, {1 << 16, 0}, {1<<16 + 1<<15, 1},
	{1 << 17, 1}, {1<<17 + 1<<16, 1}, {1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1}, {1 << 20, 0}, {1<<20 + 1<<19, 1},
	{1 << 21, 1}, {1<<21 + 1<<20, 1}, {1 << 22, 1}, {1<<22 + 1<<21, 1},
}

func runRstream(e *runEnv, args []string) error { return rstreamMain(e, "rstream", args) }

// runRiostream is librdmacm's riostream: rstream's tests with the data
// moved by riowrite into a buffer the peer mapped with riomap, the
// receiver watching the buffer's last byte.
func runRiostream(e *runEnv, args []string) error { return rstreamMain(e, "riostream", args) }

func rstreamMain(e *runEnv, name string, args []string) error {
	o := &rstreamOpts{runEnv: e, port: "7471", iterations: 1, count: 1000, size: 1000, inline: 64, name: "custom", riostream: name == "riostream", nonblock: true}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.StringVar(&o.dst, "s", "", "server_address (client mode)")
	fs.StringVar(&o.src, "b", "", "bind_address")
	format := fs.String("f", "", "address_format: name, ip, ipv6, or gid")
	fs.IntVar(&o.bufSize, "B", 0, "buffer_size")
	fs.IntVar(&o.inline, "i", 64, "inline_size")
	fs.Func("I", "iterations", func(v string) error { o.custom = true; return atoiTo(v, &o.iterations) })
	fs.Func("C", "transfer_count", func(v string) error { o.custom = true; return atoiTo(v, &o.count) })
	fs.Func("S", "transfer_size or all", func(v string) error {
		if strings.HasPrefix(strings.ToLower(v), "all") {
			o.sizeAll = true
			return nil
		}
		o.custom = true
		return atoiTo(v, &o.size)
	})
	fs.StringVar(&o.port, "p", "7471", "port_number")
	if !o.riostream {
		fs.Int("k", 0, "keepalive_time (not supported: ignored)")
	}
	fs.Func("T", "test_option: s|sockets a|async b|blocking n|nonblocking r|resolve v|verify (f|fork is refused)", o.testOption)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch f := strings.ToLower(*format); {
	case f == "":
	case strings.HasPrefix(f, "ip"):
		o.format = "ip"
	case strings.HasPrefix(f, "gid"):
		o.format = "gid"
	default:
		fmt.Fprintf(o.stderr, "Warning: unknown address format\n")
	}
	var err error
	if o.src, err = o.numericHost(o.src); err != nil {
		return err
	}
	if o.dst, err = o.numericHost(o.dst); err != nil {
		return err
	}
	return o.run()
}

// testOption is rstream's set_test_opt: one letter, or a word matched by
// its first letters ("sockets", "nonblocking", ...).
func (o *rstreamOpts) testOption(v string) error {
	l := strings.ToLower(v)
	word := func(w string) bool { return len(l) > 1 && strings.HasPrefix(l, w) }
	switch {
	case l == "s" || word("socket"):
		o.tcp = true
	case l == "a" || word("async"):
		// Read and Write wait for readiness themselves.
	case l == "b" || word("block"):
		o.nonblock = false
	case l == "n" || word("nonblock"):
		o.nonblock = true
	case l == "r" || word("resolve"):
	case l == "v" || word("verify"):
		o.verify = true
	case l == "f" || word("fork"):
		return errors.New("-T f (fork server processing) is not supported: rstream forks a process per connection over TCP sockets, and a Go program cannot fork; the server serves its connection in-process without it")
	default:
		return fmt.Errorf("unknown test option %q: s|sockets a|async b|blocking n|nonblocking r|resolve v|verify", v)
	}
	return nil
}

// numericHost turns host into the numeric address the tool connects to
// or binds, as -f says: names resolve unless -f ip; -f gid takes a RoCEv2
// GID, which is the IP address.
func (o *rstreamOpts) numericHost(host string) (string, error) {
	if host == "" {
		return "", nil
	}
	switch o.format {
	case "ip":
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "", fmt.Errorf("getaddrinfo: %q is not a numeric address (-f ip)", host)
		}
		return a.Unmap().String(), nil
	case "gid":
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Errorf("-f gid: %q is not a GID (16 bytes in IPv6 notation; a RoCEv2 GID of an IPv4 address is ::ffff:a.b.c.d)", host)
		}
		if a.IsLinkLocalUnicast() {
			return "", fmt.Errorf("-f gid: %v is a link-local GID: softrdma devices connect from the GIDs of their IP addresses; give the IP address's GID (::ffff:a.b.c.d for IPv4)", a)
		}
		return a.Unmap().String(), nil
	}
	a, err := device.ResolveIP(host)
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

func atoiTo(s string, p *int) error {
	v, err := strconv.Atoi(s)
	*p = v
	return err
}

func (o *rstreamOpts) config(latency bool) *rdmanet.Config {
	b := 1 << 19
	if o.bufSize > 0 {
		b = o.bufSize
	}
	c := &rdmanet.Config{RecvBuffer: b << 1, SendBuffer: b << 1, Inline: o.inline, BusyPoll: o.nonblock} // rsetsockopt doubles SO_*BUF
	if !latency || o.inline <= 0 {
		c.Inline = -1 // rstream turns inline off for bandwidth runs
	}
	if o.dev != nil {
		c.Context = o.dev
	}
	if o.riostream {
		c.IOMapSize = 1 // RDMA_IOMAPSIZE 1, as riostream sets
	}
	return c
}

func (o *rstreamOpts) run() error {
	maxSize := rstreamSizes[len(rstreamSizes)-1].size
	if o.custom {
		maxSize = o.size
	}
	o.buf = make([]byte, maxSize)
	if !o.tcp {
		var dev verbs.Context
		var err error
		if o.dst == "" {
			dev, err = o.opener.OpenCMServer(o.src)
		} else {
			dev, err = o.opener.OpenCM(o.src, o.dst)
		}
		if err != nil {
			return err
		}
		defer device.Close(dev)
		o.dev = dev
	}
	if o.dst == "" {
		if err := o.listen(); err != nil {
			return err
		}
		defer o.ln.Close()
	}
	fmt.Fprintf(o.stdout, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	if o.custom {
		c, err := o.connect(true)
		if err != nil {
			return err
		}
		defer c.Close()
		return o.runTest(c)
	}
	for _, latency := range []bool{true, false} {
		c, err := o.connect(latency)
		if err != nil {
			return err
		}
		for _, ts := range rstreamSizes {
			if ts.option > 0 && !o.sizeAll {
				continue
			}
			sz := sizeStr(int64(ts.size))
			if latency {
				o.name, o.count, o.size, o.iterations = sz+"_lat", 1, ts.size, sizeToCount(ts.size)
			} else {
				o.name, o.iterations, o.size, o.count = sz+"_bw", 1, ts.size, sizeToCount(ts.size)
			}
			if err := o.runTest(c); err != nil {
				c.Close()
				return err
			}
		}
		c.Close()
	}
	return nil
}

func (o *rstreamOpts) listen() error {
	host := o.src
	if host == "" && o.dev != nil {
		host = device.LocalAddr(o.dev).String()
	}
	addr := net.JoinHostPort(host, o.port)
	var err error
	if o.tcp {
		o.ln, err = net.Listen("tcp", addr)
	} else {
		o.ln, err = rdmanet.ListenConfig("rdma", addr, o.config(true))
	}
	if err != nil {
		return fmt.Errorf("rlisten: %w", err)
	}
	return nil
}

func (o *rstreamOpts) connect(latency bool) (net.Conn, error) {
	if o.dst == "" {
		if l, ok := o.ln.(*rdmanet.Listener); ok {
			l.SetConfig(o.config(latency))
		}
		c, err := o.ln.Accept()
		if err != nil {
			return nil, fmt.Errorf("raccept: %w", err)
		}
		return c, nil
	}
	host := o.dst
	if a, err := device.ResolveIP(host); err == nil {
		host = a.String()
	}
	addr := net.JoinHostPort(host, o.port)
	if o.tcp {
		return net.Dial("tcp", addr)
	}
	d := rdmanet.Dialer{Config: o.config(latency), Timeout: 30 * time.Second}
	c, err := d.DialContext(o.ctx, "rdma", addr)
	if err != nil {
		return nil, fmt.Errorf("rconnect: %w", err)
	}
	return c, nil
}

func (o *rstreamOpts) send(c net.Conn, size int) error {
	b := o.buf[:size]
	if o.verify {
		for i := range b {
			b[i] = o.fmtData
			o.fmtData++
		}
	}
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	return nil
}

func (o *rstreamOpts) recv(c net.Conn, size int) error {
	b := o.buf[:size]
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("rrecv: %w", err)
	}
	if o.verify {
		for i := range b {
			if b[i] != o.verData {
				return fmt.Errorf("data verification failed byte %d (got %d want %d at %d of %d: % x)", o.verTotal, b[i], o.verData, i, size, b[max(0, i-8):min(len(b), i+24)])
			}
			o.verData++
			o.verTotal++
		}
	}
	return nil
}

func (o *rstreamOpts) runTest(c net.Conn) error {
	if o.riostream {
		return o.runIOTest(c)
	}
	client := o.dst != ""
	xfer := func(first bool, size int) error {
		if first == client {
			return o.send(c, size)
		}
		return o.recv(c, size)
	}
	if err := xfer(true, 16); err != nil { // sync_test
		return err
	}
	if err := xfer(false, 16); err != nil {
		return err
	}
	o.start = time.Now()
	for i := 0; i < o.iterations; i++ {
		for t := 0; t < o.count; t++ {
			if err := xfer(true, o.size); err != nil {
				return err
			}
		}
		for t := 0; t < o.count; t++ {
			if err := xfer(false, o.size); err != nil {
				return err
			}
		}
	}
	o.end = time.Now()
	o.showPerf()
	return nil
}

// showPerf prints rstream's line: name size transfers iterations bytes
// seconds Gb/sec usec/xfer.
func (o *rstreamOpts) showPerf() {
	usec := float64(o.end.Sub(o.start).Microseconds())
	bytes := int64(o.iterations) * int64(o.count) * int64(o.size) * 2
	fmt.Fprintf(o.stdout, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", o.name, sizeStr(int64(o.size)), cntStr(int64(o.count)),
		cntStr(int64(o.iterations)), sizeStr(bytes), usec/1e6, float64(bytes*8)/(1000*usec),
		(usec/float64(o.iterations))/float64(o.count*2))
}

// sizeStr and cntStr are librdmacm's examples/common.c size_str, cnt_str.
func sizeStr(size int64) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	var fraction int64
	if size/base < 10 {
		fraction = (size % base) * 10 / base
	}
	if fraction != 0 {
		return fmt.Sprintf("%d.%d%s", size/base, fraction, mag)
	}
	return fmt.Sprintf("%d%s", size/base, mag)
}

func cntStr(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprintf("%d", n)
}

func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// runIOTest is riostream's run_test.
func (o *rstreamOpts) runIOTest(nc net.Conn) error {
	c, ok := nc.(*rdmanet.Conn)
	if !ok {
		return fmt.Errorf("riostream needs rsockets (no -T s)")
	}
	client := o.dst != ""
	m, err := c.IOMap(o.size, 0)
	if err != nil {
		return fmt.Errorf("riomap: %w", err)
	}
	defer m.Unmap()
	buf := m.Bytes()
	poll := &buf[o.size-1]
	*poll = 0xff
	msg := make([]byte, 16)
	sync := func(send bool) error {
		if send {
			_, err := c.Write(msg)
			return err
		}
		_, err := io.ReadFull(c, msg)
		return err
	}
	if err := sync(client); err != nil {
		return err
	}
	if err := sync(!client); err != nil {
		return err
	}
	write := func() error {
		if _, err := c.IOWrite(buf, 0); err != nil {
			return fmt.Errorf("riowrite: %w", err)
		}
		return nil
	}
	var marker uint8
	sendAll := func() error {
		for t := 0; t < o.count-1; t++ {
			if err := write(); err != nil {
				return err
			}
		}
		*poll = marker
		marker++
		if o.verify {
			for i := range buf[:o.size-1] {
				buf[i] = o.fmtData
				o.fmtData++
			}
		}
		return write()
	}
	recvAll := func() error {
		want := marker
		marker++
		for spins := 0; *poll != want; spins++ {
			m.Progress()
			if spins%64 == 63 {
				runtime.Gosched()
			}
			if spins%(1<<16) == 0 {
				if err := c.SetReadDeadline(time.Now()); err == nil {
					// A zero-length read reports a failed connection.
					if _, err := c.Read(nil); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && err != io.EOF {
						return fmt.Errorf("riostream: waiting for data: %w", err)
					}
					c.SetReadDeadline(time.Time{})
				}
			}
		}
		if o.verify {
			for i, b := range buf[:o.size-1] {
				if b != o.verData {
					return fmt.Errorf("data verification failed byte %d", o.verTotal+int64(i))
				}
				o.verData++
			}
			o.verTotal += int64(o.size - 1)
		}
		return nil
	}
	o.start = time.Now()
	for i := 0; i < o.iterations; i++ {
		if client {
			if err := sendAll(); err != nil {
				return err
			}
			if err := recvAll(); err != nil {
				return err
			}
		} else {
			if err := recvAll(); err != nil {
				return err
			}
			if err := sendAll(); err != nil {
				return err
			}
		}
	}
	o.end = time.Now()
	o.showPerf()
	return nil
}
