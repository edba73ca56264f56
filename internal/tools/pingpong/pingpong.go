package main

// ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong, with rdma-core's
// flags, TCP exchange (port 18515) and output, so either end can be the
// rdma-core tool.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/internal/pingpong"
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
}

func parsePPFlags(name string, args []string, defSize int) (*ppFlags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f := &ppFlags{}
	fs.IntVar(&f.port, "p", pingpong.DefaultPort, "listen on/connect to port")
	fs.StringVar(&f.dev, "d", "", "use IB device (default first device found)")
	fs.IntVar(&f.ibPort, "i", 1, "use port of IB device")
	fs.IntVar(&f.size, "s", defSize, "size of message to exchange")
	fs.IntVar(&f.mtu, "m", 1024, "path MTU")
	fs.IntVar(&f.rxDepth, "r", 500, "number of receives to post at a time")
	fs.IntVar(&f.iters, "n", 1000, "number of exchanges")
	fs.IntVar(&f.sl, "l", 0, "service level value")
	fs.BoolVar(&f.events, "e", false, "sleep on CQ events (default poll)")
	fs.IntVar(&f.gidx, "g", -1, "local port gid index")
	fs.BoolVar(&f.check, "c", false, "validate received buffer")
	fs.StringVar(&toolObs.pcap, "pcap", "", "write the device's RoCEv2 packets to this pcapng file")
	fs.StringVar(&toolObs.metrics, "metrics", "", "serve the device's counters for Prometheus on host:port/metrics")
	fs.BoolVar(&toolObs.log, "log", false, "log the device's QP errors, retransmissions, RNR waits and drops on stderr (rate-limited)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage:\n  %s            start a server and wait for connection\n  %s <host>     connect to server at <host>\n\nOptions:\n", name, name)
		fs.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nThe device is a softrdma device: softrdma_<netdev>, or set SOFTRDMA_ADDR to the IP address to use.\n")
	}
	args, err := ppLongOptions(name, args)
	if err != nil {
		fs.Usage()
		return nil, err
	}
	if err := fs.Parse(reorderArgs(fs, args)); err != nil {
		return nil, err
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return nil, errors.New("too many arguments")
	}
	f.server = fs.Arg(0)
	if verbs.MTUFromBytes(f.mtu).Bytes() != f.mtu {
		return nil, fmt.Errorf("invalid MTU %d", f.mtu)
	}
	if f.size < 1 || f.iters < 1 || f.rxDepth < 1 {
		return nil, errors.New("size, iterations and rx depth must be positive")
	}
	return f, nil
}

// ppLong maps rdma-core's long options (pingpong.c's getopt_long table) to
// the short flags above. Options rdma-core has but softrdma does not
// implement map to "" and are refused by name.
var ppLong = map[string]string{
	"port": "p", "ib-dev": "d", "ib-port": "i", "size": "s", "mtu": "m",
	"rx-depth": "r", "iters": "n", "sl": "l", "events": "e", "gid-idx": "g",
	"chk": "c", "pcap": "pcap", "metrics": "metrics", "log": "log", "odp": "", "iodp": "", "prefetch": "", "ts": "", "dm": "",
	"new_send": "", "contiguous-mr": "",
}

// ppShortRefused are rdma-core's short options softrdma refuses.
var ppShortRefused = map[string]string{"o": "odp", "O": "iodp", "P": "prefetch", "t": "ts", "j": "dm", "N": "new_send"}

// ppLongOptions rewrites "--size 64", "--size=64" and unambiguous prefixes
// ("--it 5") as the short flags, as getopt_long accepts them, and refuses
// the options of rdma-core's that softrdma does not implement.
func ppLongOptions(name string, args []string) ([]string, error) {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...), nil
		}
		if len(a) == 2 && a[0] == '-' {
			if long, ok := ppShortRefused[a[1:]]; ok {
				return nil, fmt.Errorf("option -%s (--%s) is not supported by softrdma's %s", a[1:], long, name)
			}
		}
		if !strings.HasPrefix(a, "--") || len(a) == 2 {
			out = append(out, a)
			continue
		}
		key, val, hasVal := strings.Cut(a[2:], "=")
		short, ok := ppLong[key]
		if !ok {
			var match []string
			for l := range ppLong {
				if strings.HasPrefix(l, key) {
					match = append(match, l)
				}
			}
			if len(match) != 1 {
				return nil, fmt.Errorf("unrecognized or ambiguous option '--%s'", key)
			}
			key, short = match[0], ppLong[match[0]]
		}
		if short == "" || (name == "ibv_ud_pingpong" && key == "mtu") {
			return nil, fmt.Errorf("option --%s is not supported by softrdma's %s", key, name)
		}
		if hasVal {
			out = append(out, "-"+short+"="+val)
		} else {
			out = append(out, "-"+short)
		}
	}
	return out, nil
}

// reorderArgs lets flags follow the positional server name, as getopt does.
func reorderArgs(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			name := a[1:]
			if len(name) > 0 && name[0] == '-' {
				name = name[1:]
			}
			if f := fs.Lookup(name); f != nil && !isBool(f) && i+1 < len(args) && !containsEq(a) {
				i++
				flags = append(flags, args[i])
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func containsEq(s string) bool {
	for _, c := range s {
		if c == '=' {
			return true
		}
	}
	return false
}

func runRCPingpong(args []string) error { return runPingpong("ibv_rc_pingpong", verbs.QPTypeRC, args) }
func runUCPingpong(args []string) error { return runPingpong("ibv_uc_pingpong", verbs.QPTypeUC, args) }

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

func runPingpong(name string, typ verbs.QPType, args []string) error {
	f, err := parsePPFlags(name, args, 4096)
	if err != nil {
		return err
	}
	dev, err := openToolDevice(f.dev)
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
	fmt.Print(pingpong.LocalAddressLine(local))
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connectQP := func(rem pingpong.Dest) error {
		return r.connectRC(local.PSN, rem.QPN, rem.PSN, verbs.GID(rem.GID), f)
	}
	remote, err := exchange(ctx, f, conn, local, connectQP)
	if err != nil {
		return err
	}
	fmt.Print(pingpong.RemoteAddressLine(remote))
	return r.loop(f, routs, nil, 0, 0)
}

// localDest is this side's address for QP qpn: a random PSN and, with -g,
// the GID of that index. A shared-memory device always sends its GID
// (index 0): without it the peer cannot find this process, so no -g
// would only fail the connection.
func localDest(dev verbs.Context, f *ppFlags, qpn uint32) (pingpong.Dest, error) {
	d := pingpong.Dest{QPN: qpn, PSN: rand.Uint32() & 0xFFFFFF}
	if f.gidx < 0 && isShm(dev) {
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
func (r *resources) loop(f *ppFlags, routs int, ah verbs.AH, remoteQPN, qkey uint32) error {
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
	ctx := context.Background()
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
	fmt.Print(pingpong.ResultLines(f.size, f.iters, time.Since(start)))
	return nil
}
