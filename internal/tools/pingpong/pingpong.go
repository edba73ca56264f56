// Package pingpong is ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong
// and ibv_srq_pingpong over softrdma, with rdma-core's flags, TCP exchange
// (port 18515, internal/pingpong) and output, so either end can be the
// rdma-core tool.
package pingpong

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/internal/getopt"
	"github.com/softrdma/softrdma/internal/pingpong"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/verbs"
)

const (
	recvWRID = 1
	sendWRID = 2
)

type ppFlags struct {
	port    int
	dev     string
	ibPort  int
	size    int
	mtu     int
	rxDepth int
	iters   int
	sl      int
	events  bool
	gidx    int
	check   bool
	server  string
	numQP   int // -q, ibv_srq_pingpong's only
	pcap    string
	metrics string
	log     bool

	// The run's, besides the flags: its output, and the opener of its
	// device.
	stdout, stderr io.Writer
	opener         *device.Opener
}

// Commands are the tools Run runs, by the name Run takes as args[0].
func Commands() []string {
	return []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"}
}

// Run runs the pingpong tool args[0] names (one of Commands) with the
// command line args[1:]. -h prints the usage and returns flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("pingpong.Run: args[0] must name the tool (ibv_rc_pingpong, ...)")
	}
	opener, err := device.NewOpener(ctx, stderr)
	if err != nil {
		return err
	}
	defer opener.Close()
	name, defSize := args[0], 4096
	if name == "ibv_ud_pingpong" {
		defSize = 2048
	}
	f, err := parsePPFlags(name, args[1:], defSize, stderr)
	if err != nil {
		return err
	}
	f.stdout, f.stderr, f.opener = stdout, stderr, opener
	opener.Pcap, opener.Metrics, opener.Log = f.pcap, f.metrics, f.log
	switch name {
	case "ibv_rc_pingpong":
		return runPingpong(ctx, verbs.QPTypeRC, f)
	case "ibv_uc_pingpong":
		return runPingpong(ctx, verbs.QPTypeUC, f)
	case "ibv_ud_pingpong":
		return runUDPingpong(ctx, f)
	case "ibv_srq_pingpong":
		return runSRQPingpong(ctx, f)
	}
	return fmt.Errorf("pingpong.Run: unknown tool %q (want one of %v)", name, Commands())
}

// ppOption is a getopt option with its line in the usage.
type ppOption struct {
	getopt.Option
	arg, help string
}

// parsePPFlags parses as pingpong.c's getopt_long does. Options of
// rdma-core's that softrdma does not implement are refused by name.
func parsePPFlags(name string, args []string, defSize int, usage io.Writer) (*ppFlags, error) {
	f := &ppFlags{port: pingpong.DefaultPort, ibPort: 1, size: defSize, mtu: 1024, rxDepth: 500, iters: 1000, gidx: -1, numQP: 16}
	help := false
	refuse := func(opt string) func(string) error {
		return func(string) error {
			return fmt.Errorf("option %s is not supported by softrdma's %s", opt, name)
		}
	}
	opts := []ppOption{
		{getopt.Option{Short: 'p', Long: "port", HasArg: true, Set: getopt.Int(&f.port, "-p")}, "port", fmt.Sprintf("listen on/connect to port <port> (default %d)", pingpong.DefaultPort)},
		{getopt.Option{Short: 'd', Long: "ib-dev", HasArg: true, Set: getopt.String(&f.dev)}, "dev", "use IB device <dev> (default first device found)"},
		{getopt.Option{Short: 'i', Long: "ib-port", HasArg: true, Set: getopt.Int(&f.ibPort, "-i")}, "port", "use port <port> of IB device (default 1)"},
		{getopt.Option{Short: 's', Long: "size", HasArg: true, Set: getopt.Int(&f.size, "-s")}, "size", fmt.Sprintf("size of message to exchange (default %d)", defSize)},
		{getopt.Option{Short: 'm', Long: "mtu", HasArg: true, Set: getopt.Int(&f.mtu, "-m")}, "size", "path MTU (default 1024)"},
		{getopt.Option{Short: 'r', Long: "rx-depth", HasArg: true, Set: getopt.Int(&f.rxDepth, "-r")}, "dep", "number of receives to post at a time (default 500)"},
		{getopt.Option{Short: 'n', Long: "iters", HasArg: true, Set: getopt.Int(&f.iters, "-n")}, "iters", "number of exchanges (default 1000)"},
		{getopt.Option{Short: 'l', Long: "sl", HasArg: true, Set: getopt.Int(&f.sl, "-l")}, "sl", "service level value"},
		{getopt.Option{Short: 'e', Long: "events", Set: getopt.Flag(&f.events)}, "", "sleep on CQ events (default poll)"},
		{getopt.Option{Short: 'g', Long: "gid-idx", HasArg: true, Set: getopt.Int(&f.gidx, "-g")}, "gid index", "local port gid index"},
		{getopt.Option{Short: 'c', Long: "chk", Set: getopt.Flag(&f.check)}, "", "validate received buffer"},
		{getopt.Option{Long: "pcap", HasArg: true, Set: getopt.String(&f.pcap)}, "file", "write the device's RoCEv2 packets to this pcapng file"},
		{getopt.Option{Long: "metrics", HasArg: true, Set: getopt.String(&f.metrics)}, "addr", "serve the device's counters for Prometheus on host:port/metrics"},
		{getopt.Option{Long: "log", Set: getopt.Flag(&f.log)}, "", "log the device's QP errors, retransmissions, RNR waits and drops on stderr (rate-limited)"},
		{getopt.Option{Short: 'h', Long: "help", Set: getopt.Flag(&help)}, "", "print this help"},
	}
	if name == "ibv_srq_pingpong" {
		opts = append(opts, ppOption{getopt.Option{Short: 'q', Long: "num-qp", HasArg: true, Set: getopt.Int(&f.numQP, "-q")}, "num", "number of QPs (default 16)"})
	}
	table := make([]getopt.Option, 0, len(opts)+10)
	for _, opt := range opts {
		if name == "ibv_ud_pingpong" && opt.Long == "mtu" {
			continue // UD's path MTU is the port's
		}
		table = append(table, opt.Option)
	}
	for _, r := range []struct {
		short byte
		long  string
	}{{'o', "odp"}, {'O', "iodp"}, {'P', "prefetch"}, {'t', "ts"}, {'j', "dm"}, {'N', "new_send"}, {0, "contiguous-mr"}} {
		opt := "--" + r.long
		if r.short != 0 {
			opt = fmt.Sprintf("-%c (--%s)", r.short, r.long)
		}
		table = append(table, getopt.Option{Short: r.short, Long: r.long, Set: refuse(opt)})
	}
	printUsage := func() {
		fmt.Fprintf(usage, "Usage:\n  %s            start a server and wait for connection\n  %s <host>     connect to server at <host>\n\nOptions:\n", name, name)
		for _, opt := range opts {
			if name == "ibv_ud_pingpong" && opt.Long == "mtu" {
				continue
			}
			names := "    "
			if opt.Short != 0 {
				names = fmt.Sprintf("-%c, ", opt.Short)
			}
			names += "--" + opt.Long
			if opt.arg != "" {
				names += "=<" + opt.arg + ">"
			}
			fmt.Fprintf(usage, "  %-26s %s\n", names, opt.help)
		}
		fmt.Fprintf(usage, "\nThe device is a softrdma device: softrdma_<netdev>, or set SOFTRDMA_ADDR to the IP address to use.\n")
	}
	operands, err := getopt.Parse(table, args)
	if err != nil {
		var ge *getopt.Error
		if errors.As(err, &ge) {
			printUsage()
		}
		return nil, err
	}
	if help {
		printUsage()
		return nil, flag.ErrHelp
	}
	if len(operands) > 1 {
		printUsage()
		return nil, errors.New("too many arguments")
	}
	if len(operands) == 1 {
		f.server = operands[0]
	}
	if verbs.MTUFromBytes(f.mtu).Bytes() != f.mtu {
		return nil, fmt.Errorf("invalid MTU %d", f.mtu)
	}
	if f.size < 1 || f.iters < 1 || f.rxDepth < 1 {
		return nil, errors.New("size, iterations and rx depth must be positive")
	}
	return f, nil
}

// ppConn is the TCP connection of the exchange: the client dials, the
// server listens for one connection.
// ppConnectTimeout bounds the client's TCP connect; the exchange that
// follows is bounded by the 60 s context of each tool.
const ppConnectTimeout = 20 * time.Second

func ppConn(f *ppFlags) (net.Conn, error) {
	addr := net.JoinHostPort(f.server, strconv.Itoa(f.port))
	if f.server != "" {
		c, err := net.DialTimeout("tcp", addr, ppConnectTimeout)
		if err != nil {
			return nil, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
		}
		return c, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(f.port)))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", f.port, err)
	}
	defer ln.Close()
	return ln.Accept()
}

func runPingpong(ctx context.Context, typ verbs.QPType, f *ppFlags) error {
	dev, err := f.opener.Open(f.dev)
	if err != nil {
		return err
	}
	defer dev.Close()
	r, err := newResources(dev, typ, f.size, f.rxDepth, 1, f.events)
	if err != nil {
		return err
	}
	defer r.close()
	for i := range r.buf {
		r.buf[i] = 0x7b
	}
	if err := r.initRC(f); err != nil {
		return err
	}
	local, err := localDest(dev, f, r.qp.QPNum())
	if err != nil {
		return err
	}
	fmt.Fprint(f.stdout, pingpong.LocalAddressLine(local))
	conn, err := ppConn(f)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Post the receives before the peer can send.
	routs, err := r.postRecvs(f.rxDepth, f.size)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	connectQP := func(rem pingpong.Dest) error {
		return r.connectRC(local.PSN, rem.QPN, rem.PSN, verbs.GID(rem.GID), f)
	}
	remote, err := exchange(ctx, f, conn, local, connectQP)
	if err != nil {
		return err
	}
	fmt.Fprint(f.stdout, pingpong.RemoteAddressLine(remote))
	return r.loop(ctx, f, routs, nil, 0, 0)
}

// localDest is this side's address for QP qpn: a random PSN and, with -g,
// the GID of that index. A shared-memory device always sends its GID
// (index 0): without it the peer cannot find this process, so no -g
// would only fail the connection.
func localDest(dev verbs.Context, f *ppFlags, qpn uint32) (pingpong.Dest, error) {
	d := pingpong.Dest{QPN: qpn, PSN: rand.Uint32() & 0xFFFFFF}
	if f.gidx < 0 && device.IsShm(dev) {
		f.gidx = 0
	}
	if f.gidx >= 0 {
		g, err := dev.QueryGID(uint8(f.ibPort), f.gidx)
		if err != nil {
			return d, fmt.Errorf("can't read sgid of index %d: %w", f.gidx, err)
		}
		d.GID = g
	}
	return d, nil
}

// exchange swaps addresses with the peer and connects the QP: the client
// sends first and connects after the reply; the server connects before it
// replies, as pingpong.c does.
func exchange(ctx context.Context, f *ppFlags, conn net.Conn, local pingpong.Dest, connect func(pingpong.Dest) error) (pingpong.Dest, error) {
	if f.server == "" {
		return pingpong.ServerExchange(ctx, conn, local, connect)
	}
	remote, err := pingpong.ClientExchange(ctx, conn, local)
	if err != nil {
		return remote, err
	}
	if err := connect(remote); err != nil {
		return remote, fmt.Errorf("Couldn't connect to remote QP: %w", err)
	}
	return remote, nil
}

// loop runs the ping-pong: whoever has both its last send completed and a
// receive in hand sends the next message (pingpong.c's pending logic).
func (r *resources) loop(ctx context.Context, f *ppFlags, routs int, ah verbs.AH, remoteQPN, qkey uint32) error {
	pending := recvWRID
	send := func() error {
		wr := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{r.mr.SGE(r.sendOff, f.size)},
			AH: ah, RemoteQPN: remoteQPN, RemoteQKey: qkey}
		return r.qp.PostSend(&wr)
	}
	if f.server != "" {
		if err := send(); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
		pending |= sendWRID
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	wcs := make([]verbs.WC, 2)
	for rcnt < f.iters || scnt < f.iters {
		if f.events {
			if err := r.cq.Wait(ctx); err != nil {
				return err
			}
		}
		n, err := r.cq.Poll(wcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				routs--
				if routs <= 1 {
					k, err := r.postRecvs(f.rxDepth-routs, f.size)
					if err != nil {
						return err
					}
					routs += k
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", wc.WRID)
			}
			pending &^= int(wc.WRID)
			if scnt < f.iters && pending == 0 {
				if err := send(); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	fmt.Fprint(f.stdout, pingpong.ResultLines(f.size, f.iters, time.Since(start)))
	return nil
}
