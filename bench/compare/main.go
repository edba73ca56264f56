//go:build linux

// Command compare measures softrdma side by side with UCX (ucx_perftest over
// its tcp transport), libfabric (fi_pingpong over the tcp and udp providers)
// and plain Go TCP/UDP sockets, all as two processes on loopback, and its
// shared-memory provider against UCX over POSIX shared memory, in one run:
// every round runs every measurement once, alternating the order of the
// stacks (A/B, then B/A), and the report is the median over rounds with
// softrdma/anchor ratios, a JSON file with every sample and a PNG plot.
//
//	go run ./bench/compare            # 5 rounds, about 4 minutes on 2 vCPUs
//	go run ./bench/compare -quick     # 3 rounds, fewer sizes, about a minute
//	go run ./bench/compare -h         # all flags
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type config struct {
	rounds           int
	quick            bool
	sizes, rsSizes   []int
	latN             int
	budget           int64 // bytes moved per bandwidth measurement
	maxMsgs, minIter int
	srSmallMsgs      int // messages per softrdma bandwidth run at ≤ smallSize bytes
	timeout          time.Duration
	stacks           map[string]bool
	install          bool
	jsonPath         string
	plotPath         string
	srMode           string
	srvAddr, cliAddr string
	softrdmaBin      string
	verbose          bool
	from             string
	secure           []string // softrdma's protected modes to measure too
	shmPin           bool
	softrdmaEnv      []string // extra environment of every softrdma process
}

const (
	defSizes      = "2,8,64,512,4096,32768,262144,1048576,8388608"
	quickSizes    = "2,8,4096,65536,1048576,8388608"
	defRSSizes    = "8,65536,1048576"
	quickRSSizes  = "8,1048576"
	allStacks     = "softrdma,ucx,libfabric,go,shm,rdmanet"
	latSize       = 8
	refSize       = 1 << 20
	rateTargetM   = 5.0 // 8-byte message rate target, million messages/s
	seriesWrite   = "softrdma WRITE"
	seriesUCXTag  = "UCX tcp tag"
	seriesSend    = "softrdma SEND"
	seriesRead    = "softrdma READ"
	seriesGoUDP   = "Go UDP"
	seriesRnet    = "softrdma rdmanet"
	seriesRnetShm = "softrdma rdmanet shm"
	seriesGoTCP   = "Go TCP"
	seriesFloorPP = "Go UDP busy-poll" // the kernel floor's latency (floor.go)
	seriesFloorBW = "Go UDP GSO"       // the kernel floor's bandwidth
	rnPPSize      = 64                 // rdmanet's request/response size
	rnStreamSize  = 1 << 16            // rdmanet's stream write size
	httpSize      = 1 << 20            // the net/http echo's body
	grpcSize      = 0                  // the gRPC row's slot: a unary health Check
	errLinesFirst = 12
)

func parseFlags() (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: go run ./bench/compare [flags]

Measures softrdma (two processes over loopback UDP) against UCX
ucx_perftest (UCX_TLS=tcp), libfabric fi_pingpong (tcp, udp) and plain Go
TCP/UDP, and (stack shm) softrdma's shared-memory provider (-d shm0)
against UCX over POSIX shared memory (UCX_TLS=posix,self), interleaved
over rounds; prints medians and softrdma/anchor ratios, writes JSON and a
PNG.

The go stack includes the kernel floor (Linux UDP with nothing on top,
what no RoCEv2-over-UDP transport can beat here): udp-busy, a busy-polled
raw-syscall ping-pong of a %d-byte datagram (an 8-byte WRITE ONLY: BTH,
RETH, payload, ICRC), and udp-gso, a stream of UDP_SEGMENT datagrams of
%d segments of %d bytes (a 4096-byte-MTU WRITE ONLY) via sendmmsg to a
UDP_GRO receiver busy-polling recvmmsg; printed as softrdma/floor ratios
and reported-only targets. Installs ucx-utils and libfabric-bin with apt-get
when missing (root); a stack that cannot be set up is skipped with a reason.

`, floorPacket(latSize), floorSegs, floorSeg)
		fs.PrintDefaults()
	}
	fs.IntVar(&c.rounds, "rounds", 5, "rounds; every measurement runs once per round (-quick: 3)")
	fs.BoolVar(&c.quick, "quick", false, "about a minute: 3 rounds, fewer sizes, shorter runs")
	sizes := fs.String("sizes", defSizes, "bandwidth sweep sizes in bytes (8 and 1048576 are always added) (-quick: "+quickSizes+")")
	rsSizes := fs.String("rs-sizes", defRSSizes, "sizes for softrdma READ and SEND bandwidth (-quick: "+quickRSSizes+")")
	fs.IntVar(&c.latN, "lat-n", 10000, "round trips per latency measurement (-quick: 3000)")
	budget := fs.Int("budget-mib", 256, "MiB moved per bandwidth measurement, before the message-count limits (-quick: 64)")
	fs.IntVar(&c.maxMsgs, "max-msgs", 50000, "most messages per bandwidth measurement (-quick: 30000)")
	fs.IntVar(&c.srSmallMsgs, "sr-small-msgs", 1000000, "messages per softrdma bandwidth run of 64 bytes or less, so that it lasts about as long as the anchors' (-quick: 300000)")
	fs.IntVar(&c.minIter, "min-msgs", 16, "fewest messages per bandwidth measurement")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "kill any child process that runs longer")
	stacks := fs.String("stacks", allStacks, "stacks to run")
	fs.BoolVar(&c.install, "install", true, "apt-get install missing anchors (ucx-utils, libfabric-bin)")
	fs.StringVar(&c.jsonPath, "json", "softrdma-compare.json", "write every sample and the medians here (empty: none)")
	fs.StringVar(&c.plotPath, "plot", "softrdma-compare.png", "write the plot here (empty: none)")
	fs.StringVar(&c.srMode, "softrdma-mode", "auto", "auto, perftest (two processes: softrdma ib_write_bw ...) or bench (one process: softrdma bench)")
	addrs := fs.String("addrs", "127.0.79.2,127.0.79.3", "softrdma server,client device addresses (RoCEv2 uses UDP 4791 on each)")
	fs.StringVar(&c.softrdmaBin, "softrdma-bin", "", "use this softrdma binary instead of building ./cmd/softrdma")
	srEnv := fs.String("softrdma-env", "", "comma-separated NAME=value pairs added to the environment of every softrdma CLI process of the softrdma and shm stacks, e.g. GOMAXPROCS=1 (docs/performance.md)")
	secure := fs.String("secure", "auth,encrypt", "also measure softrdma's protected modes (--secure; docs/security.md): 8-byte WRITE latency and 1 MiB WRITE bandwidth, interleaved with the plain runs (empty: none)")
	fs.BoolVar(&c.verbose, "v", false, "print every measurement")
	fs.BoolVar(&c.shmPin, "shm-pin", true, "shm stack: run servers on CPU 0 and clients on CPU 1 (taskset), softrdma and UCX alike")
	fs.StringVar(&profileDir, "profile-dir", "", "write a CPU profile and a runtime trace of both processes of every pair here (softrdma's and the Go loops'; NNNN-program-test-size-srv|cli.pprof|.trace), to see what limits a row")
	fs.StringVar(&c.from, "from", "", "measure nothing: reprint the tables and redraw the plot from this JSON file of an earlier run")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			return nil, fmt.Errorf("-profile-dir: %w", err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		if !set["rounds"] {
			c.rounds = 3
		}
		if !set["sizes"] {
			*sizes = quickSizes
		}
		if !set["rs-sizes"] {
			*rsSizes = quickRSSizes
		}
		if !set["lat-n"] {
			c.latN = 3000
		}
		if !set["budget-mib"] {
			*budget = 64
		}
		if !set["max-msgs"] {
			c.maxMsgs = 30000
		}
		if !set["sr-small-msgs"] {
			c.srSmallMsgs = 300000
		}
	}
	var err error
	if c.sizes, err = parseSizes(*sizes); err != nil {
		return nil, fmt.Errorf("-sizes: %v", err)
	}
	for _, s := range []int{latSize, refSize} {
		if !slices.Contains(c.sizes, s) {
			c.sizes = append(c.sizes, s)
		}
	}
	sort.Ints(c.sizes)
	if c.rsSizes, err = parseSizes(*rsSizes); err != nil {
		return nil, fmt.Errorf("-rs-sizes: %v", err)
	}
	c.budget = int64(*budget) << 20
	if c.rounds < 1 || c.latN < 5 || c.maxMsgs < 5 || c.minIter < 5 || c.budget <= 0 {
		return nil, fmt.Errorf("-rounds must be ≥ 1, -lat-n, -max-msgs and -min-msgs ≥ 5 (perftest's minimum), -budget-mib > 0")
	}
	for _, m := range strings.Split(*secure, ",") {
		switch m = strings.TrimSpace(m); m {
		case "":
		case "auth", "encrypt":
			if !slices.Contains(c.secure, m) {
				c.secure = append(c.secure, m)
			}
		default:
			return nil, fmt.Errorf("-secure: unknown mode %q (have auth, encrypt)", m)
		}
	}
	c.stacks = map[string]bool{}
	for _, s := range strings.Split(*stacks, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(strings.Split(allStacks, ","), s) {
			return nil, fmt.Errorf("-stacks: unknown stack %q (have %s)", s, allStacks)
		}
		c.stacks[s] = true
	}
	a, b, ok := strings.Cut(*addrs, ",")
	if !ok || a == b {
		return nil, fmt.Errorf("-addrs wants two different addresses, server,client")
	}
	c.srvAddr, c.cliAddr = strings.TrimSpace(a), strings.TrimSpace(b)
	if c.softrdmaEnv, err = parseEnv(*srEnv); err != nil {
		return nil, fmt.Errorf("-softrdma-env: %v", err)
	}
	switch c.srMode {
	case "auto", "perftest", "bench":
	default:
		return nil, fmt.Errorf("-softrdma-mode: want auto, perftest or bench")
	}
	return c, nil
}

// parseEnv parses -softrdma-env: NAME=value pairs separated by commas.
func parseEnv(s string) ([]string, error) {
	var env []string
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%q is not NAME=value", kv)
		}
		env = append(env, kv)
	}
	return env, nil
}

func parseSizes(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1<<30 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		if !slices.Contains(v, n) {
			v = append(v, n)
		}
	}
	sort.Ints(v)
	return v, nil
}

// bwIters is the number of messages a bandwidth measurement of size sends.
// httpCalls is how many 1 MiB echoes an HTTP run makes: a fiftieth of
// the round trips of a latency run (each moves 2 MiB).
func (c *config) httpCalls() int { return max(20, c.latN/50) }

// grpcCalls is how many unary calls a gRPC run makes.
func (c *config) grpcCalls() int { return max(20, c.latN/2) }

func (c *config) bwIters(size int) int {
	return int(max(int64(c.minIter), min(int64(c.maxMsgs), c.budget/int64(size))))
}

// smallSize is the largest message size at which softrdma runs move
// srSmallMsgs messages: at a million messages a second, max-msgs messages
// take 50 ms, where one scheduling hiccup of this shared machine decides
// the result, while the anchors, ten times slower, run for half a second.
const smallSize = 64

// srIters is bwIters for softrdma: srSmallMsgs messages at small sizes.
func (c *config) srIters(size int) int {
	if size <= smallSize {
		return max(c.bwIters(size), c.srSmallMsgs)
	}
	return c.bwIters(size)
}

// putIters is bwIters for ucp_put_bw, which over UCX's tcp transport drops
// to tens of MB/s at 1 MiB and beyond: a quarter of the byte budget, and
// perftest's minimum of 5 rather than -min-msgs.
func (c *config) putIters(size int) int {
	return int(max(5, min(int64(c.maxMsgs), c.budget/4/int64(size))))
}

// ppIters is the number of round trips of a ping-pong at size.
func (c *config) ppIters(size int) int {
	return int(max(10, min(int64(c.latN), c.budget/int64(2*size))))
}

// job is one measurement; it runs once per round.
type job struct {
	series string // e.g. "softrdma WRITE"; the row in tables and the line in plots
	tool   string // what it runs, for the tables
	kind   string // "lat", "bw", "http" or "grpc"
	size   int
	run    func(context.Context) (metrics, runInfo, error)

	ok, fails int
	disabled  bool
}

// sample is one run of one job.
type sample struct {
	Series  string  `json:"series"`
	Tool    string  `json:"tool"`
	Kind    string  `json:"kind"`
	Size    int     `json:"size"`
	Round   int     `json:"round"`
	Seconds float64 `json:"seconds"`
	Metrics metrics `json:"metrics,omitempty"`
	Error   string  `json:"error,omitempty"`
	runInfo
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "_go-server" || os.Args[1] == "_go-client") {
		goBaselineMain(os.Args[1], os.Args[2:])
		return
	}
	cfg, err := parseFlags()
	if err == flag.ErrHelp {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	if cfg.from != "" {
		os.Exit(replay(cfg))
	}
	handleSignals()
	code := run(cfg)
	killAll()
	os.Exit(code)
}

func run(cfg *config) int {
	ctx := context.Background()
	t0 := time.Now()
	out := &report{
		Time: t0.UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Args: os.Args[1:], Rounds: cfg.rounds, Sizes: cfg.sizes, LatN: cfg.latN,
		Versions: map[string]string{}, Skipped: map[string]string{}, Notes: []string{},
	}
	out.Host, _ = os.Hostname()
	tmp, err := os.MkdirTemp("", "softrdma-compare-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}

	var jobs []*job
	add := func(series, tool, kind string, size int, run func(context.Context) (metrics, runInfo, error)) {
		jobs = append(jobs, &job{series: series, tool: tool, kind: kind, size: size, run: run})
	}
	skip := func(stack, why string) {
		out.Skipped[stack] = why
		fmt.Printf("SKIP %s: %s\n", stack, why)
	}

	// softrdma
	sr := &softrdma{bin: cfg.softrdmaBin, srvAddr: cfg.srvAddr, cliAddr: cfg.cliAddr, tmp: tmp, timeout: cfg.timeout, env: cfg.softrdmaEnv}
	var buildErr error
	if sr.bin == "" && (cfg.stacks["softrdma"] || cfg.stacks["shm"]) {
		fmt.Println("building ./cmd/softrdma ...")
		sr.bin, buildErr = buildSoftrdma(ctx, tmp)
	}
	if cfg.stacks["softrdma"] {
		if err := buildErr; err != nil {
			skip("softrdma", err.Error())
		} else {
			ok, why := probePerftest(ctx, sr.bin)
			switch {
			case cfg.srMode == "bench":
				why = "-softrdma-mode bench"
			case cfg.srMode == "perftest" && !ok:
				fmt.Fprintln(os.Stderr, "compare: -softrdma-mode perftest, but", why)
				return 1
			}
			sr.twoProc = ok && cfg.srMode != "bench"
			if sr.twoProc {
				out.SoftrdmaMode = "two processes: softrdma ib_{write,read,send}_{bw,lat} (perftest-compatible), SOFTRDMA_ADDR=" + cfg.srvAddr + " / " + cfg.cliAddr
			} else {
				out.SoftrdmaMode = "ONE process: softrdma bench (both ends in one process; the two-process perftest commands are not used: " + firstLine(why) + ")"
			}
			fmt.Println("softrdma:", out.SoftrdmaMode)
			tool := func(t string) string {
				if sr.twoProc {
					return t
				}
				return "bench " + strings.Split(t, "_")[1] + " (1 proc)"
			}
			for _, op := range []struct{ series, name string }{{seriesWrite, "write"}, {seriesSend, "send"}, {seriesRead, "read"}} {
				t := "ib_" + op.name + "_lat"
				add(op.series, tool(t), "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
					return sr.perftest(ctx, t, latSize, cfg.latN)
				})
			}
			for _, s := range cfg.sizes {
				add(seriesWrite, tool("ib_write_bw"), "bw", s, func(ctx context.Context) (metrics, runInfo, error) {
					return sr.perftest(ctx, "ib_write_bw", s, cfg.srIters(s))
				})
			}
			for _, op := range []struct{ series, name string }{{seriesRead, "read"}, {seriesSend, "send"}} {
				t := "ib_" + op.name + "_bw"
				for _, s := range cfg.rsSizes {
					add(op.series, tool(t), "bw", s, func(ctx context.Context) (metrics, runInfo, error) {
						return sr.perftest(ctx, t, s, cfg.srIters(s))
					})
				}
			}
			// The protected modes: the same WRITE tests, both ends passing
			// --secure; they share the plain runs' slots, so each round
			// measures plain and protected back to back.
			for _, mode := range cfg.secure {
				series := seriesWrite + " " + mode
				add(series, tool("ib_write_lat")+" --secure "+mode, "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
					return sr.perftest(ctx, "ib_write_lat", latSize, cfg.latN, "--secure", mode)
				})
				add(series, tool("ib_write_bw")+" --secure "+mode, "bw", refSize, func(ctx context.Context) (metrics, runInfo, error) {
					return sr.perftest(ctx, "ib_write_bw", refSize, cfg.srIters(refSize), "--secure", mode)
				})
			}
		}
	}

	// UCX
	if cfg.stacks["ucx"] {
		u, why := setupUCX(ctx, cfg.install)
		if u == nil {
			skip("ucx", why)
		} else {
			u.timeout = cfg.timeout
			out.Versions["ucx"] = u.version
			for _, pct := range []float64{50, 99} {
				add(seriesUCXTag, fmt.Sprintf("tag_lat -R %g", pct), "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
					return u.run(ctx, "tag_lat", latSize, cfg.latN, pct)
				})
			}
			for _, s := range cfg.sizes {
				add(seriesUCXTag, "tag_bw", "bw", s, func(ctx context.Context) (metrics, runInfo, error) {
					return u.run(ctx, "tag_bw", s, cfg.bwIters(s), 0)
				})
				add("UCX tcp put", "ucp_put_bw", "bw", s, func(ctx context.Context) (metrics, runInfo, error) {
					return u.run(ctx, "ucp_put_bw", s, cfg.putIters(s), 0)
				})
			}
		}
	}

	// shared memory: softrdma over provider/shm, UCX over posix
	if cfg.stacks["shm"] {
		ok, why := false, ""
		if buildErr != nil {
			why = buildErr.Error()
		} else {
			ok, why = probePerftest(ctx, sr.bin)
		}
		if !ok {
			skip("shm", why)
		} else {
			pin, note := shmPin(cfg.shmPin)
			out.Notes = append(out.Notes, note)
			shm := *sr
			shm.pinShm = pin
			u, why := setupPosixUCX(ctx, cfg.install)
			if u == nil {
				skip("UCX posix", why)
			} else {
				u.timeout, u.pin = cfg.timeout, pin
				out.Versions["ucx"] = u.version
			}
			f, why := setupFabricShm(ctx, cfg.install)
			if f == nil {
				skip("libfabric shm", why)
			} else {
				f.timeout, f.pin = cfg.timeout, pin
				out.Versions["libfabric"] = f.version
			}
			shmJobs(cfg, &shm, u, f, add)
		}
	}

	// libfabric
	if cfg.stacks["libfabric"] {
		f, why := setupFabric(ctx, cfg.install)
		if f == nil {
			skip("libfabric", why)
		} else {
			f.timeout = cfg.timeout
			out.Versions["libfabric"] = f.version
			for _, p := range []string{"tcp", "udp"} {
				if p == "tcp" && !f.tcp || p == "udp" && !f.udp {
					skip("libfabric "+p, f.why[p])
					continue
				}
				series := "libfabric " + p
				tool := "fi_pingpong -p " + p
				if p == "tcp" {
					tool += " -e msg"
				}
				add(series, tool, "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
					return f.run(ctx, p, latSize, cfg.latN)
				})
				for _, s := range cfg.sizes {
					if p == "udp" && s > f.udpMax {
						continue
					}
					add(series, tool+" (pingpong)", "bw", s, func(ctx context.Context) (metrics, runInfo, error) {
						return f.run(ctx, p, s, cfg.ppIters(s))
					})
				}
			}
			if f.udp {
				out.Notes = append(out.Notes, fmt.Sprintf("libfabric udp: dgram endpoints, max message %d B (fi_info)", f.udpMax))
			}
		}
	}

	// plain Go
	if cfg.stacks["go"] {
		g := &goBase{self: self, timeout: cfg.timeout}
		for _, p := range []string{"tcp", "udp"} {
			series := "Go " + strings.ToUpper(p)
			add(series, p+" ping-pong", "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
				return g.run(ctx, p, "pp", latSize, cfg.latN)
			})
			for _, s := range cfg.sizes {
				add(series, p+" stream", "bw", s, func(ctx context.Context) (metrics, runInfo, error) {
					return g.run(ctx, p, "stream", s, cfg.bwIters(s))
				})
			}
		}
		// The kernel floor (floor.go): the 8-byte WRITE's datagram
		// ping-ponged and 1 MiB of WRITE ONLY-sized GSO segments, in the
		// slots of softrdma's 8-byte latency and 1 MiB bandwidth.
		add(seriesFloorPP, floorPPTool, "lat", latSize, func(ctx context.Context) (metrics, runInfo, error) {
			return g.run(ctx, "udp-busy", "pp", latSize, cfg.latN)
		})
		if err := floorProbe(); err != nil {
			skip(seriesFloorBW, err.Error())
		} else {
			add(seriesFloorBW, floorBWTool, "bw", refSize, func(ctx context.Context) (metrics, runInfo, error) {
				return g.run(ctx, "udp-gso", "stream", refSize, cfg.bwIters(refSize))
			})
		}
	}
	// softrdma's sockets (rdmanet over a soft device, and over a shm
	// device) and Go's TCP, the same Go loops: 64-byte request/response
	// and a stream of 64 KiB writes.
	if cfg.stacks["rdmanet"] {
		g := &goBase{self: self, timeout: cfg.timeout, srvDev: cfg.srvAddr, cliDev: cfg.cliAddr}
		for _, p := range []struct{ proto, series string }{{"rdmanet", seriesRnet}, {"rdmanet-shm", seriesRnetShm}, {"tcp", seriesGoTCP}} {
			add(p.series, p.proto+" ping-pong", "lat", rnPPSize, func(ctx context.Context) (metrics, runInfo, error) {
				return g.run(ctx, p.proto, "pp", rnPPSize, cfg.latN)
			})
			if p.proto == "tcp" && cfg.stacks["go"] && slices.Contains(cfg.sizes, rnStreamSize) {
				continue // the go stack measures it
			}
			add(p.series, p.proto+" stream", "bw", rnStreamSize, func(ctx context.Context) (metrics, runInfo, error) {
				return g.run(ctx, p.proto, "stream", rnStreamSize, cfg.bwIters(rnStreamSize))
			})
		}
		// Go's protocols over each: net/http echoing 1 MiB bodies, and
		// gRPC unary calls (bench/grpc, a module of its own).
		fmt.Println("building ./bench/grpc ...")
		grpcBin, err := buildGRPC(ctx, tmp)
		if err != nil {
			skip("gRPC", err.Error())
		}
		for _, p := range []struct{ proto, series string }{{"rdmanet", seriesRnet}, {"rdmanet-shm", seriesRnetShm}, {"tcp", seriesGoTCP}} {
			add(p.series, p.proto+" net/http echo", "http", httpSize, func(ctx context.Context) (metrics, runInfo, error) {
				return g.run(ctx, p.proto, "http", httpSize, cfg.httpCalls())
			})
			if grpcBin != "" {
				add(p.series, p.proto+" gRPC unary", "grpc", grpcSize, func(ctx context.Context) (metrics, runInfo, error) {
					return g.runBin(ctx, grpcBin, p.proto, "grpc", grpcSize, cfg.grpcCalls())
				})
			}
		}
	}
	if len(jobs) == 0 {
		fmt.Fprintln(os.Stderr, "compare: nothing to run")
		return 1
	}

	// Slots: the 8-byte latencies, then each bandwidth size. A slot's jobs
	// run back to back, stacks in one order in even rounds and reversed in
	// odd ones, so slow drift (other load, thermal) hits both sides alike.
	type slot struct {
		kind string
		size int
		jobs []*job
	}
	var slots []*slot
	for _, j := range jobs {
		var s *slot
		for _, x := range slots {
			if x.kind == j.kind && x.size == j.size {
				s = x
			}
		}
		if s == nil {
			s = &slot{kind: j.kind, size: j.size}
			slots = append(slots, s)
		}
		s.jobs = append(s.jobs, j)
	}
	sort.SliceStable(slots, func(a, b int) bool {
		if slots[a].kind != slots[b].kind {
			return slots[a].kind == "lat"
		}
		return slots[a].size < slots[b].size
	})

	fmt.Printf("%d measurements × %d rounds; each child process is killed after %v\n", len(jobs), cfg.rounds, cfg.timeout)
	for r := 1; r <= cfg.rounds; r++ {
		rt := time.Now()
		ri := roundInfo{Round: r, LoadStart: loadAvg()}
		order := "A→B"
		if r%2 == 0 {
			order = "B→A"
		}
		ri.Order = order
		var n, failed int
		for _, sl := range slots {
			js := slices.Clone(sl.jobs)
			if r%2 == 0 {
				slices.Reverse(js)
			}
			for _, j := range js {
				if j.disabled {
					continue
				}
				t := time.Now()
				cpu0, okCPU := childCPU()
				m, info, err := j.run(ctx)
				if cpu1, ok := childCPU(); ok && okCPU && err == nil {
					addCPU(m, cpu1-cpu0, time.Since(t).Seconds())
				}
				s := sample{Series: j.series, Tool: j.tool, Kind: j.kind, Size: j.size, Round: r,
					Seconds: time.Since(t).Seconds(), Metrics: m, runInfo: info}
				n++
				if err != nil {
					failed++
					j.fails++
					s.Error = err.Error()
					s.Metrics = nil
					if j.fails == 1 {
						fmt.Printf("FAIL round %d, %s %s %s: %s\n", r, j.series, j.tool, sizeStr(j.size), headLines(err.Error(), errLinesFirst))
					} else {
						fmt.Printf("FAIL round %d, %s %s %s again: %s\n", r, j.series, j.tool, sizeStr(j.size), firstLine(err.Error()))
					}
					if j.ok == 0 && j.fails >= 2 {
						j.disabled = true
						fmt.Printf("     %s %s %s failed twice and never succeeded: dropped for the remaining rounds\n", j.series, j.tool, sizeStr(j.size))
					}
				} else {
					j.ok++
				}
				if cfg.verbose {
					fmt.Printf("  r%d %-16s %-26s %-8s %5.1fs %s\n", r, j.series, j.tool, sizeStr(j.size), s.Seconds, brief(s))
				}
				out.Samples = append(out.Samples, s)
			}
		}
		ri.Seconds = time.Since(rt).Seconds()
		ri.LoadEnd = loadAvg()
		out.RoundInfo = append(out.RoundInfo, ri)
		fmt.Printf("round %d/%d (%s): %d runs, %d failed, %.0f s, load %s; %s\n", r, cfg.rounds, order, n, failed, ri.Seconds, ri.LoadEnd, roundHeadline(out.Samples, r))
	}
	out.Seconds = time.Since(t0).Seconds()
	out.summarize()
	out.print(os.Stdout)
	if cfg.jsonPath != "" {
		if err := out.writeJSON(cfg.jsonPath); err != nil {
			fmt.Fprintln(os.Stderr, "compare: JSON:", err)
		} else {
			fmt.Println("samples and medians written to", cfg.jsonPath)
		}
	}
	if cfg.plotPath != "" {
		if err := out.plot(cfg.plotPath); err != nil {
			fmt.Fprintln(os.Stderr, "compare: plot:", err)
		} else {
			fmt.Println("plot written to", cfg.plotPath)
		}
	}
	return 0
}

func headLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "    ...")
	}
	return strings.Join(lines, "\n")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func sizeStr(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// brief renders a sample's main numbers on one line.
func brief(s sample) string {
	if s.Error != "" {
		return "FAILED"
	}
	m := s.Metrics
	if s.Kind == "lat" || s.Kind == "http" || s.Kind == "grpc" {
		str := ""
		if v, ok := m["lat_p50_us"]; ok {
			str += fmt.Sprintf("p50 %.2f µs ", v)
		}
		if v, ok := m["lat_avg_us"]; ok {
			str += fmt.Sprintf("avg %.2f µs ", v)
		}
		if v, ok := m["lat_p99_us"]; ok {
			str += fmt.Sprintf("p99 %.2f µs", v)
		}
		return str
	}
	str := fmt.Sprintf("%.1f MB/s %.3f Mmsg/s", m["bw_MiBps"], m["msg_rate_M"])
	if l, ok := m["loss"]; ok && l > 0 {
		str += fmt.Sprintf(" (%.1f%% lost)", 100*l)
	}
	return str
}

// roundHeadline is the round's softrdma WRITE numbers next to UCX's.
func roundHeadline(all []sample, r int) string {
	get := func(series, kind string, size int, metric string) string {
		for _, s := range all {
			if s.Round == r && s.Series == series && s.Kind == kind && s.Size == size && s.Error == "" {
				if v, ok := s.Metrics[metric]; ok {
					return num(v, true)
				}
			}
		}
		return "-"
	}
	return fmt.Sprintf("WRITE 8B lat %s µs (UCX %s), 1MiB %s MB/s (UCX %s), 8B rate %s M/s",
		get(seriesWrite, "lat", latSize, "lat_p50_us"), get(seriesUCXTag, "lat", latSize, "lat_p50_us"),
		get(seriesWrite, "bw", refSize, "bw_MiBps"), get(seriesUCXTag, "bw", refSize, "bw_MiBps"),
		get(seriesWrite, "bw", latSize, "msg_rate_M"))
}

// replay reprints and replots an earlier run's JSON.
func replay(cfg *config) int {
	data, err := os.ReadFile(cfg.from)
	if err == nil {
		var r report
		if err = json.Unmarshal(data, &r); err == nil {
			r.summarize()
			r.print(os.Stdout)
			if cfg.plotPath != "" {
				if err = r.plot(cfg.plotPath); err == nil {
					fmt.Println("plot written to", cfg.plotPath)
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare: -from:", err)
		return 1
	}
	return 0
}
