package nvmecli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/nvmeof"
)

// fabricFlags are the flags every `softrdma nvme` command shares: where
// the controller is (nvme-cli's connect flags) and which device reaches it.
type fabricFlags struct {
	transport, traddr, hostTraddr, nqn, hostNQN, device string
	trsvcid                                             int
	opener                                              Opener
	needNQN                                             bool
}

func (f *fabricFlags) register(fs *flag.FlagSet, needNQN bool) {
	fs.StringVar(&f.transport, "t", "rdma", "transport: rdma")
	fs.StringVar(&f.transport, "transport", "rdma", "transport: rdma")
	fs.StringVar(&f.traddr, "a", "", "the controller's `address`")
	fs.StringVar(&f.traddr, "traddr", "", "the controller's `address`")
	fs.IntVar(&f.trsvcid, "s", 4420, "the controller's `port`")
	fs.IntVar(&f.trsvcid, "trsvcid", 4420, "the controller's `port`")
	fs.StringVar(&f.hostTraddr, "w", "", "local `address` to connect from (default: the route's)")
	fs.StringVar(&f.hostTraddr, "host-traddr", "", "local `address` to connect from")
	fs.StringVar(&f.hostNQN, "hostnqn", "", "this host's `NQN` (default: /etc/nvme/hostnqn, else random)")
	fs.StringVar(&f.device, "d", "", "device: shm0 for shared memory (default: the RoCEv2 device of the local address)")
	fs.StringVar(&f.device, "device", "", "device: shm0 for shared memory")
	if needNQN {
		fs.StringVar(&f.nqn, "n", "", "the subsystem's `NQN`")
		fs.StringVar(&f.nqn, "nqn", "", "the subsystem's `NQN`")
	}
}

// newFabricFlags is the flag set of one `softrdma nvme` command with the
// fabric flags registered; the command adds its own, then calls parse.
func newFabricFlags(name string, stderr io.Writer, open Opener, needNQN bool) (*fabricFlags, *flag.FlagSet) {
	f := &fabricFlags{opener: open, needNQN: needNQN}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs, needNQN)
	return f, fs
}

// parse parses args and checks the fabric flags.
func (f *fabricFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return f.check(f.needNQN)
}

func (f *fabricFlags) check(needNQN bool) error {
	switch {
	case f.transport != "rdma":
		return fmt.Errorf("transport %q: softrdma speaks rdma", f.transport)
	case f.traddr == "":
		return errors.New("-a/--traddr ADDR is required")
	case needNQN && f.nqn == "":
		return errors.New("-n/--nqn NQN is required")
	case f.trsvcid <= 0 || f.trsvcid > 65535:
		return fmt.Errorf("port %d", f.trsvcid)
	}
	return nil
}

// open opens the device and returns the host configuration for it and a
// function that closes the device.
func (f *fabricFlags) open(queues, depth int) (*nvmeof.HostConfig, string, func(), error) {
	ip, err := device.ResolveIP(f.traddr)
	if err != nil {
		return nil, "", nil, err
	}
	dev, err := f.opener(f.device, f.hostTraddr, ip.String())
	if err != nil {
		return nil, "", nil, err
	}
	hostNQN := f.hostNQN
	if hostNQN == "" {
		if b, err := os.ReadFile("/etc/nvme/hostnqn"); err == nil {
			hostNQN = strings.TrimSpace(string(b))
		}
	}
	cfg := &nvmeof.HostConfig{HostNQN: hostNQN, IOQueues: queues, QueueSize: depth, CM: &cm.Options{Context: dev}}
	closeDev := func() { cm.Detach(dev); dev.Close() }
	return cfg, netip.AddrPortFrom(ip, uint16(f.trsvcid)).String(), closeDev, nil
}

// RunHost is `softrdma nvme COMMAND`: discover, id-ctrl, id-ns, read,
// write and perf against a controller over RDMA, each connecting, doing
// its work and disconnecting.
func RunHost(ctx context.Context, args []string, stdout, stderr io.Writer, open Opener) error {
	if open == nil {
		return errors.New("nvme: no device opener given")
	}
	if len(args) == 0 {
		return errors.New("usage: softrdma nvme discover|id-ctrl|id-ns|read|write|perf -t rdma -a ADDR [-s PORT] [-n NQN] ...")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "discover":
		return discover(ctx, args, stdout, stderr, open)
	case "id-ctrl":
		return idCtrl(ctx, args, stdout, stderr, open)
	case "id-ns":
		return idNS(ctx, args, stdout, stderr, open)
	case "read", "write":
		return readWrite(ctx, cmd, args, stdout, stderr, open)
	case "perf":
		return perf(ctx, args, stdout, stderr, open)
	}
	return fmt.Errorf("nvme: unknown command %q; use discover, id-ctrl, id-ns, read, write or perf", cmd)
}

func discover(ctx context.Context, args []string, stdout, stderr io.Writer, open Opener) error {
	f, fs := newFabricFlags("nvme discover", stderr, open, false)
	if err := f.parse(fs, args); err != nil {
		return err
	}
	cfg, addr, done, err := f.open(1, 2)
	if err != nil {
		return err
	}
	defer done()
	entries, err := nvmeof.Discover(ctx, addr, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nDiscovery Log Number of Records %d, Generation counter 1\n", len(entries))
	for i, e := range entries {
		sub := "nvme subsystem"
		if e.SubType == 3 {
			sub = "current discovery subsystem"
		}
		fam := "ipv4"
		if e.Addr.Addr().Is6() && !e.Addr.Addr().Is4In6() {
			fam = "ipv6"
		}
		fmt.Fprintf(stdout, "=====Discovery Log Entry %d======\n", i)
		fmt.Fprintf(stdout, "trtype:  rdma\nadrfam:  %s\nsubtype: %s\ntreq:    not required\nportid:  %d\ntrsvcid: %d\nsubnqn:  %s\ntraddr:  %s\n",
			fam, sub, e.PortID, e.Addr.Port(), e.SubNQN, e.Addr.Addr())
		fmt.Fprintf(stdout, "rdma_prtype: roce-v2\nrdma_qptype: connected\nrdma_cms:    rdma-cm\nrdma_pkey: 0x0000\n")
	}
	return nil
}

func connect(ctx context.Context, f *fabricFlags, queues, depth int) (*nvmeof.Controller, func(), error) {
	cfg, addr, done, err := f.open(queues, depth)
	if err != nil {
		return nil, nil, err
	}
	cfg.ControllerLossTimeout = -1
	c, err := nvmeof.Connect(ctx, addr, f.nqn, cfg)
	if err != nil {
		done()
		return nil, nil, err
	}
	return c, func() { c.Close(); done() }, nil
}

// parseAndConnect parses args and connects to the controller with one
// I/O queue, for the commands that issue one command at a time.
func (f *fabricFlags) parseAndConnect(ctx context.Context, fs *flag.FlagSet, args []string) (*nvmeof.Controller, func(), error) {
	if err := f.parse(fs, args); err != nil {
		return nil, nil, err
	}
	return connect(ctx, f, 1, 2)
}

func idCtrl(ctx context.Context, args []string, stdout, stderr io.Writer, open Opener) error {
	f, fs := newFabricFlags("nvme id-ctrl", stderr, open, true)
	c, done, err := f.parseAndConnect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer done()
	i := c.Info()
	fmt.Fprintf(stdout, "NVME Identify Controller:\n")
	for _, kv := range []struct {
		k string
		v any
	}{{"vid", fmt.Sprintf("%#x", i.VendorID)}, {"ssvid", fmt.Sprintf("%#x", i.VendorID)}, {"sn", i.Serial}, {"mn", i.Model},
		{"fr", i.Firmware}, {"mdts", i.MDTS}, {"cntlid", fmt.Sprintf("%#x", i.CNTLID)}, {"ver", fmt.Sprintf("%#x", i.Version)},
		{"oaes", fmt.Sprintf("%#x", i.OAES)}, {"cntrltype", i.ControllerType}, {"aerl", i.AERL}, {"lpa", fmt.Sprintf("%#x", i.LPA)},
		{"kas", i.KAS}, {"sqes", fmt.Sprintf("%#x", i.SQES)}, {"cqes", fmt.Sprintf("%#x", i.CQES)}, {"maxcmd", i.MaxCmd},
		{"nn", i.NN}, {"oncs", fmt.Sprintf("%#x", i.ONCS)}, {"vwc", fmt.Sprintf("%#x", i.VWC)}, {"sgls", fmt.Sprintf("%#x", i.SGLS)},
		{"subnqn", i.SubNQN}, {"ioccsz", i.IOCCSZ}, {"iorcsz", i.IORCSZ}, {"icdoff", i.ICDOFF}} {
		fmt.Fprintf(stdout, "%-10s: %v\n", kv.k, kv.v)
	}
	return nil
}

func idNS(ctx context.Context, args []string, stdout, stderr io.Writer, open Opener) error {
	f, fs := newFabricFlags("nvme id-ns", stderr, open, true)
	nsid := fs.Uint("namespace-id", 1, "the namespace `ID`")
	c, done, err := f.parseAndConnect(ctx, fs, args)
	if err != nil {
		return err
	}
	defer done()
	ns, err := c.IdentifyNamespace(ctx, uint32(*nsid))
	if err != nil {
		return err
	}
	lbads := 0
	for 1<<lbads < ns.BlockSize {
		lbads++
	}
	fmt.Fprintf(stdout, "NVME Identify Namespace %d:\nnsze    : %#x\nncap    : %#x\nnuse    : %#x\nnlbaf   : 0\nflbas   : 0\nnguid   : %x\nlbaf  0 : ms:0   lbads:%d rp:0 (in use)\n",
		*nsid, ns.Blocks, ns.Blocks, ns.Blocks, ns.NGUID, lbads)
	return nil
}

// readWrite is nvme-cli's read and write: --start-block, --block-count
// (0's based), --data-size, --data (default stdout / stdin).
func readWrite(ctx context.Context, op string, args []string, stdout, stderr io.Writer, open Opener) error {
	f, fs := newFabricFlags("nvme "+op, stderr, open, true)
	start := fs.Uint64("start-block", 0, "first logical block")
	count := fs.Uint("block-count", 0, "number of blocks, 0's based (0 = one block)")
	dataSize := fs.Int64("data-size", 0, "bytes to transfer (at least (block-count+1) × block size)")
	dataFile := fs.String("data", "", "`file` to write from or read into (default stdin / stdout)")
	nsid := fs.Uint("namespace-id", 1, "the namespace `ID`")
	if err := f.parse(fs, args); err != nil {
		return err
	}
	if *count >= 1<<16 {
		return fmt.Errorf("%s: --block-count %d: at most 65535 (0's based)", op, *count)
	}
	c, done, err := connect(ctx, f, 1, 2)
	if err != nil {
		return err
	}
	defer done()
	ns, err := c.IdentifyNamespace(ctx, uint32(*nsid))
	if err != nil {
		return err
	}
	n := int64(*count+1) * int64(ns.BlockSize)
	if *dataSize == 0 {
		*dataSize = n
	}
	if *dataSize < n {
		return fmt.Errorf("%s: --data-size %d is less than %d blocks of %d bytes", op, *dataSize, *count+1, ns.BlockSize)
	}
	buf := make([]byte, n)
	if op == "write" {
		in := io.Reader(os.Stdin)
		if *dataFile != "" {
			fh, err := os.Open(*dataFile)
			if err != nil {
				return err
			}
			defer fh.Close()
			in = fh
		}
		if _, err := io.ReadFull(in, buf[:min(n, *dataSize)]); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("write: reading the data: %w", err)
		}
	}
	chunk := c.MaxTransfer() / ns.BlockSize * ns.BlockSize
	for off := int64(0); off < n; off += int64(chunk) {
		part := buf[off:min(n, off+int64(chunk))]
		lba := *start + uint64(off/int64(ns.BlockSize))
		if op == "write" {
			err = c.Write(ctx, uint32(*nsid), lba, part, ns.BlockSize)
		} else {
			err = c.Read(ctx, uint32(*nsid), lba, part, ns.BlockSize)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	if op == "read" {
		out := stdout
		if *dataFile != "" {
			fh, err := os.Create(*dataFile)
			if err != nil {
				return err
			}
			defer fh.Close()
			out = fh
		}
		if _, err := out.Write(buf); err != nil {
			return err
		}
		if *dataFile == "" {
			return nil // the data went to stdout
		}
	}
	fmt.Fprintf(stderr, "%s: Success\n", op)
	return nil
}

// PerfResult is what `softrdma nvme perf --json` prints.
type PerfResult struct {
	Workload   string  `json:"workload"`
	BlockSize  int     `json:"block_size"`
	QueueDepth int     `json:"queue_depth"`
	Queues     int     `json:"queues"`
	Seconds    float64 `json:"seconds"`
	IOs        int     `json:"ios"`
	IOPS       float64 `json:"iops"`
	MBps       float64 `json:"mb_per_s"`
	AvgUs      float64 `json:"lat_avg_us"`
	P50Us      float64 `json:"lat_p50_us"`
	P99Us      float64 `json:"lat_p99_us"`
	P999Us     float64 `json:"lat_p999_us"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// perf runs a workload for a time at a queue depth: each of the depth
// goroutines keeps one command in flight.
func perf(ctx context.Context, args []string, stdout, stderr io.Writer, open Opener) error {
	f, fs := newFabricFlags("nvme perf", stderr, open, true)
	workload := fs.String("workload", "randread", "randread, randwrite, read or write")
	bs := fs.Int("o", 4096, "I/O size in bytes")
	qd := fs.Int("q", 32, "queue depth: commands in flight")
	queues := fs.Int("queues", 1, "I/O queues")
	dur := fs.Duration("T", 5*time.Second, "run time")
	nsid := fs.Uint("namespace-id", 1, "the namespace `ID`")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := f.parse(fs, args); err != nil {
		return err
	}
	random, write := false, false
	switch *workload {
	case "randread":
		random = true
	case "randwrite":
		random, write = true, true
	case "read":
	case "write":
		write = true
	default:
		return fmt.Errorf("perf: workload %q; use randread, randwrite, read or write", *workload)
	}
	if *qd < 1 || *qd > 1024 || *queues < 1 {
		return fmt.Errorf("perf: queue depth %d and queues %d: use 1 to 1024 and at least 1", *qd, *queues)
	}
	c, done, err := connect(ctx, f, *queues, max(2, (*qd+*queues-1) / *queues + 1))
	if err != nil {
		return err
	}
	defer done()
	ns, err := c.IdentifyNamespace(ctx, uint32(*nsid))
	if err != nil {
		return err
	}
	if *bs%ns.BlockSize != 0 || *bs > c.MaxTransfer() {
		return fmt.Errorf("perf: I/O size %d: a multiple of the %d-byte block, at most %d", *bs, ns.BlockSize, c.MaxTransfer())
	}
	per := uint64(*bs / ns.BlockSize)
	slots := ns.Blocks / per
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	runCtx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	var wg sync.WaitGroup
	lats := make([][]time.Duration, *qd)
	errs := make([]error, *qd)
	t0 := time.Now()
	for g := range *qd {
		wg.Go(func() {
			buf := make([]byte, *bs)
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			seq := uint64(g) * (slots / uint64(*qd))
			l := make([]time.Duration, 0, 1<<16)
			for runCtx.Err() == nil {
				var slot uint64
				if random {
					slot = rng.Uint64N(slots)
				} else {
					slot = seq % slots
					seq++
				}
				s := time.Now()
				var err error
				if write {
					err = c.Write(runCtx, uint32(*nsid), slot*per, buf, ns.BlockSize)
				} else {
					err = c.Read(runCtx, uint32(*nsid), slot*per, buf, ns.BlockSize)
				}
				if err != nil {
					if runCtx.Err() == nil {
						errs[g] = err
					}
					break
				}
				l = append(l, time.Since(s))
			}
			lats[g] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := PerfResult{Workload: *workload, BlockSize: *bs, QueueDepth: *qd, Queues: *queues, Seconds: elapsed.Seconds(), IOs: len(all),
		CPUSeconds: tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)}
	if len(all) > 0 {
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		pct := func(p float64) float64 {
			return float64(all[min(len(all)-1, int(p*float64(len(all))))].Nanoseconds()) / 1e3
		}
		r.IOPS = float64(len(all)) / elapsed.Seconds()
		r.MBps = r.IOPS * float64(*bs) / (1 << 20)
		r.AvgUs = float64(sum.Nanoseconds()) / float64(len(all)) / 1e3
		r.P50Us, r.P99Us, r.P999Us = pct(0.5), pct(0.99), pct(0.999)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	fmt.Fprintf(stdout, "%-10s %6s %4s %10s %10s %9s %9s %9s %9s %8s\n", "workload", "bs", "qd", "IOPS", "MB/s", "avg µs", "p50 µs", "p99 µs", "p99.9 µs", "CPU s")
	fmt.Fprintf(stdout, "%-10s %6d %4d %10.0f %10.1f %9.1f %9.1f %9.1f %9.1f %8.2f\n", r.Workload, r.BlockSize, r.QueueDepth, r.IOPS, r.MBps, r.AvgUs, r.P50Us, r.P99Us, r.P999Us, r.CPUSeconds)
	return nil
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
