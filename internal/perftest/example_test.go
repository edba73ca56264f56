package perftest_test

import (
	"os"

	"github.com/softrdma/softrdma/internal/perftest"
)

// The client's output of `ib_write_bw -d rxe0 -x 1 -s 4096 -n 20 -F
// 10.77.0.2`, with the keys and results recorded in
// testdata/rxe-pcaps/write_bw.pcap. TX depth and CQ moderation are capped at
// the 20 iterations; perftest gives devices it does not know, like rxe, no
// inline data.
func Example() {
	gid := func(last byte) [16]byte { return [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 15: last} }
	local := perftest.Dest{OutReads: 1, QPN: 0x24, PSN: 0x6539be, RKey: 0x6de, VAddr: 0x559f13b3a000, GID: gid(3)}
	remote := perftest.Dest{OutReads: 1, QPN: 0x26, PSN: 0x97e4e5, RKey: 0x8d2, VAddr: 0x55c98b507000, GID: gid(2)}
	w := os.Stdout
	perftest.WriteTestInfo(w, perftest.TestInfo{
		Verb: perftest.Write, Kind: perftest.BW, Role: perftest.Client, Device: "rxe0", NumQPs: 1,
		Connection: perftest.RC, PCIeRelaxOrder: "ON", TXDepth: 20, CQMod: 20, MTU: perftest.MTU1024,
		LinkType: "Ethernet", GIDIndex: 1,
	})
	os.Stdout.WriteString(perftest.AddressLines(perftest.Local, local, perftest.Write, true))
	os.Stdout.WriteString(perftest.AddressLines(perftest.Remote, remote, perftest.Write, true))
	f := perftest.BWFormat{}
	perftest.WriteBWHeader(w, f)
	perftest.WriteBWRow(w, perftest.BWReport{Size: 4096, Iters: 20, BWPeak: 5.300610203620484,
		BWAvg: 4.677425621156695, MsgRate: 0.001197420959016114}, f)
	perftest.WriteBWFooter(w, f)
	// Output:
	// ---------------------------------------------------------------------------------------
	//                     RDMA_Write BW Test
	//  Dual-port       : OFF		Device         : rxe0
	//  Number of qps   : 1		Transport type : IB
	//  Connection type : RC		Using SRQ      : OFF
	//  PCIe relax order: ON
	//  ibv_wr* API     : ON
	//  TX depth        : 20
	//  CQ Moderation   : 20
	//  Mtu             : 1024[B]
	//  Link type       : Ethernet
	//  GID index       : 1
	//  Max inline data : 0[B]
	//  rdma_cm QPs	 : OFF
	//  Data ex. method : Ethernet
	// ---------------------------------------------------------------------------------------
	//  local address: LID 0000 QPN 0x0024 PSN 0x6539be RKey 0x0006de VAddr 0x00559f13b3a000
	//  GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03
	//  remote address: LID 0000 QPN 0x0026 PSN 0x97e4e5 RKey 0x0008d2 VAddr 0x0055c98b507000
	//  GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02
	// ---------------------------------------------------------------------------------------
	//  #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
	//  4096       20               5.30               4.68   		   0.001197
	// ---------------------------------------------------------------------------------------
}
