// Package bench is softrdma bench: WRITE, READ and SEND bandwidth and
// latency with both ends in one process (internal/bench's engine), over
// UDP loopback or shared memory, printed as tables, plotted, and written
// as JSON or CSV; with -scale, what QP counts cost.
package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/internal/tools/report"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
)

// benchReport is what bench writes as JSON.
type benchReport struct {
	Time     time.Time         `json:"time"`
	Provider string            `json:"provider"`
	AddrA    string            `json:"addr_a"`
	AddrB    string            `json:"addr_b"`
	MTU      int               `json:"mtu"`
	BW       []bench.BWResult  `json:"bw"`
	Lat      []bench.LatResult `json:"lat"`
	Counter  map[string]uint64 `json:"counters,omitempty"`
}

// Run runs softrdma bench with the command line args[1:] (args[0] is the
// command's name). -h prints the usage and returns flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env, err := device.LoadEnv()
	if err != nil {
		return err
	}
	args = args[min(1, len(args)):]
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ops := fs.String("ops", "write,read,send", "operations to measure: write, read, send")
	sizesFlag := fs.String("sizes", "2,64,1024,4096,65536,1048576", "message sizes in bytes, comma separated")
	iters := fs.Int("n", 2000, "iterations per bandwidth test (without -n, sizes of 1 MiB and more run a twentieth of the default, at least 64; an explicit -n is run as given)")
	latIters := fs.Int("lat-n", 2000, "round trips per latency test")
	mtu := fs.Int("m", 4096, "IB path MTU: 256, 512, 1024, 2048 or 4096")
	addrA := fs.String("a", "127.0.0.1", "address of the first device")
	addrB := fs.String("b", "127.0.0.2", "address of the second device")
	port := fs.Uint("port", 4791, "UDP port both devices use")
	provider := fs.String("provider", "soft", "soft (RoCEv2 over UDP between -a and -b) or shm (shared memory: two provider/shm devices)")
	block := fs.Bool("block", false, "wait for completions (spin, then sleep) instead of busy polling")
	plotFile := fs.String("plot", "softrdma-bench.png", "write a plot of the results to this PNG file (empty: none)")
	jsonFile := fs.String("json", "", "write the results as JSON to this file")
	csvFile := fs.String("csv", "", "write the results as CSV to this file, one row per test")
	noLat := fs.Bool("no-lat", false, "skip latency tests")
	noBW := fs.Bool("no-bw", false, "skip bandwidth tests")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	noGSO := fs.Bool("no-gso", false, "send one datagram per packet (no UDP GSO/GRO)")
	secure := fs.String("secure", "", "protect every packet: auth (a MAC and a sequence number) or encrypt (and encrypted payloads); see docs/security.md")
	scale := fs.String("scale", "", "instead of the tables, measure scale at these QP counts, e.g. 1,16,256,4096: setup time, memory per QP, aggregate bandwidth and 8-byte rate")
	scaleSize := fs.Int("scale-size", 65536, "WRITE size of the -scale bandwidth run")
	scaleMsgs := fs.Int("scale-n", 20000, "WRITEs in each -scale bandwidth run (at least 2 per QP)")
	scaleRate := fs.Int("scale-rate-n", 500000, "8-byte WRITEs in each -scale rate run (0: none)")
	scaleOut := fs.Int("scale-outstanding", 256, "WRITEs in flight over all QPs in a -scale run; each QP has max(1, this/QPs), at most 128")
	scaleCounters := fs.Bool("scale-counters", false, "after each -scale QP count, print what the two devices counted during it (soft provider: packets, timeouts, retransmissions, drops)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nSet := false
	fs.Visit(func(f *flag.Flag) { nSet = nSet || f.Name == "n" })
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var opList []bench.Op
	for _, s := range strings.Split(*ops, ",") {
		op, err := bench.ParseOp(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		opList = append(opList, op)
	}
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1<<26 {
			return fmt.Errorf("-sizes: %q is not a size from 1 to 64 MiB", s)
		}
		sizes = append(sizes, n)
	}
	pmtu := verbs.MTUFromBytes(*mtu)
	if pmtu.Bytes() != *mtu {
		return fmt.Errorf("-m %d: the IB MTU is one of 256, 512, 1024, 2048, 4096", *mtu)
	}
	var a, b verbs.Context
	var over string // what connects the devices, for the headers
	switch *provider {
	case "soft":
		sa, sb, err := openPair(&env, *addrA, *addrB, uint16(*port), *noGSO)
		if err != nil {
			return err
		}
		a, b, over = sa, sb, fmt.Sprintf("over UDP port %d", *port)
	case "shm":
		if *secure != "" {
			return fmt.Errorf("-secure: shared memory carries no packets to protect; use -provider soft")
		}
		var err error
		if a, err = shm.Open(shm.Config{Name: "shm_a"}); err != nil {
			return err
		}
		if b, err = shm.Open(shm.Config{Name: "shm_b"}); err != nil {
			a.Close()
			return err
		}
		over = "over shared memory"
	default:
		return fmt.Errorf("-provider %q: use soft or shm", *provider)
	}
	defer a.Close()
	defer b.Close()
	if *scale != "" {
		counts, err := parseQPCounts(*scale)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "softrdma bench -scale: %s ⇄ %s %s, IB MTU %d, busy-polled completions\n",
			devAddr(a), devAddr(b), over, pmtu.Bytes())
		res, err := runScale(stdout, a, b, counts, scaleOpts{size: *scaleSize, msgs: *scaleMsgs, rateMsgs: *scaleRate,
			outstanding: *scaleOut, mtu: pmtu, counters: *scaleCounters})
		if err != nil {
			return err
		}
		if *jsonFile != "" {
			rep := scaleReport{Time: time.Now(), AddrA: devAddr(a), AddrB: devAddr(b), MTU: pmtu.Bytes(), Results: res}
			if err := report.WriteJSON(*jsonFile, rep); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "results written to %s\n", *jsonFile)
		}
		return nil
	}
	maxSize := 0
	for _, s := range sizes {
		maxSize = max(maxSize, s)
	}
	sa, err := bench.NewSide(a, maxSize)
	if err != nil {
		return err
	}
	defer sa.Close()
	sb, err := bench.NewSide(b, maxSize)
	if err != nil {
		return err
	}
	defer sb.Close()
	var mode verbs.SecurityMode
	switch *secure {
	case "":
	case "auth":
		mode = verbs.SecurityAuth
	case "encrypt":
		mode = verbs.SecurityEncrypt
	default:
		return fmt.Errorf("-secure %q: use auth or encrypt", *secure)
	}
	if err := bench.ConnectSecure(sa, sb, pmtu, mode); err != nil {
		return err
	}
	rep := benchReport{Time: time.Now(), Provider: *provider, AddrA: devAddr(a), AddrB: devAddr(b), MTU: pmtu.Bytes()}
	w := stdout
	fmt.Fprintf(w, "softrdma bench: %s ⇄ %s %s, IB MTU %d, %s completions\n",
		rep.AddrA, rep.AddrB, over, pmtu.Bytes(), map[bool]string{false: "busy-polled", true: "spin-then-block"}[*block])
	bar := report.NewProgressBar(stderr, env.NoProgress)
	defer bar.Stop()
	runs, run := 0, 0
	if !*noBW {
		runs += len(opList) * len(sizes)
	}
	if !*noLat {
		for _, s := range sizes {
			if s <= 65536 {
				runs += len(opList)
			}
		}
	}
	if !*noBW {
		for _, op := range opList {
			printBWHeader(w, op)
			for _, size := range sizes {
				bar.Start(fmt.Sprintf("%v bandwidth, %d B", op, size), run, runs, nil)
				run++
				n := *iters
				if size >= 1<<20 && !nSet {
					n = max(64, n/20) // keep large sizes to a few seconds; the row shows n
				}
				before := counters(a, b)
				r, err := bench.BW(sa, sb, bench.Config{Op: op, Size: size, Iters: n, Block: *block})
				if err != nil {
					return fmt.Errorf("%v bandwidth, %d bytes: %w", op, size, err)
				}
				r.Stalls = bench.Delta(before, counters(a, b))
				bar.Pause()
				printBWRow(w, r)
				rep.BW = append(rep.BW, r)
			}
		}
	}
	if !*noLat {
		for _, op := range opList {
			printLatHeader(w, op)
			for _, size := range sizes {
				if size > 65536 {
					continue
				}
				bar.Start(fmt.Sprintf("%v latency, %d B", op, size), run, runs, nil)
				run++
				before := counters(a, b)
				r, err := bench.Lat(sa, sb, bench.Config{Op: op, Size: size, Iters: *latIters, Block: *block})
				if err != nil {
					return fmt.Errorf("%v latency, %d bytes: %w", op, size, err)
				}
				r.Stalls = bench.Delta(before, counters(a, b))
				bar.Pause()
				printLatRow(w, r)
				rep.Lat = append(rep.Lat, r)
			}
		}
	}
	bar.Stop()
	fmt.Fprintln(w, dashes)
	rep.Counter = map[string]uint64{}
	for _, d := range []struct {
		prefix string
		dev    verbs.Context
	}{{"a.", a}, {"b.", b}} {
		for _, c := range deviceCounters(d.dev) {
			if c.Value != 0 {
				rep.Counter[d.prefix+c.Name] = c.Value
			}
		}
	}
	if *jsonFile != "" {
		if err := report.WriteJSON(*jsonFile, rep); err != nil {
			return err
		}
		fmt.Fprintf(w, "results written to %s\n", *jsonFile)
	}
	if *csvFile != "" {
		if err := writeBenchCSV(*csvFile, rep); err != nil {
			return fmt.Errorf("-csv: %w", err)
		}
		fmt.Fprintf(w, "CSV written to %s\n", *csvFile)
	}
	if *plotFile != "" {
		if err := plotBench(*plotFile, rep); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(w, "plot written to %s\n", *plotFile)
	}
	return nil
}

// counters sums the devices' counters, for bench.Delta.
func counters(devs ...verbs.Context) bench.Counters {
	c := bench.Counters{}
	for _, d := range devs {
		for _, v := range deviceCounters(d) {
			c.Add(v.Name, v.Value)
		}
	}
	return c
}

// deviceCounters are a RoCEv2 device's counters; a shared-memory device
// has none (it retransmits nothing and NAKs nothing).
func deviceCounters(d verbs.Context) []soft.Counter {
	if sd, ok := d.(*soft.Device); ok {
		return sd.Counters()
	}
	return nil
}

// devAddr names a device in the headers: its address for RoCEv2, its
// GID for shared memory.
func devAddr(d verbs.Context) string {
	if sd, ok := d.(*soft.Device); ok {
		return sd.LocalAddr().String()
	}
	g, err := d.QueryGID(1, 0)
	if err != nil {
		return d.Device().Name()
	}
	return g.String()
}

// openPair opens the two devices. If an address is taken (another softrdma
// or rxe bound port 4791 there), it says so and suggests -a/-b.
func openPair(env *device.Env, addrA, addrB string, port uint16, noGSO bool) (*soft.Device, *soft.Device, error) {
	pa, err := netip.ParseAddr(addrA)
	if err != nil {
		return nil, nil, fmt.Errorf("-a %q: %v", addrA, err)
	}
	pb, err := netip.ParseAddr(addrB)
	if err != nil {
		return nil, nil, fmt.Errorf("-b %q: %v", addrB, err)
	}
	ucfg := udp.Config{DisableGSO: noGSO}
	cfgA := soft.Config{Name: "softrdma_a", Addr: pa, Port: port, UDP: ucfg}
	cfgB := soft.Config{Name: "softrdma_b", Addr: pb, Port: port, UDP: ucfg}
	env.Tune(&cfgA)
	env.Tune(&cfgB)
	a, err := soft.Open(cfgA)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (choose other loopback addresses with -a and -b)", err)
	}
	b, err := soft.Open(cfgB)
	if err != nil {
		a.Close()
		return nil, nil, fmt.Errorf("%w (choose other loopback addresses with -a and -b)", err)
	}
	return a, b, nil
}

const dashes = "---------------------------------------------------------------------------------------"

func printBWHeader(w io.Writer, op bench.Op) {
	fmt.Fprintln(w, dashes)
	fmt.Fprintf(w, "                    %v BW Test\n", op)
	fmt.Fprintln(w, dashes)
	fmt.Fprintf(w, " %-10s %-14s %-18s %-20s %-14s %-10s %s\n", "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]", "CPU[s/GB]", stallsHeader)
}

func printBWRow(w io.Writer, r bench.BWResult) {
	gb := float64(r.Iters*r.Size) / 1e9
	fmt.Fprintf(w, " %-10d %-14d %-18.2f %-20.2f %-14.6f %-10.3f %s\n", r.Size, r.Iters, r.PeakMBps, r.AvgMBps, r.MsgRate, r.CPUTime.Seconds()/gb, stallsCols(r.Stalls))
}

func printLatHeader(w io.Writer, op bench.Op) {
	fmt.Fprintln(w, dashes)
	fmt.Fprintf(w, "                    %v Latency Test\n", op)
	if op == bench.Read {
		fmt.Fprintf(w, "                    (round trip)\n")
	} else {
		fmt.Fprintf(w, "                    (one way: half the round trip)\n")
	}
	fmt.Fprintln(w, dashes)
	fmt.Fprintf(w, " %-7s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %-22s %s\n", "#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]", stallsHeader)
}

func printLatRow(w io.Writer, r bench.LatResult) {
	fmt.Fprintf(w, " %-7d %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %-22.2f %s\n", r.Size, r.Iters,
		report.Micros(r.Min), report.Micros(r.Max), report.Micros(r.Typical), report.Micros(r.Avg), report.Micros(r.Stdev), report.Micros(r.P99), report.Micros(r.P999), stallsCols(r.Stalls))
}

// stallsHeader and stallsCols end each table row with what stalled the run:
// RNR NAKs (sent by the receiver), local ACK timeouts and retransmitted
// packets, so a collapsed rate explains itself.
const stallsHeader = "RNR_NAKs timeouts retransmits"

func stallsCols(s bench.Stalls) string {
	return fmt.Sprintf("%-8d %-8d %d", s.RNRNAKsSent, s.Timeouts, s.Retransmits)
}

// benchCSVHeader is the first row -csv writes; bandwidth rows leave the
// latency columns empty and latency rows the bandwidth ones.
var benchCSVHeader = []string{"test", "op", "bytes", "iterations", "bw_peak_MBps", "bw_average_MBps", "msg_rate_Mpps", "cpu_s_per_GB",
	"t_min_usec", "t_typical_usec", "t_avg_usec", "t_max_usec", "p99_usec", "p99_9_usec",
	"rnr_naks_sent", "rnr_naks_rcvd", "seq_naks_rcvd", "timeouts", "retransmits"}

// writeBenchCSV writes the bench's results as CSV, one row per test.
func writeBenchCSV(path string, rep benchReport) error {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	rows := [][]string{benchCSVHeader}
	for _, r := range rep.BW {
		gb := float64(r.Iters*r.Size) / 1e9
		rows = append(rows, append([]string{"bw", strings.ToLower(r.Op.String()), strconv.Itoa(r.Size), strconv.Itoa(r.Iters),
			f(r.PeakMBps, 2), f(r.AvgMBps, 2), f(r.MsgRate, 6), f(r.CPUTime.Seconds()/gb, 3), "", "", "", "", "", ""}, stallsCSV(r.Stalls)...))
	}
	for _, r := range rep.Lat {
		rows = append(rows, append([]string{"lat", strings.ToLower(r.Op.String()), strconv.Itoa(r.Size), strconv.Itoa(r.Iters), "", "", "", "",
			f(report.Micros(r.Min), 2), f(report.Micros(r.Typical), 2), f(report.Micros(r.Avg), 2), f(report.Micros(r.Max), 2), f(report.Micros(r.P99), 2), f(report.Micros(r.P999), 2)}, stallsCSV(r.Stalls)...))
	}
	return report.WriteCSV(path, rows)
}

func stallsCSV(s bench.Stalls) []string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []string{u(s.RNRNAKsSent), u(s.RNRNAKsRcvd), u(s.SeqNAKsRcvd), u(s.Timeouts), u(s.Retransmits)}
}
