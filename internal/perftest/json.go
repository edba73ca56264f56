package perftest

import (
	"fmt"
	"io"
	"strings"
)

// JSONStyle selects the layout of the --out_json file.
type JSONStyle int

const (
	// JSONPerftest45 is byte for byte what perftest 4.5-0.18 writes with
	// --out_json. It is not valid JSON: keys are unquoted, strings mostly
	// unquoted, and every object ends with a trailing comma
	// ("test_info: {\ntest: RDMA_Write_BW_Test,\n...").
	JSONPerftest45 JSONStyle = iota
	// JSONValid is valid JSON with the keys and layout that later perftest
	// releases (25.x/26.x) write: the same key names, quoted, plus
	// "Use_ROCm_memory" and "Use_MUSA_memory" ("OFF").
	JSONValid
)

// String returns the style's name.
func (s JSONStyle) String() string {
	switch s {
	case JSONPerftest45:
		return "perftest-4.5"
	case JSONValid:
		return "json"
	}
	return fmt.Sprintf("JSONStyle(%d)", int(s))
}

// jsonWriter emits "key: value" lines in one of the two styles.
type jsonWriter struct {
	b     strings.Builder
	style JSONStyle
}

func (j *jsonWriter) key(k string) string {
	if j.style == JSONValid {
		return `"` + k + `"`
	}
	return k
}

// str writes a string member; perftest 4.5 quotes only some strings.
func (j *jsonWriter) str(k, v string, quoted45 bool) {
	if j.style == JSONValid || quoted45 {
		v = `"` + v + `"`
	}
	fmt.Fprintf(&j.b, "%s: %s,\n", j.key(k), v)
}

func (j *jsonWriter) num(k string, v int) {
	fmt.Fprintf(&j.b, "%s: %d,\n", j.key(k), v)
}

// testInfo writes the test_info object (write_test_info_to_file).
func (j *jsonWriter) testInfo(ti TestInfo) {
	fmt.Fprintf(&j.b, "%s: {\n", j.key("test_info"))
	var name strings.Builder
	name.WriteString(ti.Verb.String() + "_")
	if ti.Verb == Atomic {
		name.WriteString(ti.AtomicOp.String() + "_")
	}
	switch ti.Kind {
	case BW:
		if ti.Duplex {
			name.WriteString("Bidirectional_")
		}
		if ti.PostList > 1 {
			name.WriteString("Post_List_")
		}
		name.WriteString("BW_")
	case Lat:
		name.WriteString("Latency_")
	}
	name.WriteString("Test")
	j.str("test", name.String(), false)
	if ti.UseEvent {
		j.str("Test with events", fmt.Sprintf("Using_%s_comp%d", ti.Device, ti.EQNum), false)
	}
	j.str("Dual_port", onOff(ti.DualPort), false)
	j.str("Device", ti.Device, true)
	j.num("Number_of_qps", ti.NumQPs)
	j.str("Transport_type", ti.transport(), false)
	j.str("Connection_type", ti.Connection.String(), false)
	j.str("Using_SRQ", onOff(ti.UseSRQ), false)
	if ti.PCIeRelaxOrder == "" {
		j.b.WriteString(" ") // both versions print a leading space here
		j.str("PCIe_relax_order", "Unsupported", false)
	} else {
		j.str("PCIe_relax_order", ti.PCIeRelaxOrder, false)
	}
	j.str("ibv_wr_API", onOff(!ti.OldPostSend), false)
	if ti.Role == Client || ti.Duplex {
		if j.style == JSONValid {
			j.num("TX_depth", ti.TXDepth)
		} else {
			j.num("TX_depth ", ti.TXDepth) // sic: "TX_depth : %d,\n"
		}
	}
	if ti.PostList > 1 {
		j.num("Post_List", ti.PostList)
	}
	if ti.RecvPostList > 1 {
		j.num("Recv_Post_List", ti.RecvPostList)
	}
	if ti.Verb == Send && (ti.Role == Server || ti.Duplex) {
		j.num("RX_depth", ti.RXDepth)
	}
	if ti.Kind == BW {
		j.num("CQ_Moderation", ti.CQMod)
	}
	j.num("Mtu", ti.MTU.Bytes())
	j.str("Link_type", ti.linkType(), false)
	if ti.GIDIndex != -1 {
		j.num("GID_index", ti.GIDIndex)
	}
	if ti.Verb != Read && ti.Verb != Atomic {
		j.num("Max_inline_data", ti.InlineSize)
	} else {
		j.num("Outstand_reads", ti.OutReads)
	}
	j.str("rdma_cm_QPs", onOff(ti.RDMACM), false)
	if j.style == JSONValid {
		j.str("Use_ROCm_memory", "OFF", false)
		j.str("Use_MUSA_memory", "OFF", false)
		// The last member has no trailing comma.
		fmt.Fprintf(&j.b, "%s: \"%s\"\n},\n", j.key("Data_ex_method"), exchangeMethod(ti.RDMACMExchange))
		return
	}
	j.str("Data_ex_method", exchangeMethod(ti.RDMACMExchange), false)
	j.b.WriteString("},\n")
}

// results writes the results object around pre-formatted members, given
// as (key, value) pairs.
func (j *jsonWriter) results(members ...string) {
	fmt.Fprintf(&j.b, "%s: {\n", j.key("results"))
	for i := 0; i < len(members); i += 2 {
		sep := ",\n"
		if j.style == JSONValid && i+2 == len(members) {
			sep = "\n"
		}
		fmt.Fprintf(&j.b, "%s: %s%s", j.key(members[i]), members[i+1], sep)
	}
	if j.style == JSONValid {
		j.b.WriteString("}\n}\n")
	} else {
		j.b.WriteString("},\n}\n")
	}
}

func (j *jsonWriter) flush(w io.Writer) error {
	_, err := io.WriteString(w, j.b.String())
	return err
}

func newJSON(style JSONStyle) *jsonWriter {
	j := &jsonWriter{style: style}
	j.b.WriteString("{\n")
	return j
}

// WriteBWJSON writes a bandwidth test's --out_json file. gbits is the
// report format (--report_gbits); as in the table, averages below 0.1 Gb/s
// get six decimals. cpuUtil (--cpu_util in duration mode) adds
// "CPU_util", r.CPUUtil, as perftest does. perftest rewrites the file for
// every row it prints, so with -a it holds the last message size.
func WriteBWJSON(w io.Writer, style JSONStyle, ti TestInfo, r BWReport, gbits, cpuUtil bool) error {
	j := newJSON(style)
	j.testInfo(ti)
	prec := 2
	if gbits && r.BWAvg < 0.1 {
		prec = 6
	}
	m := []string{
		"MsgSize", fmt.Sprint(r.Size),
		"n_iterations", fmt.Sprint(r.Iters),
		"BW_peak", cFloat(r.BWPeak, prec),
		"BW_average", cFloat(r.BWAvg, prec),
		"MsgRate", cFloat(r.MsgRate, 6),
	}
	if cpuUtil {
		m = append(m, "CPU_util", cFloat(r.CPUUtil, 2))
	}
	j.results(m...)
	return j.flush(w)
}

// WriteLatJSON writes a latency test's --out_json file.
func WriteLatJSON(w io.Writer, style JSONStyle, ti TestInfo, s LatStats) error {
	j := newJSON(style)
	j.testInfo(ti)
	j.results(
		"MsgSize", fmt.Sprint(s.Size),
		"n_iterations", fmt.Sprint(s.Iters),
		"t_min", cFloat(s.TMin, 2),
		"t_max", cFloat(s.TMax, 2),
		"t_typical", cFloat(s.TTypical, 2),
		"t_avg", cFloat(s.TAvg, 2),
		"t_stdev", cFloat(s.TStdev, 2),
		"percentile_99", cFloat(s.P99, 2),
		"percentile_99.9", cFloat(s.P999, 2),
	)
	return j.flush(w)
}

// WriteLatDurationJSON writes a duration-mode (-D) latency test's
// --out_json file; cpuUtil adds "CPU_util" as WriteBWJSON does.
func WriteLatDurationJSON(w io.Writer, style JSONStyle, ti TestInfo, s LatDurationStats, cpuUtil bool) error {
	j := newJSON(style)
	j.testInfo(ti)
	m := []string{
		"MsgSize", fmt.Sprint(s.Size),
		"n_iterations", fmt.Sprint(s.Iters),
		"t_avg", cFloat(s.TAvg, 2),
		"tps_average", cFloat(s.TPS, 2),
	}
	if cpuUtil {
		m = append(m, "CPU_util", cFloat(s.CPUUtil, 2))
	}
	j.results(m...)
	return j.flush(w)
}
