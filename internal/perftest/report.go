package perftest

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ResultLine is the dashed line perftest prints around its banner and
// tables (RESULT_LINE), newline included.
const ResultLine = "---------------------------------------------------------------------------------------\n"

// ResultLinePerPort is the longer line of --report-per-port tables.
const ResultLinePerPort = "-------------------------------------------------------------------------------------------------------------------------------------------------------------------\n"

// Table headings of perftest 4.5 (RESULT_FMT*), without the newline.
const (
	bwHeading            = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	bwHeadingGbits       = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	bwHeadingPerPort     = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   BW Port1[MB/sec]   MsgRate Port1[Mpps]   BW Port2[MB/sec]   MsgRate Port2[Mpps]"
	bwHeadingGbitPerPort = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]   BW Port1[Gb/sec]   MsgRate Port1[Mpps]   BW Port2[Gb/sec]   MsgRate Port2[Mpps]"
	latHeading           = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latDurationHeading   = " #bytes        #iterations       t_avg[usec]    tps average"
)

// TestInfo is what perftest's banner (ctx_print_test_info) and the
// test_info object of its JSON file show. The zero value is not useful;
// fill in at least Verb, Kind, Role, Device, NumQPs, MTU and LinkType.
type TestInfo struct {
	Verb     Verb
	AtomicOp AtomicOp // shown for atomic tests only
	Kind     Kind
	Role     Role
	Duplex   bool // -b

	PostList     int // --post_list; shown when > 1
	RecvPostList int // --recv_post_list; shown when > 1

	UseEvent bool // -e: shows " Test with events. Using <Device>_comp<EQNum>"
	EQNum    int

	Device     string // e.g. "rxe0"
	DualPort   bool
	NumQPs     int
	Transport  string // "" means "IB" (rxe and RoCE devices are IBV_TRANSPORT_IB)
	Connection Connection
	UseSRQ     bool

	// PCIeRelaxOrder is "ON" or "OFF" as printed by perftest builds with
	// relaxed-ordering support; "" prints "Unsupported", as builds without.
	PCIeRelaxOrder string
	// OldPostSend (--use_old_post_send) shows "ibv_wr* API : OFF".
	OldPostSend bool

	TXDepth int // shown on the client and in duplex tests
	RXDepth int // shown for send tests on the server and in duplex tests
	CQMod   int // shown for BW tests
	MTU     MTU // the negotiated MTU
	// LinkType is "Ethernet" or "IB"; "" prints "IB", as perftest does for
	// an unspecified link layer.
	LinkType string
	// GIDIndex is shown unless it is -1 (no -x on InfiniBand); perftest
	// always has one on RoCE.
	GIDIndex   int
	InlineSize int // "Max inline data", shown unless Verb is Read or Atomic
	OutReads   int // "Outstand reads", shown for Read and Atomic

	RDMACM         bool // -R: "rdma_cm QPs : ON"
	RDMACMExchange bool // -z: "Data ex. method : rdma_cm"
}

func (ti TestInfo) transport() string {
	if ti.Transport == "" {
		return "IB"
	}
	return ti.Transport
}

func (ti TestInfo) linkType() string {
	if ti.LinkType == "" {
		return "IB"
	}
	return ti.LinkType
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// WriteTestInfo writes perftest's banner: the dashed line, the test name
// ("                    RDMA_Write BW Test"), one line per setting, and the
// dashed line again.
func WriteTestInfo(w io.Writer, ti TestInfo) error {
	var b strings.Builder
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(ti.Verb.String() + " ")
	if ti.Verb == Atomic {
		b.WriteString(ti.AtomicOp.String() + " ")
	}
	switch ti.Kind {
	case BW:
		if ti.Duplex {
			b.WriteString("Bidirectional ")
		}
		if ti.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	case Lat:
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	if ti.UseEvent {
		fmt.Fprintf(&b, " Test with events. Using %s_comp%d\n", ti.Device, ti.EQNum)
	}
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", onOff(ti.DualPort), ti.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", ti.NumQPs, ti.transport())
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", ti.Connection, onOff(ti.UseSRQ))
	if ti.PCIeRelaxOrder == "" {
		b.WriteString(" PCIe relax order: Unsupported\n")
	} else {
		fmt.Fprintf(&b, " PCIe relax order: %s\n", ti.PCIeRelaxOrder)
	}
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", onOff(!ti.OldPostSend))
	if ti.Role == Client || ti.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", ti.TXDepth)
	}
	if ti.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", ti.PostList)
	}
	if ti.RecvPostList > 1 {
		fmt.Fprintf(&b, " Recv Post List  : %d\n", ti.RecvPostList)
	}
	if ti.Verb == Send && (ti.Role == Server || ti.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", ti.RXDepth)
	}
	if ti.Kind == BW {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", ti.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", ti.MTU.Bytes())
	fmt.Fprintf(&b, " Link type       : %s\n", ti.linkType())
	if ti.GIDIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", ti.GIDIndex)
	}
	if ti.Verb != Read && ti.Verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", ti.InlineSize)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", ti.OutReads)
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : %s\n", onOff(ti.RDMACM))
	fmt.Fprintf(&b, " Data ex. method : %s\n", exchangeMethod(ti.RDMACMExchange))
	if ti.RDMACM && ti.Role == Server {
		b.WriteString(ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP\n")
	}
	b.WriteString(ResultLine)
	_, err := io.WriteString(w, b.String())
	return err
}

func exchangeMethod(rdmaCM bool) string {
	if rdmaCM {
		return "rdma_cm"
	}
	return "Ethernet"
}

// AddressLines returns what perftest prints for one QP's key
// (ctx_print_pingpong_data):
//
//	" local address: LID 0000 QPN 0x0024 PSN 0x6539be RKey 0x0006de VAddr 0x00559f13b3a000\n"
//	" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03\n"
//
// Numbers use C's "%#0Nx", whose width counts the "0x" and which prints no
// "0x" for zero (hence "LID 0000"). " OUT %#04x" (Dest.OutReads) is shown
// for Read; RKey and VAddr for Read and Write only. The GID line, shown when
// withGID (a GID index is set), prints the bytes in decimal, as perftest's
// "%02d" does.
func AddressLines(side Side, d Dest, verb Verb, withGID bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side,
		cAltHex(uint64(d.LID), 4), cAltHex(uint64(d.QPN), 6), cAltHex(uint64(d.PSN), 6))
	switch verb {
	case Read:
		fmt.Fprintf(&b, " OUT %s", cAltHex(uint64(d.OutReads), 4))
		fallthrough
	case Write:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cAltHex(uint64(d.RKey), 8), cAltHex(d.VAddr, 16))
	}
	b.WriteByte('\n')
	if withGID {
		b.WriteString(" GID: ")
		for i, g := range d.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			if g < 10 {
				b.WriteByte('0')
			}
			b.WriteString(strconv.Itoa(int(g)))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// cAltHex formats v as C's printf("%#0*x", width, v).
func cAltHex(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	prefix := "0x"
	if v == 0 {
		prefix = ""
	}
	if pad := width - len(prefix) - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	return prefix + digits
}

// BWFormat selects the bandwidth table's variant.
type BWFormat struct {
	Gbits   bool // --report_gbits: Gb/sec instead of MB/sec (MiB/s)
	PerPort bool // --report-per-port: four more columns
	CPUUtil bool // --cpu_util in duration mode: a CPU_Util[%] column (BWReport.CPUUtil)
}

// cpuUtilHeading and cpuUtilCell end a heading and a row when perftest
// reports CPU utilisation (RESULT_EXT_CPU_UTIL, REPORT_EXT_CPU_UTIL).
const cpuUtilHeading = "    CPU_Util[%]"

func rowEnd(cpu bool, util float64) string {
	if !cpu {
		return "\n"
	}
	return "\t    " + cf(util, 3, 2) + "\n"
}

// WriteBWHeader writes the dashed line and the heading of the bandwidth
// table, as perftest prints them after the address lines.
func WriteBWHeader(w io.Writer, f BWFormat) error {
	line, heading := ResultLine, bwHeading
	switch {
	case f.PerPort && f.Gbits:
		line, heading = ResultLinePerPort, bwHeadingGbitPerPort
	case f.PerPort:
		line, heading = ResultLinePerPort, bwHeadingPerPort
	case f.Gbits:
		heading = bwHeadingGbits
	}
	if f.CPUUtil {
		heading += cpuUtilHeading
	}
	_, err := io.WriteString(w, line+heading+"\n")
	return err
}

// WriteBWRow writes one row of the bandwidth table (print_full_bw_report).
// With Gbits and an average below 0.1 Gb/s perftest switches to six
// decimals and other spacing; so does this.
func WriteBWRow(w io.Writer, r BWReport, f BWFormat) error {
	var s string
	switch {
	case f.PerPort:
		s = fmt.Sprintf(" %-7d    %-10d     %s            %s\t\t   %s        %s            %s              %s            %s",
			r.Size, r.Iters, cf(r.BWPeak, 7, 2), cf(r.BWAvg, 7, 2), cf(r.MsgRate, 7, 6),
			cf(r.BWAvgPort1, 7, 2), cf(r.MsgRatePort1, 7, 6), cf(r.BWAvgPort2, 7, 2), cf(r.MsgRatePort2, 7, 6))
	case f.Gbits && r.BWAvg < 0.1:
		s = fmt.Sprintf(" %-7d    %d           %s            %s            %s",
			r.Size, r.Iters, cf(r.BWPeak, 7, 6), cf(r.BWAvg, 7, 6), cf(r.MsgRate, 7, 6))
	default:
		s = fmt.Sprintf(" %-7d    %-10d       %s            %s\t\t   %s",
			r.Size, r.Iters, cf(r.BWPeak, 7, 2), cf(r.BWAvg, 7, 2), cf(r.MsgRate, 7, 6))
	}
	_, err := io.WriteString(w, s+rowEnd(f.CPUUtil, r.CPUUtil))
	return err
}

// WriteBWFooter writes the dashed line that closes the bandwidth table.
func WriteBWFooter(w io.Writer, f BWFormat) error {
	line := ResultLine
	if f.PerPort {
		line = ResultLinePerPort
	}
	_, err := io.WriteString(w, line)
	return err
}

// WriteLatHeader writes the dashed line and the heading of the latency
// table (RESULT_FMT_LAT, which ends with a space).
func WriteLatHeader(w io.Writer) error {
	_, err := io.WriteString(w, ResultLine+latHeading+"\n")
	return err
}

// WriteLatRow writes one row of the latency table (REPORT_FMT_LAT, with
// its tabs).
func WriteLatRow(w io.Writer, s LatStats) error {
	_, err := fmt.Fprintf(w, " %-7d %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s\n",
		s.Size, s.Iters, cf(s.TMin, 7, 2), cf(s.TMax, 7, 2), cf(s.TTypical, 7, 2),
		cf(s.TAvg, 7, 2), cf(s.TStdev, 7, 2), cf(s.P99, 7, 2), cf(s.P999, 7, 2))
	return err
}

// WriteLatDurationHeader writes the dashed line and the heading of the
// duration-mode (-D) latency table; cpuUtil adds the CPU_Util[%] column.
func WriteLatDurationHeader(w io.Writer, cpuUtil bool) error {
	h := latDurationHeading
	if cpuUtil {
		h += cpuUtilHeading
	}
	_, err := io.WriteString(w, ResultLine+h+"\n")
	return err
}

// WriteLatDurationRow writes one row of the duration-mode latency table;
// cpuUtil adds s.CPUUtil.
func WriteLatDurationRow(w io.Writer, s LatDurationStats, cpuUtil bool) error {
	_, err := fmt.Fprintf(w, " %-7d       %d            %s        %s%s",
		s.Size, s.Iters, cf(s.TAvg, 7, 2), cf(s.TPS, 7, 2), rowEnd(cpuUtil, s.CPUUtil))
	return err
}

// WriteLatFooter writes the dashed line that closes a latency table.
func WriteLatFooter(w io.Writer) error {
	_, err := io.WriteString(w, ResultLine)
	return err
}

// cf formats v as C's printf("%-*.*f", width, prec, v), glibc's "inf" and
// "-nan" included.
func cf(v float64, width, prec int) string {
	s := cFloat(v, prec)
	if len(s) < width {
		s += strings.Repeat(" ", width-len(s))
	}
	return s
}

// FormatFloat formats v as perftest prints it (C's printf("%.*f", prec,
// v), "-nan" and "inf" included), for outputs that must match its tables.
func FormatFloat(v float64, prec int) string { return cFloat(v, prec) }

// cFloat formats v as C's printf("%.*f", prec, v).
func cFloat(v float64, prec int) string {
	switch {
	case math.IsNaN(v):
		if math.Signbit(v) {
			return "-nan"
		}
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// WriteLatSamples writes the sample list of -U or -H: "#, usec", then
// "<n>, <usec>" with C's %g. print_report_lat follows the lists with
// WriteLatHeader, so that the row has its heading again.
func WriteLatSamples(w io.Writer, us []float64) error {
	b := []byte("#, usec\n")
	for i, v := range us {
		b = fmt.Appendf(b, "%d, %s\n", i+1, cG(v))
	}
	_, err := w.Write(b)
	return err
}

// cG formats v as C's "%g": six significant digits, trailing zeros
// dropped, an exponent below 1e-4 or from 1e6.
func cG(v float64) string { return fmt.Sprintf("%.6g", v) }
