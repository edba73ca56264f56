package cm_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// openLoopbackInterface opens the device on interface lo, as rxe has one
// per netdev, on a UDP port free on both 127.0.0.1 and ::1 (not 4791, which
// another program on the host may hold).
func openLoopbackInterface(t *testing.T) *soft.Device {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
		if err != nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c.Close()
		dev, err := soft.Open(soft.Config{Interface: "lo", Port: port})
		if err == nil {
			t.Cleanup(func() { dev.Close() })
			return dev
		}
		if !strings.Contains(err.Error(), "in use") {
			t.Skipf("cannot open the device on lo: %v", err)
		}
	}
	t.Skip("no UDP port free on both loopback addresses")
	return nil
}

// TestInterfaceDeviceIPv6: the device on an interface has every address of
// it in its GID table, rxe's way (0 link-local, then IPv4, then IPv6);
// Dial to an IPv6 address resolves the IPv6 GID as source and the
// connection carries a WRITE over IPv6; to an IPv4 address, the IPv4 GID.
// Before the device had the interface's addresses, GID 2 did not exist and
// a device sent from one address only.
func TestInterfaceDeviceIPv6(t *testing.T) {
	dev := openLoopbackInterface(t)
	v4, v6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	pa, err := dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	var gids []netip.Addr
	for i := range pa.GIDTblLen {
		g, err := dev.QueryGID(1, i)
		if err != nil {
			t.Fatal(err)
		}
		gids = append(gids, g.Addr())
	}
	if len(gids) != 3 || !gids[0].IsLinkLocalUnicast() || gids[1] != v4 || gids[2] != v6 {
		t.Fatalf("GID table %v, want [fe80::..., %v, %v]", gids, v4, v6)
	}
	if dev.Name() != "softrdma_lo" || dev.LocalAddr() != v4 {
		t.Errorf("device %s on %v, want softrdma_lo on %v", dev.Name(), dev.LocalAddr(), v4)
	}

	// Loopback has no link-local address: GID 0 is listed, not sendable.
	pd, _ := dev.AllocPD()
	_, err = pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(v6), SGIDIndex: 0}})
	if err == nil || !strings.Contains(err.Error(), "cannot send from it") {
		t.Fatalf("CreateAH from GID 0 on lo: %v, want a refusal that says the device cannot send from it", err)
	}
	pd.Dealloc()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := &cm.Options{Context: dev}
	for _, c := range []struct {
		addr    string
		sgidIdx uint8
		want    netip.Addr
	}{{"[::1]:7474", 2, v6}, {"127.0.0.1:7475", 1, v4}} {
		ln, err := cm.Listen("rdma", c.addr, opts)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			conn *cm.Conn
			mr   verbs.MR
			err  error
		}
		accepted := make(chan result, 1)
		go func() {
			req, err := ln.Accept(ctx)
			if err != nil {
				accepted <- result{err: err}
				return
			}
			pd, _ := ln.Context().AllocPD()
			mr, _ := pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			conn, err := req.Accept(ctx, &cm.Options{PD: pd})
			accepted <- result{conn, mr, err}
		}()
		_, src, err := cm.Resolve("rdma", c.addr, opts)
		if err != nil || src != c.want {
			t.Fatalf("%s: Resolve = %v, %v; want source %v", c.addr, src, err, c.want)
		}
		conn, err := cm.Dial(ctx, "rdma", c.addr, opts)
		if err != nil {
			t.Fatalf("%s: Dial: %v", c.addr, err)
		}
		srv := <-accepted
		if srv.err != nil {
			t.Fatalf("%s: Accept: %v", c.addr, srv.err)
		}
		attr, _, err := conn.QP.Query()
		if err != nil || attr.AHAttr.GRH.SGIDIndex != c.sgidIdx || attr.AHAttr.GRH.DGID.Addr() != c.want {
			t.Fatalf("%s: QP address vector: SGID index %d, DGID %v (%v); want %d, %v", c.addr, attr.AHAttr.GRH.SGIDIndex, attr.AHAttr.GRH.DGID, err, c.sgidIdx, c.want)
		}
		mr, _ := conn.PD.AllocMR(64, verbs.AccessLocalWrite)
		copy(mr.Bytes(), "over "+c.want.String())
		err = conn.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{mr.SGE(0, 16)}, RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()})
		if err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		for n := 0; n == 0; n, _ = conn.SendCQ.Poll(wc) {
			if conn.SendCQ.Wait(ctx) != nil {
				t.Fatalf("%s: no completion", c.addr)
			}
		}
		if wc[0].Status != verbs.WCSuccess || string(srv.mr.Bytes()[:16]) != string(mr.Bytes()[:16]) {
			t.Fatalf("%s: WRITE %v, target holds %q", c.addr, wc[0].Status, srv.mr.Bytes()[:16])
		}
		conn.Close()
		srv.conn.Close()
		ln.Close()
	}
}
