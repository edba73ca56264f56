package flood

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/tools/devicetest"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestFloodPackets: every forged packet parses as the RoCEv2 packet of its
// kind, aimed where its kind says.
func TestFloodPackets(t *testing.T) {
	o, err := parseFloodArgs([]string{"-to", "127.0.0.1", "-from", "127.0.0.2", "-qpn", "0x1234"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.to.Port() != 4791 || len(o.kinds) != 4 {
		t.Fatalf("defaults: %+v", o)
	}
	want := map[string]wire.Opcode{"unknown": wire.RCSendOnly, "psn": wire.RCWriteOnly, "nak": wire.RCAck, "replay": wire.RCReadRequest}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		kind := floodKinds[i%4]
		pkt := floodPacket(kind, 0x1234, 64, rng)
		var p wire.Packet
		if err := wire.Parse(pkt, &p); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if p.BTH.Opcode() != want[kind] || (p.BTH.DestQP() == 0x1234) == (kind == "unknown") {
			t.Fatalf("%s: opcode %v to QPN %#x", kind, p.BTH.Opcode(), p.BTH.DestQP())
		}
	}
	for _, bad := range [][]string{
		{"-to", "127.0.0.1", "-from", "127.0.0.2"},
		{"-to", "127.0.0.1", "-from", "127.0.0.2", "-qpn", "0x1000000"},
		{"-to", "::1", "-from", "127.0.0.2", "-qpn", "5"},
		{"-to", "127.0.0.1", "-from", "127.0.0.2", "-qpn", "5", "-kinds", "psn,nope"},
	} {
		if _, err := parseFloodArgs(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFlood floods a device with a connected RC QP for a moment from the
// address of the QP's peer (not spoofed: another port): every packet that
// reaches the device is dropped and counted as unknown QP or wrong source,
// none is answered, and the connection goes on.
func TestFlood(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("softrdma flood is Linux only")
	}
	dev, peerDev, victim, peer, port := devicetest.Pair(t)
	type side struct {
		qp verbs.QP
		cq verbs.CQ
		mr verbs.MR
	}
	mk := func(d verbs.Context) side {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(16, nil)
		mr, _ := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qp.Destroy() })
		return side{qp, cq, mr}
	}
	v, pr := mk(dev), mk(peerDev)
	p := cm.DefaultParams()
	p.SGIDIndex = 1
	if err := cm.Connect(v.qp, cm.Endpoint{QPN: v.qp.QPNum(), PSN: 1}, cm.Endpoint{QPN: pr.qp.QPNum(), PSN: 2, GID: verbs.GIDFromAddr(peer)}, &p); err != nil {
		t.Fatal(err)
	}
	if err := cm.Connect(pr.qp, cm.Endpoint{QPN: pr.qp.QPNum(), PSN: 2}, cm.Endpoint{QPN: v.qp.QPNum(), PSN: 1, GID: verbs.GIDFromAddr(victim)}, &p); err != nil {
		t.Fatal(err)
	}
	// write has the peer WRITE to the victim and waits for the completion
	// (the first also pins the victim's QP to the peer's UDP port).
	write := func(id uint64) {
		t.Helper()
		if err := pr.qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{pr.mr.SGE(0, 1000)}, RemoteAddr: v.mr.Addr(), RKey: v.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wc := make([]verbs.WC, 1)
		for n := 0; n == 0; n, _ = pr.cq.Poll(wc) {
			if err := pr.cq.Wait(ctx); err != nil {
				t.Fatalf("WRITE %d: %v", id, err)
			}
		}
		if wc[0].Status != verbs.WCSuccess {
			t.Fatalf("WRITE %d: %v", id, wc[0].Status)
		}
	}
	write(1)
	count := func(name string) uint64 { v, _ := dev.Counter(name); return v }
	// The victim counts its ACK of WRITE 1 after the system call that
	// sent it returns, which can be after the peer took the ACK and
	// completed: wait until the count stops moving.
	sent := func() uint64 { return count("sent_pkts") - count("keepalive_probes") } // an idle QP probes every 5 s
	sentBefore := sent()
	for settle := time.Now().Add(5 * time.Second); time.Now().Before(settle); {
		time.Sleep(20 * time.Millisecond)
		n := sent()
		if n == sentBefore {
			break
		}
		sentBefore = n
	}
	o, err := parseFloodArgs([]string{"-to", netip.AddrPortFrom(victim, port).String(), "-from", peer.String(),
		"-qpn", fmt.Sprint(v.qp.QPNum()), "-d", "200ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := flood(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count("drop_unknown_qp")+count("drop_wrong_source") < r.sent/2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	unknown, wrong := count("drop_unknown_qp"), count("drop_wrong_source")
	t.Logf("%d forged packets sent (%.0f/s): drop_unknown_qp %d, drop_wrong_source %d",
		r.sent, float64(r.sent)/r.elapsed.Seconds(), unknown, wrong)
	if r.sent == 0 || unknown == 0 || wrong == 0 {
		t.Fatalf("sent %d, drop_unknown_qp %d, drop_wrong_source %d: want all three above 0", r.sent, unknown, wrong)
	}
	if n := sent() - sentBefore; n != 0 {
		t.Errorf("the victim sent %d packets in answer to forgeries", n)
	}
	write(2)
}
