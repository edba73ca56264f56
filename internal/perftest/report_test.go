package perftest

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The expected strings below are spelled out from perftest 4.5-0.18's
// format strings (perftest_parameters.h/.c, perftest_communication.h).

var writeBWClient = TestInfo{
	Verb: Write, Kind: BW, Role: Client, Device: "rxe0", NumQPs: 1, Connection: RC,
	PCIeRelaxOrder: "ON", TXDepth: 20, CQMod: 1, MTU: MTU1024, LinkType: "Ethernet", GIDIndex: 1,
}

func TestWriteTestInfo(t *testing.T) {
	tests := []struct {
		name string
		ti   TestInfo
		want string
	}{
		{"write bw client", writeBWClient, ResultLine +
			"                    RDMA_Write BW Test\n" +
			" Dual-port       : OFF\t\tDevice         : rxe0\n" +
			" Number of qps   : 1\t\tTransport type : IB\n" +
			" Connection type : RC\t\tUsing SRQ      : OFF\n" +
			" PCIe relax order: ON\n" +
			" ibv_wr* API     : ON\n" +
			" TX depth        : 20\n" +
			" CQ Moderation   : 1\n" +
			" Mtu             : 1024[B]\n" +
			" Link type       : Ethernet\n" +
			" GID index       : 1\n" +
			" Max inline data : 0[B]\n" +
			" rdma_cm QPs\t : OFF\n" +
			" Data ex. method : Ethernet\n" +
			ResultLine},
		{"atomic lat server", TestInfo{
			Verb: Atomic, AtomicOp: FetchAndAdd, Kind: Lat, Role: Server, Device: "rxe0", NumQPs: 1,
			Connection: RC, TXDepth: 1, MTU: MTU4096, LinkType: "Ethernet", GIDIndex: 3, OutReads: 128,
		}, ResultLine +
			"                    Atomic FETCH_AND_ADD Latency Test\n" +
			" Dual-port       : OFF\t\tDevice         : rxe0\n" +
			" Number of qps   : 1\t\tTransport type : IB\n" +
			" Connection type : RC\t\tUsing SRQ      : OFF\n" +
			" PCIe relax order: Unsupported\n" +
			" ibv_wr* API     : ON\n" +
			" Mtu             : 4096[B]\n" +
			" Link type       : Ethernet\n" +
			" GID index       : 3\n" +
			" Outstand reads  : 128\n" +
			" rdma_cm QPs\t : OFF\n" +
			" Data ex. method : Ethernet\n" +
			ResultLine},
		{"send bw duplex, events, post list, IB without GID", TestInfo{
			Verb: Send, Kind: BW, Role: Server, Duplex: true, PostList: 4, RecvPostList: 2, UseEvent: true,
			EQNum: 0, Device: "mlx5_0", DualPort: true, NumQPs: 8, Connection: UD, UseSRQ: true,
			PCIeRelaxOrder: "OFF", OldPostSend: true, TXDepth: 128, RXDepth: 512, CQMod: 100, MTU: MTU2048,
			GIDIndex: -1, InlineSize: 188, RDMACM: true, RDMACMExchange: true,
		}, ResultLine +
			"                    Send Bidirectional Post List BW Test\n" +
			" Test with events. Using mlx5_0_comp0\n" +
			" Dual-port       : ON\t\tDevice         : mlx5_0\n" +
			" Number of qps   : 8\t\tTransport type : IB\n" +
			" Connection type : UD\t\tUsing SRQ      : ON\n" +
			" PCIe relax order: OFF\n" +
			" ibv_wr* API     : OFF\n" +
			" TX depth        : 128\n" +
			" Post List       : 4\n" +
			" Recv Post List  : 2\n" +
			" RX depth        : 512\n" +
			" CQ Moderation   : 100\n" +
			" Mtu             : 2048[B]\n" +
			" Link type       : IB\n" +
			" Max inline data : 188[B]\n" +
			" rdma_cm QPs\t : ON\n" +
			" Data ex. method : rdma_cm\n" +
			// A server with -R, as ib_write_bw -R on rxe prints it.
			ResultLine +
			" Waiting for client rdma_cm QP to connect\n" +
			" Please run the same command with the IB/RoCE interface IP\n" +
			ResultLine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteTestInfo(&b, tt.ti); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestAddressLines(t *testing.T) {
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 3}
	// The client's key from write_bw.pcap.
	key, err := ParseDest([]byte("0000:0001:000024:6539be:000006de:0000559f13b3a000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:03:00000000:\x00"), true)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		side    Side
		d       Dest
		verb    Verb
		withGID bool
		want    string
	}{
		{Local, key, Write, true, " local address: LID 0000 QPN 0x0024 PSN 0x6539be RKey 0x0006de VAddr 0x00559f13b3a000\n" +
			" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03\n"},
		{Remote, Dest{OutReads: 0x80, QPN: 0x27, PSN: 0x5fb1d4, RKey: 0x995, VAddr: 0x56303c6d2000, GID: gid}, Read, true,
			" remote address: LID 0000 QPN 0x0027 PSN 0x5fb1d4 OUT 0x80 RKey 0x000995 VAddr 0x0056303c6d2000\n" +
				" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03\n"},
		{Local, Dest{LID: 1, OutReads: 1, QPN: 0x26, PSN: 0x38a022, RKey: 5, VAddr: 1}, Send, false,
			" local address: LID 0x01 QPN 0x0026 PSN 0x38a022\n"},
		{Local, Dest{LID: 0x1234, QPN: 0, PSN: 0}, Atomic, false,
			" local address: LID 0x1234 QPN 000000 PSN 000000\n"},
	}
	for _, tt := range tests {
		if got := AddressLines(tt.side, tt.d, tt.verb, tt.withGID); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

func TestBWTable(t *testing.T) {
	r := BWReport{Size: 65536, Iters: 5000, BWPeak: 11512.3461, BWAvg: 11498.7, MsgRate: 0.183979,
		BWAvgPort1: 5749.35, MsgRatePort1: 0.09199, BWAvgPort2: 5749.35, MsgRatePort2: 0.09199}
	tests := []struct {
		name string
		f    BWFormat
		r    BWReport
		head string
		row  string
	}{
		{"MB/s", BWFormat{}, r,
			ResultLine + " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
			" 65536  " + "    " + "5000      " + "       " + "11512.35" + "            " + "11498.70" + "\t\t   " + "0.183979" + "\n"},
		{"Gb/s", BWFormat{Gbits: true}, BWReport{Size: 2, Iters: 1000, BWPeak: 0.12, BWAvg: 0.1151, MsgRate: 7.2},
			ResultLine + " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n",
			" 2      " + "    " + "1000      " + "       " + "0.12   " + "            " + "0.12   " + "\t\t   " + "7.200000" + "\n"},
		{"Gb/s below 0.1: six decimals", BWFormat{Gbits: true}, BWReport{Size: 2, Iters: 1000, BWPeak: 0.09, BWAvg: 0.0812344, MsgRate: 5.07},
			ResultLine + " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n",
			" 2      " + "    " + "1000" + "           " + "0.090000" + "            " + "0.081234" + "            " + "5.070000" + "\n"},
		{"per port", BWFormat{PerPort: true}, r,
			ResultLinePerPort + " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   BW Port1[MB/sec]   MsgRate Port1[Mpps]   BW Port2[MB/sec]   MsgRate Port2[Mpps]\n",
			" 65536  " + "    " + "5000      " + "     " + "11512.35" + "            " + "11498.70" + "\t\t   " + "0.183979" +
				"        " + "5749.35" + "            " + "0.091990" + "              " + "5749.35" + "            " + "0.091990" + "\n"},
		{"inf", BWFormat{}, BWReport{Size: 8, Iters: 5, BWPeak: math.Inf(1), BWAvg: 1, MsgRate: 2},
			ResultLine + " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
			" 8      " + "    " + "5         " + "       " + "inf    " + "            " + "1.00   " + "\t\t   " + "2.000000" + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var head, row, foot strings.Builder
			if err := WriteBWHeader(&head, tt.f); err != nil {
				t.Fatal(err)
			}
			if err := WriteBWRow(&row, tt.r, tt.f); err != nil {
				t.Fatal(err)
			}
			if err := WriteBWFooter(&foot, tt.f); err != nil {
				t.Fatal(err)
			}
			if head.String() != tt.head {
				t.Errorf("header %q\nwant   %q", head.String(), tt.head)
			}
			if row.String() != tt.row {
				t.Errorf("row  %q\nwant %q", row.String(), tt.row)
			}
			if wantFoot := tt.head[:strings.IndexByte(tt.head, '\n')+1]; foot.String() != wantFoot {
				t.Errorf("footer %q", foot.String())
			}
		})
	}
}

func TestLatTable(t *testing.T) {
	var b strings.Builder
	if err := WriteLatHeader(&b); err != nil {
		t.Fatal(err)
	}
	s := LatStats{Size: 2, Iters: 7, TMin: 1, TMax: 10, TTypical: 1.75, TAvg: 1.875, TStdev: 0.5, P99: 10, P999: 10}
	if err := WriteLatRow(&b, s); err != nil {
		t.Fatal(err)
	}
	if err := WriteLatFooter(&b); err != nil {
		t.Fatal(err)
	}
	want := ResultLine +
		" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		// REPORT_FMT_LAT " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
		" 2      " + " 7" + "          " + "1.00   " + "        " + "10.00  " + "      " + "1.75   " + "  \t       " +
		"1.88   " + "     \t" + "0.50   " + "\t\t" + "10.00  " + " \t\t" + "10.00  " + "\n" +
		ResultLine
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}

	var d strings.Builder
	if err := WriteLatDurationHeader(&d, false); err != nil {
		t.Fatal(err)
	}
	if want := ResultLine + " #bytes        #iterations       t_avg[usec]    tps average\n"; d.String() != want {
		t.Errorf("duration header %q", d.String())
	}
}

func TestJSON(t *testing.T) {
	rep := BWReport{Size: 4096, Iters: 20, BWPeak: 5.300610203620484, BWAvg: 4.677425621156695, MsgRate: 0.001197420959016114}
	var legacy, valid strings.Builder
	if err := WriteBWJSON(&legacy, JSONPerftest45, writeBWClient, rep, false, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteBWJSON(&valid, JSONValid, writeBWClient, rep, false, false); err != nil {
		t.Fatal(err)
	}
	wantLegacy := `{
test_info: {
test: RDMA_Write_BW_Test,
Dual_port: OFF,
Device: "rxe0",
Number_of_qps: 1,
Transport_type: IB,
Connection_type: RC,
Using_SRQ: OFF,
PCIe_relax_order: ON,
ibv_wr_API: ON,
TX_depth : 20,
CQ_Moderation: 1,
Mtu: 1024,
Link_type: Ethernet,
GID_index: 1,
Max_inline_data: 0,
rdma_cm_QPs: OFF,
Data_ex_method: Ethernet,
},
results: {
MsgSize: 4096,
n_iterations: 20,
BW_peak: 5.30,
BW_average: 4.68,
MsgRate: 0.001197,
},
}
`
	wantValid := `{
"test_info": {
"test": "RDMA_Write_BW_Test",
"Dual_port": "OFF",
"Device": "rxe0",
"Number_of_qps": 1,
"Transport_type": "IB",
"Connection_type": "RC",
"Using_SRQ": "OFF",
"PCIe_relax_order": "ON",
"ibv_wr_API": "ON",
"TX_depth": 20,
"CQ_Moderation": 1,
"Mtu": 1024,
"Link_type": "Ethernet",
"GID_index": 1,
"Max_inline_data": 0,
"rdma_cm_QPs": "OFF",
"Use_ROCm_memory": "OFF",
"Use_MUSA_memory": "OFF",
"Data_ex_method": "Ethernet"
},
"results": {
"MsgSize": 4096,
"n_iterations": 20,
"BW_peak": 5.30,
"BW_average": 4.68,
"MsgRate": 0.001197
}
}
`
	if legacy.String() != wantLegacy {
		t.Errorf("perftest 4.5 style:\n%s\nwant\n%s", legacy.String(), wantLegacy)
	}
	if valid.String() != wantValid {
		t.Errorf("valid style:\n%s\nwant\n%s", valid.String(), wantValid)
	}

	lat := TestInfo{Verb: Atomic, AtomicOp: FetchAndAdd, Kind: Lat, Role: Client, Device: "rxe0", NumQPs: 1,
		TXDepth: 1, MTU: MTU1024, LinkType: "Ethernet", GIDIndex: 1, OutReads: 128}
	s := LatStats{Size: 8, Iters: 20, TMin: 1, TMax: 10, TTypical: 1.75, TAvg: 1.875, TStdev: 0.5, P99: 10, P999: 10}
	var ll, lv strings.Builder
	if err := WriteLatJSON(&ll, JSONPerftest45, lat, s); err != nil {
		t.Fatal(err)
	}
	if err := WriteLatJSON(&lv, JSONValid, lat, s); err != nil {
		t.Fatal(err)
	}
	wantLatResults := "results: {\nMsgSize: 8,\nn_iterations: 20,\nt_min: 1.00,\nt_max: 10.00,\nt_typical: 1.75,\n" +
		"t_avg: 1.88,\nt_stdev: 0.50,\npercentile_99: 10.00,\npercentile_99.9: 10.00,\n},\n}\n"
	if !strings.HasSuffix(ll.String(), wantLatResults) ||
		!strings.Contains(ll.String(), "test: Atomic_FETCH_AND_ADD_Latency_Test,\n") ||
		!strings.Contains(ll.String(), " PCIe_relax_order: Unsupported,\n") ||
		!strings.Contains(ll.String(), "Outstand_reads: 128,\n") {
		t.Errorf("latency, perftest 4.5 style:\n%s", ll.String())
	}
	if !strings.HasSuffix(lv.String(), "\"percentile_99.9\": 10.00\n}\n}\n") {
		t.Errorf("latency, valid style:\n%s", lv.String())
	}

	var dv strings.Builder
	if err := WriteLatDurationJSON(&dv, JSONValid, lat, LatDurationStats{Size: 8, Iters: 100, TAvg: 2.5, TPS: 400000}, false); err != nil {
		t.Fatal(err)
	}
	small := BWReport{Size: 2, Iters: 1000, BWPeak: 0.09, BWAvg: 0.0812344, MsgRate: 5.07}
	var gb strings.Builder
	if err := WriteBWJSON(&gb, JSONValid, writeBWClient, small, true, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(gb.String(), "\"BW_average\": 0.081234,\n") {
		t.Errorf("Gb/s below 0.1 should have six decimals:\n%s", gb.String())
	}
	// --cpu_util: perftest appends "CPU_util" to the results (REPORT_EXT_CPU_UTIL_JSON).
	var cb, cd strings.Builder
	cpu := BWReport{Size: 65536, Iters: 1000, BWPeak: 900, BWAvg: 850.5, MsgRate: 0.0136, CPUUtil: 37.256}
	if err := WriteBWJSON(&cb, JSONValid, writeBWClient, cpu, false, true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cb.String(), "\"MsgRate\": 0.013600,\n\"CPU_util\": 37.26\n}\n}\n") {
		t.Errorf("bandwidth with --cpu_util:\n%s", cb.String())
	}
	if err := WriteLatDurationJSON(&cd, JSONValid, lat, LatDurationStats{Size: 8, Iters: 100, TAvg: 2.5, TPS: 400000, CPUUtil: 99.5}, true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cd.String(), "\"tps_average\": 400000.00,\n\"CPU_util\": 99.50\n}\n}\n") {
		t.Errorf("duration latency with --cpu_util:\n%s", cd.String())
	}
	if strings.Contains(dv.String(), "CPU_util") {
		t.Errorf("CPU_util without --cpu_util:\n%s", dv.String())
	}
	for _, doc := range []string{valid.String(), lv.String(), dv.String(), gb.String(), cb.String(), cd.String()} {
		var v map[string]map[string]any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Errorf("not valid JSON (%v):\n%s", err, doc)
		} else if v["test_info"] == nil || v["results"] == nil {
			t.Errorf("missing objects: %v", v)
		}
	}
}

func TestCAltHex(t *testing.T) {
	tests := []struct {
		v     uint64
		width int
		want  string
	}{
		{0, 4, "0000"}, {1, 4, "0x01"}, {0x24, 6, "0x0024"}, {0x6539be, 6, "0x6539be"},
		{0x1234567, 6, "0x1234567"}, {0x6de, 8, "0x0006de"}, {0x559f13b3a000, 16, "0x00559f13b3a000"},
		{0, 16, "0000000000000000"},
	}
	for _, tt := range tests {
		if got := cAltHex(tt.v, tt.width); got != tt.want {
			t.Errorf("%%#0%dx of %#x = %q, want %q", tt.width, tt.v, got, tt.want)
		}
	}
}

func TestEnums(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Write.String(), "RDMA_Write"}, {Read.String(), "RDMA_Read"}, {Send.String(), "Send"}, {Atomic.String(), "Atomic"},
		{Verb(9).String(), "Verb(9)"}, {BW.String(), "BW"}, {Lat.String(), "Latency"}, {Client.String(), "client"},
		{CmpAndSwap.String(), "CMP_AND_SWAP"}, {DC.String(), "DC"}, {MTU4096.String(), "4096"}, {MTU(0).String(), "MTU(0)"},
		{Remote.String(), "remote"}, {JSONValid.String(), "json"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	if m, err := MTUFromBytes(2048); err != nil || m != MTU2048 {
		t.Errorf("MTUFromBytes(2048) = %v, %v", m, err)
	}
	if _, err := MTUFromBytes(1500); err == nil {
		t.Error("MTUFromBytes(1500) accepted")
	}
	if Write.RTTFactor() != 2 || Send.RTTFactor() != 2 || Read.RTTFactor() != 1 || Atomic.RTTFactor() != 1 {
		t.Error("RTTFactor")
	}
}
