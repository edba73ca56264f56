// Command quickstart is the README's API example as a program that runs:
// it opens a softrdma device, RDMA WRITEs 4 KiB into a peer's memory and
// waits for the completion. The peer is a second device in the same
// process, so one command runs it all:
//
//	go run ./examples/quickstart
//
// The lines between "README begin" and "README end" are the README's
// example; main_test.go checks that the README shows them as they are
// here, so the README's code is code that compiles and runs. Like the
// README, they leave out error handling for brevity (a failure there
// panics); examples/writeread checks every error.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// side is one end of the connection.
type side struct {
	dev *soft.Device
	qp  verbs.QP
	mr  verbs.MR
	gid verbs.GID
	psn uint32
}

func main() {
	addr := flag.String("addr", "127.0.0.2", "IP address of the writing device")
	peerIP := flag.String("peer", "127.0.0.3", "IP address of the peer device, in this process")
	flag.Parse()
	if err := run(*addr, *peerIP); err != nil {
		log.Fatal(err)
	}
}

func run(addr, peerIP string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peer, err := openPeer(netip.MustParseAddr(peerIP))
	if err != nil {
		return err
	}
	defer peer.dev.Close()
	peerAddr, peerRKey := peer.mr.Addr(), peer.mr.RKey()

	// README begin
	dev, _ := soft.Open(soft.Config{Addr: netip.MustParseAddr(addr)})
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64, nil)
	mr, _ := pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	qp, _ := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	// ... exchange QPN, PSN, GID, rkey and address with the peer, then
	// RESET → INIT → RTR → RTS with qp.Modify ...
	// README end
	defer dev.Close()
	gid, err := dev.QueryGID(1, 1)
	if err != nil {
		return err
	}
	me := &side{dev: dev, qp: qp, mr: mr, gid: gid, psn: 0x1234}
	if err := connectQP(me, peer); err != nil {
		return err
	}
	if err := connectQP(peer, me); err != nil {
		return err
	}
	for i := range 4096 {
		mr.Bytes()[i] = byte(i * 7)
	}

	// README begin
	qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 4096)}, RemoteAddr: peerAddr, RKey: peerRKey})
	wc := make([]verbs.WC, 1)
	cq.Wait(ctx)
	cq.Poll(wc) // wc[0].Status == verbs.WCSuccess
	// README end

	if wc[0].Status != verbs.WCSuccess {
		return fmt.Errorf("RDMA WRITE completed with %v", wc[0].Status)
	}
	if !bytes.Equal(peer.mr.Bytes()[:4096], mr.Bytes()[:4096]) {
		return fmt.Errorf("the peer's memory does not hold the bytes written")
	}
	fmt.Println("RDMA WRITE of 4096 bytes completed and landed in the peer's memory")
	return nil
}

// openPeer opens the device the example writes to, with an RC QP and a
// memory region it may write.
func openPeer(ip netip.Addr) (*side, error) {
	dev, err := soft.Open(soft.Config{Addr: ip})
	if err != nil {
		return nil, err
	}
	s := &side{dev: dev, psn: 0x5678}
	pd, err := dev.AllocPD()
	if err == nil {
		var cq verbs.CQ
		if cq, err = dev.CreateCQ(64, nil); err == nil {
			if s.mr, err = pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err == nil {
				s.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
					Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			}
		}
	}
	if err == nil {
		s.gid, err = dev.QueryGID(1, 1)
	}
	if err != nil {
		dev.Close()
		return nil, err
	}
	return s, nil
}

// connectQP moves me's QP through INIT and RTR to RTS towards peer's, as
// examples/writeread does after its exchange.
func connectQP(me, peer *side) error {
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if err := me.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	if err := me.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU4096, DestQPNum: peer.qp.QPNum(), RQPSN: peer.psn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peer.gid, SGIDIndex: 1, HopLimit: 64}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return me.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: me.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}
