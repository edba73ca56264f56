package perftest

// Command-line parsing for the perftest-compatible benchmarks: perftest 4.5's
// getopt_long options (the subset softrdma implements), its defaults and its
// force_dependecies() adjustments, so that a command line behaves as it does
// with ib_write_bw and friends.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/internal/getopt"
	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// perftest 4.5's limits and defaults (perftest_parameters.h).
const (
	ptDefSizeBW      = 65536
	ptDefSizeLat     = 2
	ptDefSizeAtomic  = 8
	ptDefIters       = 1000
	ptDefItersWB     = 5000 // ib_write_bw only
	ptDefTxBW        = 128
	ptDefTxLat       = 1
	ptDefQPTimeout   = 14
	ptDefRxSend      = 512
	ptDefRxRDMA      = 1
	ptDefCQMod       = 100
	ptDefDuration    = 5
	ptMinIter        = 5
	ptMaxIter        = 100000000
	ptMaxTx          = 15000
	ptMaxRx          = 16384
	ptMaxCQMod       = 1024
	ptMaxInline      = 912
	ptMaxQPs         = 16384
	ptMaxGIDIndex    = 64
	ptMaxSize        = 1 << 23 // -a runs sizes 2 .. 2^23 (MAX_SIZE)
	ptCQModSizeLimit = 8192    // MSG_SIZE_CQ_MOD_LIMIT: larger messages get cq_mod 1
	ptNoPeakIters    = 20000   // above this many iterations the peak is skipped
	ptDefJSONFile    = "perftest_out.json"
	ptUCMaxRx        = 16000 // UC_MAX_RX: UC/UD SEND receivers pre-post up to this many
	ptMinEQNum       = 0     // MIN_EQ_NUM, MAX_EQ_NUM: the range of -X
	ptMaxEQNum       = 2048
)

// ptTest names one benchmark: ib_<verb>_<kind>.
type ptTest struct {
	name string
	verb perftest.Verb
	kind perftest.Kind
}

// ptOptions is a parsed command line, after perftest's dependency rules.
// Fields that depend on the device (inline size, outstanding reads, MTU,
// GID index) are resolved later, in ptRun.
type ptOptions struct {
	test ptTest
	conn perftest.Connection // -c

	server   string // host to connect to; "" means this side is the server
	devName  string // -d
	ibPort   int    // -i
	port     int    // -p: TCP port of the exchange
	gidIndex int    // -x; -1 picks the best GID as perftest does
	mtu      int    // -m in bytes; 0 means the port's active MTU

	size     uint64 // -s
	sizeSet  bool
	iters    int // -n; 0 in duration mode
	txDepth  int // -t
	rxDepth  int // -r (SEND tests)
	cqMod    int // -Q
	cqModSet bool
	postList int // -l; 1 means none
	numQPs   int // -q
	inline   int // -I; -1 means the default
	outReads int // -o; 0 means the device maximum
	sl       int // -S
	timeout  int // -u

	atomicOp perftest.AtomicOp // -A
	duplex   bool              // -b
	runAll   bool              // -a
	noPeak   bool              // -N
	warmUp   bool              // --perform_warm_up

	duration int // -D seconds; 0 means an iteration count
	// infinite is --run_infinitely: a bandwidth test that runs until it is
	// killed, reporting every duration seconds (-D, default 5).
	infinite bool
	mrPerQP  bool // --mr_per_qp: one MR per QP (bandwidth tests with -q)
	// rdmaCM is -R: the QPs and the exchange connect through rdma_cm
	// (cm.go).
	rdmaCM bool
	// events is -e: the loops sleep on a completion channel before each
	// poll (perftest's use_event); vector is -X, the completion vector
	// named in the report (-1 without -X).
	events bool
	vector int

	unsorted  bool // -U: list every latency sample as measured
	histogram bool // -H: list them sorted
	margin    int  // -f seconds; -1 means duration/4

	gbits    bool   // --report_gbits
	outJSON  bool   // --out_json
	jsonFile string // --out_json_file
	cpuUtil  bool   // --cpu_util (reported in duration mode only, as perftest)

	// softrdma's additions.
	pcap     string // --pcap: a pcapng capture of the device's packets
	metrics  string // --metrics: serve the device's counters for Prometheus
	log      bool   // --log: the device's QP errors and drops on stderr
	csvFile  string // --out_csv: the table as CSV
	plotFile string // --plot: a PNG of the table against message size
	// secure is --secure: the QPs protect their packets (softrdma on
	// both ends, both passing it); a key exchange follows the negotiation
	// on the TCP connection.
	secure verbs.SecurityMode

	// maxAllSize caps the sizes of -a. perftest has no such option; tests
	// set it to keep -a short. 0 means 8 MiB, as perftest.
	maxAllSize uint64
	// onResources, if set, sees the resources once they are filled (tests
	// corrupt buffers with it).
	onResources func(*ptResources)
}

// errPTExit ends a command without an error message, as -h and -V do.
var errPTExit = errors.New("perftest: exit")

// ptOption is one getopt_long option.
type ptOption struct {
	short  byte
	long   string
	hasArg bool
	set    func(o *ptOptions, arg string) error
}

// ptOptionTable returns the options of one test. Every test accepts the same
// names (as perftest's parser does); options that do not apply to the test
// fail with perftest's message.
func ptOptionTable() []ptOption {
	return []ptOption{
		{'p', "port", true, func(o *ptOptions, a string) error { return ptInt(a, "Port", 0, 65535, &o.port) }},
		{'d', "ib-dev", true, func(o *ptOptions, a string) error { o.devName = a; return nil }},
		{'i', "ib-port", true, func(o *ptOptions, a string) error { return ptInt(a, "IB Port", 1, 255, &o.ibPort) }},
		{'m', "mtu", true, func(o *ptOptions, a string) error { return ptInt(a, "MTU", 0, math.MaxInt32, &o.mtu) }},
		{'s', "size", true, (*ptOptions).setSize},
		{'n', "iters", true, func(o *ptOptions, a string) error {
			return ptInt(a, "Iteration num", ptMinIter, ptMaxIter, &o.iters)
		}},
		{'t', "tx-depth", true, func(o *ptOptions, a string) error { return ptInt(a, "Tx depth", 1, ptMaxTx, &o.txDepth) }},
		{'u', "qp-timeout", true, func(o *ptOptions, a string) error { return ptInt(a, "QP Timeout", 0, 31, &o.timeout) }},
		{'S', "sl", true, func(o *ptOptions, a string) error { return ptInt(a, "Service Level", 0, 15, &o.sl) }},
		{'x', "gid-index", true, func(o *ptOptions, a string) error {
			return ptInt(a, "Gid index", 0, ptMaxGIDIndex, &o.gidIndex)
		}},
		{'a', "all", false, func(o *ptOptions, _ string) error { o.runAll = true; return nil }},
		{'F', "CPU-freq", false, func(*ptOptions, string) error { return nil }}, // no CPU clock to check
		{'c', "connection", true, (*ptOptions).setConnection},
		{'q', "qp", true, func(o *ptOptions, a string) error {
			if o.test.kind != perftest.BW {
				return errors.New(" Multiple QPs only available on bw tests")
			}
			return ptInt(a, "num of Qps", 1, ptMaxQPs, &o.numQPs)
		}},
		{'e', "events", false, func(o *ptOptions, _ string) error {
			o.events = true
			if o.test.verb == perftest.Write {
				return errors.New(" Events feature not available on WRITE verb")
			}
			return nil
		}},
		{'X', "vector", true, func(o *ptOptions, a string) error {
			if o.test.verb == perftest.Write {
				return errors.New(" Events feature not available on WRITE verb")
			}
			return ptInt(a, "EQN", ptMinEQNum, ptMaxEQNum, &o.vector)
		}},
		{'I', "inline_size", true, func(o *ptOptions, a string) error {
			if err := ptInt(a, "Max inline", 0, ptMaxInline, &o.inline); err != nil {
				return err
			}
			if o.test.verb == perftest.Read || o.test.verb == perftest.Atomic {
				return errors.New(" Inline feature not available on READ/Atomic verbs")
			}
			return nil
		}},
		{'o', "outs", true, func(o *ptOptions, a string) error {
			if err := ptInt(a, "Outstanding Reads", math.MinInt32, math.MaxInt32, &o.outReads); err != nil {
				return err
			}
			if o.test.verb != perftest.Read && o.test.verb != perftest.Atomic {
				return errors.New(" Setting Outstanding reads only available on READ verb")
			}
			return nil
		}},
		{'r', "rx-depth", true, func(o *ptOptions, a string) error {
			if err := ptInt(a, " Rx depth", 1, ptMaxRx, &o.rxDepth); err != nil {
				return err
			}
			if o.test.verb != perftest.Send && o.rxDepth > ptDefRxRDMA {
				return errors.New(" On RDMA verbs rx depth can be only 1")
			}
			return nil
		}},
		{'Q', "cq-mod", true, func(o *ptOptions, a string) error {
			o.cqModSet = true
			return ptInt(a, "CQ moderation", 1, ptMaxCQMod, &o.cqMod)
		}},
		{'A', "atomic_type", true, func(o *ptOptions, a string) error {
			if o.test.verb != perftest.Atomic {
				return errors.New(" You are not running the atomic_lat/bw test!\n To change the atomic action type, you must run one of the atomic tests")
			}
			switch a {
			case "CMP_AND_SWAP":
				o.atomicOp = perftest.CmpAndSwap
			case "FETCH_AND_ADD":
				o.atomicOp = perftest.FetchAndAdd
			default:
				return errors.New(" Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}")
			}
			return nil
		}},
		{'D', "duration", true, func(o *ptOptions, a string) error {
			return ptInt(a, "Duration period", 1, math.MaxInt32, &o.duration)
		}},
		{'f', "margin", true, func(o *ptOptions, a string) error { return ptInt(a, "Margin", 0, math.MaxInt32, &o.margin) }},
		{'b', "bidirectional", false, func(o *ptOptions, _ string) error {
			if o.test.kind == perftest.Lat {
				return errors.New(" Bidirectional is only available in BW test")
			}
			o.duplex = true
			return nil
		}},
		{'N', "noPeak", false, func(o *ptOptions, _ string) error {
			if o.test.kind == perftest.Lat {
				return errors.New(" NoPeak only valid for BW tests")
			}
			o.noPeak = true
			return nil
		}},
		{'l', "post_list", true, func(o *ptOptions, a string) error {
			return ptInt(a, "Send Post List size", 1, ptMaxTx, &o.postList)
		}},
		{'R', "rdma_cm", false, func(o *ptOptions, _ string) error { o.rdmaCM = true; return nil }},
		{'U', "report-unsorted", false, func(o *ptOptions, _ string) error {
			if o.test.kind == perftest.BW {
				return errors.New(" is Available only on Latency tests")
			}
			o.unsorted = true
			return nil
		}},
		{'H', "report-histogram", false, func(o *ptOptions, _ string) error {
			if o.test.kind == perftest.BW {
				return errors.New(" Available only on Latency tests")
			}
			o.histogram = true
			return nil
		}},
		{0, "run_infinitely", false, func(o *ptOptions, _ string) error { o.infinite = true; return nil }},
		{0, "mr_per_qp", false, func(o *ptOptions, _ string) error { o.mrPerQP = true; return nil }},
		{0, "recv_post_list", true, ptRefuse("--recv_post_list is not implemented by softrdma yet")},
		{'h', "help", false, func(*ptOptions, string) error { return errPTHelp }},
		{'V', "version", false, func(*ptOptions, string) error { return errPTVersion }},
		{0, "report_gbits", false, func(o *ptOptions, _ string) error { o.gbits = true; return nil }},
		{0, "out_json", false, func(o *ptOptions, _ string) error { o.outJSON = true; return nil }},
		{0, "out_json_file", true, func(o *ptOptions, a string) error { o.jsonFile = a; return nil }},
		{0, "perform_warm_up", false, func(o *ptOptions, _ string) error { o.warmUp = true; return nil }},
		{0, "cpu_util", false, func(o *ptOptions, _ string) error { o.cpuUtil = true; return nil }},
		{0, "pcap", true, func(o *ptOptions, a string) error { o.pcap = a; return nil }},
		{0, "metrics", true, func(o *ptOptions, a string) error { o.metrics = a; return nil }},
		{0, "log", false, func(o *ptOptions, a string) error { o.log = true; return nil }},
		{0, "out_csv", true, func(o *ptOptions, a string) error { o.csvFile = a; return nil }},
		{0, "plot", true, func(o *ptOptions, a string) error { o.plotFile = a; return nil }},
		{0, "secure", true, (*ptOptions).setSecure},
	}
}

// ptRefuse returns an option handler that refuses a perftest option
// softrdma does not implement, saying so, rather than ignoring it.
func ptRefuse(msg string) func(*ptOptions, string) error {
	return func(*ptOptions, string) error { return fmt.Errorf(" %s", msg) }
}

var (
	errPTHelp    = errors.New("help")
	errPTVersion = errors.New("version")
)

// ptInt parses a number as perftest's CHECK_VALUE does (strtol base 0: 0x
// and 0 prefixes) and checks its range.
func ptInt(s, name string, lo, hi int, dst *int) error {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return fmt.Errorf(" %s argument %s should be int", name, s)
	}
	if v < int64(lo) || v > int64(hi) {
		return fmt.Errorf(" %s should be between %d and %d", name, lo, hi)
	}
	*dst = int(v)
	return nil
}

// setConnection parses -c as change_conn_type does: UC for WRITE and
// SEND, UD for SEND only. XRC, DC, SRD and raw Ethernet need hardware
// softrdma does not model; they are refused by name.
func (o *ptOptions) setConnection(a string) error {
	verb := o.test.verb
	switch a {
	case "RC":
		o.conn = perftest.RC
	case "UC":
		if verb == perftest.Read || verb == perftest.Atomic {
			return errors.New(" UC connection not possible in READ/ATOMIC verbs")
		}
		o.conn = perftest.UC
	case "UD":
		if verb != perftest.Send {
			return errors.New(" UD connection only possible in SEND verb")
		}
		o.conn = perftest.UD
	case "XRC", "DC", "SRD", "RawEth":
		return fmt.Errorf(" Connection type %s is not supported by softrdma (RC, UC and UD are)", a)
	default:
		return errors.New(" Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}")
	}
	return nil
}

// setSecure parses --secure: auth or encrypt, on RC and UC (UD packets
// have no peer to share a key with).
func (o *ptOptions) setSecure(a string) error {
	switch a {
	case "auth":
		o.secure = verbs.SecurityAuth
	case "encrypt":
		o.secure = verbs.SecurityEncrypt
	default:
		return fmt.Errorf(" --secure %q: use auth or encrypt", a)
	}
	return nil
}

// setSize parses -s: a number with an optional K or M suffix.
func (o *ptOptions) setSize(a string) error {
	factor := uint64(1)
	switch {
	case strings.HasSuffix(a, "K"):
		a, factor = strings.TrimSuffix(a, "K"), 1024
	case strings.HasSuffix(a, "M"):
		a, factor = strings.TrimSuffix(a, "M"), 1024*1024
	}
	v, err := strconv.ParseUint(a, 0, 64)
	if err != nil || v < 1 || v*factor > math.MaxUint32/2 {
		return fmt.Errorf(" Message Size should be between %d and %d", 1, math.MaxUint32/2)
	}
	o.size, o.sizeSet = v*factor, true
	return nil
}

// parsePTArgs parses a command line the way perftest's parser() does:
// getopt_long (internal/getopt) with GNU argument permutation (so the host
// may come first), clustered short options ("-aF"), attached values
// ("-s4096", "--size=4096") and unambiguous prefixes of long options. usage receives the help text for
// -h and for an invalid flag.
func parsePTArgs(test ptTest, args []string, usage io.Writer) (*ptOptions, error) {
	o := &ptOptions{
		test:     test,
		ibPort:   1,
		port:     perftest.DefaultPort,
		gidIndex: -1,
		txDepth:  ptDefTxLat,
		rxDepth:  ptDefRxRDMA,
		cqMod:    ptDefCQMod,
		numQPs:   1,
		postList: 1,
		inline:   -1,
		vector:   -1,
		timeout:  ptDefQPTimeout,
		iters:    ptDefIters,
		margin:   -1,
		jsonFile: ptDefJSONFile,
		atomicOp: perftest.FetchAndAdd,
	}
	if test.kind == perftest.BW {
		o.txDepth = ptDefTxBW
		o.size = ptDefSizeBW
		if test.verb == perftest.Write {
			o.iters = ptDefItersWB
		}
	} else {
		o.size = ptDefSizeLat
	}
	if test.verb == perftest.Send {
		o.rxDepth = ptDefRxSend
	}
	if test.verb == perftest.Atomic {
		o.size = ptDefSizeAtomic
	}
	table := ptOptionTable()
	invalid := func(what string) error {
		fmt.Fprintf(usage, " Invalid Command or flag.\n Please check command line and run again.\n\n")
		ptUsage(usage, test)
		return fmt.Errorf("%s", what)
	}
	opts := make([]getopt.Option, len(table))
	for i := range table {
		opt := &table[i]
		opts[i] = getopt.Option{Short: opt.short, Long: opt.long, HasArg: opt.hasArg, Set: func(arg string) error {
			err := opt.set(o, arg)
			switch {
			case err == errPTHelp:
				ptUsage(usage, test)
				return errPTExit
			case err == errPTVersion:
				fmt.Fprintf(usage, "Version: %s\n", perftest.Version)
				return errPTExit
			}
			return err
		}}
	}
	positional, err := getopt.Parse(opts, args)
	if err != nil {
		var ge *getopt.Error
		if errors.As(err, &ge) {
			return nil, invalid(ge.Msg)
		}
		return nil, err
	}
	switch len(positional) {
	case 0:
	case 1:
		o.server = positional[0]
	default:
		return nil, errors.New(" Invalid Command line. Please check command rerun")
	}
	if err := o.forceDependencies(usage); err != nil {
		return nil, err
	}
	return o, nil
}

// role returns this side's role: the client names a host.
func (o *ptOptions) role() perftest.Role {
	if o.server != "" {
		return perftest.Client
	}
	return perftest.Server
}

// forceDependencies applies perftest's force_dependecies(): the adjustments
// and refusals that follow from the combination of options. Messages that
// perftest prints go to w.
func (o *ptOptions) forceDependencies(w io.Writer) error {
	verb, kind := o.test.verb, o.test.kind
	if o.secure != 0 && o.conn == perftest.UD {
		return errors.New(" --secure protects RC and UC connections, not UD")
	}
	if o.duration == 0 {
		if o.txDepth > o.iters {
			o.txDepth = o.iters
		}
		if verb == perftest.Send && o.rxDepth > o.iters {
			o.rxDepth = o.iters
		}
		if (o.conn == perftest.UD || o.conn == perftest.UC) && o.rxDepth == ptDefRxSend {
			o.rxDepth = min(o.iters, ptUCMaxRx)
		}
	}
	// Large messages get a completion each, unless the user asked for a
	// moderation or the sizes vary (-a).
	// Not with events either: perftest keeps the moderation then.
	if o.size > ptCQModSizeLimit && o.conn != perftest.UD && !o.runAll && !o.events {
		if !o.cqModSet {
			o.cqMod = 1
		} else if o.cqMod > 1 {
			fmt.Fprint(w, perftest.ResultLine)
			fmt.Fprintf(w, "Warning: Large message requested and CQ moderation enabled\n")
			fmt.Fprintf(w, "Warning: It can lead to inaccurate results\n")
		}
	}
	if o.postList > 1 {
		if kind != perftest.BW {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New("Post list is supported in BW tests only")
		}
		if o.duration == 0 && o.iters%o.postList != 0 {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New("Number of iterations must be a multiple of post list size")
		}
		if !o.cqModSet {
			o.cqMod = o.postList
			fmt.Fprint(w, perftest.ResultLine)
			fmt.Fprint(w, "Post List requested - CQ moderation will be the size of the post list\n")
		} else if o.postList%o.cqMod != 0 {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New("Post list size must be a multiple of CQ moderation")
		}
		if o.postList > o.txDepth {
			fmt.Fprint(w, perftest.ResultLine)
			return fmt.Errorf("Post list size %d is larger than the tx depth %d", o.postList, o.txDepth)
		}
	}
	if o.cqMod > o.txDepth {
		o.cqMod = o.txDepth
	}
	if verb == perftest.Read || verb == perftest.Atomic {
		o.inline = 0
	}
	if o.infinite {
		// perftest's --run_infinitely replaces -a (test_method) and
		// turns iterations into duration mode, -D being the interval
		// between reports (DEF_DURATION without -D).
		o.runAll, o.noPeak = false, true
		if o.duration == 0 {
			o.duration = ptDefDuration
		}
		if kind == perftest.Lat {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New(" run_infinitely exists only in BW tests for now.")
		}
		if o.duplex && verb == perftest.Send {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New(" run_infinitely mode is not supported in SEND Bidirectional BW test")
		}
		if o.events {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New(" run_infinitely does not support events feature yet.")
		}
	}
	if o.runAll {
		o.size = ptMaxSize
	}
	if verb == perftest.Atomic && o.size != ptDefSizeAtomic {
		fmt.Fprint(w, perftest.ResultLine)
		return errors.New("Message size cannot be changed for Atomic tests ")
	}
	if o.duration > 0 {
		o.iters = 0
		o.noPeak = true
		if o.events {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New("Duration mode doesn't work with events.")
		}
		if o.runAll {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New("Duration mode currently doesn't support running on all sizes.")
		}
		if o.margin < 0 {
			o.margin = o.duration / 4
		}
		if !(o.duration > 2*o.margin) {
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New("please check that DURATION > 2*MARGIN")
		}
	}
	if o.cpuUtil && o.duration == 0 {
		fmt.Fprint(w, perftest.ResultLine)
		fmt.Fprint(w, " CPU Utilization works only with Duration mode.\n")
	}
	if verb == perftest.Send && kind == perftest.BW && o.role() == perftest.Server && !o.duplex {
		o.noPeak = true
	}
	// "WA for a bug when rx_depth is odd in SEND".
	if verb == perftest.Send && o.rxDepth%2 == 1 && !o.runAll {
		o.rxDepth++
	}
	if o.duration == 0 && o.iters > ptNoPeakIters && kind == perftest.BW {
		o.noPeak = true
	}
	if o.rdmaCM {
		switch o.conn {
		case perftest.UC:
			// perftest prints these two on stdout and exits.
			fmt.Fprint(w, perftest.ResultLine)
			return errors.New(" UC is not supported in librdmacm")
		}
	}
	if !o.events && o.vector >= 0 {
		return errors.New(" Events must be enabled to select a completion vector")
	}
	if o.maxAllSize == 0 {
		o.maxAllSize = ptMaxSize
	}
	return nil
}

// sizes returns the message sizes to measure: 2, 4, ... 8 MiB with -a,
// otherwise -s.
func (o *ptOptions) sizes() []uint64 {
	if !o.runAll {
		return []uint64{o.size}
	}
	var s []uint64
	for i := 1; i < 24 && uint64(1)<<i <= o.maxAllSize; i++ {
		s = append(s, uint64(1)<<i)
	}
	return s
}

// ptUsage writes the help text: perftest's, for the options softrdma
// implements.
func ptUsage(w io.Writer, t ptTest) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Usage:\n")
	p("  %s            start a server and wait for connection\n", t.name)
	p("  %s <host>     connect to server at <host>\n", t.name)
	p("\nOptions:\n")
	if t.verb != perftest.Atomic {
		p("  -a, --all  Run sizes from 2 till 2^23\n")
	} else {
		p("  -A, --atomic_type=<type>  type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD} (default FETCH_AND_ADD)\n")
	}
	if t.kind == perftest.BW {
		p("  -b, --bidirectional  Measure bidirectional bandwidth (default unidirectional)\n")
	}
	p("  -c, --connection=<RC/UC/UD>  Connection type RC/UC/UD (default RC; UC for WRITE and SEND, UD for SEND)\n")
	p("  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found; or set SOFTRDMA_ADDR=<ip>)\n")
	p("  -D, --duration  Run test for a customized period of seconds.\n")
	if t.verb != perftest.Write {
		p("  -e, --events  Sleep on CQ events (default poll)\n")
		p("  -X, --vector=<completion vector>  Set <completion vector> used for events\n")
	}
	p("  -f, --margin  measure results within margins. (default=2sec)\n")
	p("  -F, --CPU-freq  Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is not on max.\n")
	p("  -h, --help  Show this help screen.\n")
	p("  -i, --ib-port=<port>  Use port <port> of IB device (default 1)\n")
	if t.verb != perftest.Read && t.verb != perftest.Atomic {
		p("  -I, --inline_size=<size>  Max size of message to be sent in inline\n")
	}
	if t.kind == perftest.BW {
		p("  -l, --post_list=<list size>  Post list of send WQEs of <list size> size (instead of single post)\n")
	}
	p("  -m, --mtu=<mtu>  MTU size : 256 - 4096 (default port mtu)\n")
	defIters := ptDefIters
	if t.verb == perftest.Write && t.kind == perftest.BW {
		defIters = ptDefItersWB
	}
	p("  -n, --iters=<iters>  Number of exchanges (at least %d, default %d)\n", ptMinIter, defIters)
	if t.kind == perftest.BW {
		p("  -N, --noPeak Cancel peak-bw calculation (default with peak up to iters=20000)\n")
	}
	if t.verb == perftest.Read || t.verb == perftest.Atomic {
		p("  -o, --outs=<num>  num of outstanding read/atom(default max of device)\n")
	}
	p("  -p, --port=<port>  Listen on/connect to port <port> (default %d)\n", perftest.DefaultPort)
	p("  -R, --rdma_cm  Connect QPs with rdma_cm and run test on those QPs\n")
	if t.kind == perftest.BW {
		p("  -q, --qp=<num of qp's>  Num of qp's(default 1)\n")
		p("  -Q, --cq-mod  Generate Cqe only after <--cq-mod> completion\n")
	}
	if t.verb == perftest.Send {
		p("  -r, --rx-depth=<dep>  Rx queue size (default %d).\n", ptDefRxSend)
	}
	if t.verb != perftest.Atomic {
		defSize := ptDefSizeBW
		if t.kind == perftest.Lat {
			defSize = ptDefSizeLat
		}
		p("  -s, --size=<size>  Size of message to exchange (default %d)\n", defSize)
	}
	p("  -S, --sl=<sl>  SL (default 0)\n")
	if t.kind == perftest.BW {
		p("  -t, --tx-depth=<dep>  Size of tx queue (default %d)\n", ptDefTxBW)
	}
	if t.kind == perftest.Lat {
		p("  -H, --report-histogram  Print out all results (default print summary only)\n")
		p("  -U, --report-unsorted  (implies -H) print out unsorted results (default sorted)\n")
	}
	p("  -u, --qp-timeout=<timeout>  QP timeout, timeout value is 4 usec * 2 ^(timeout), default %d\n", ptDefQPTimeout)
	p("  -V, --version  Display version number\n")
	p("  -x, --gid-index=<index>  Test uses GID with GID index (default: the device's IP address, index 1 on softrdma)\n")
	p("\n")
	p("      --out_json  Save the report in a json file\n")
	p("      --out_json_file=<file>  Name of the report json file. (Default: %s in the working directory) \n", ptDefJSONFile)
	if t.kind == perftest.BW && t.verb != perftest.Send {
		p("      --perform_warm_up Perform some iterations before start measuring in order to warming-up memory cache, valid in Atomic, Read and Write BW tests\n")
	}
	if t.kind == perftest.BW {
		p("      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)\n")
	}
	p("      --cpu_util  Show CPU Utilization in report, valid only in Duration mode \n")
	p("      --mr_per_qp  Create memory region for each qp.\n")
	if t.kind == perftest.BW {
		p("      --run_infinitely  Run test forever, print results every <duration> seconds\n")
	}
	p("\n softrdma additions (the table itself is unchanged):\n")
	p("      --out_csv=<file>  Also write the table as CSV, one row per message size\n")
	p("      --plot=<file.png>  Plot the table against message size (for -a sweeps)\n")
	p("      --pcap=<file>  Write every RoCEv2 packet the device sends and receives to <file> (pcapng; tshark/Wireshark dissect it)\n")
	p("      --metrics=<host:port>  Serve the device's counters for Prometheus on http://<host:port>/metrics while the test runs\n")
	p("      --secure=auth|encrypt  Protect every packet with a MAC and a sequence number (auth), and encrypt payloads (encrypt): a softrdma extension, RC and UC only; both ends must pass it (docs/security.md)\n")
	p("  A progress bar is drawn on stderr when it is a terminal (SOFTRDMA_NO_PROGRESS=1: never)\n")
}
