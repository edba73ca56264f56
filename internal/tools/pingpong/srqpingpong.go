package pingpong

// ibv_srq_pingpong: several RC QPs share one SRQ and one CQ; each QP
// ping-pongs SENDs with its peer QP. The exchange always carries 256
// addresses (rdma-core's MAX_QP), the unused ones zero.

import (
	"context"
	"fmt"
	"time"

	"github.com/softrdma/softrdma/internal/pingpong"
	"github.com/softrdma/softrdma/verbs"
)

func runSRQPingpong(ctx context.Context, f *ppFlags) error {
	numQP := f.numQP
	if numQP < 1 || numQP > pingpong.SRQMaxQP {
		return fmt.Errorf("num_qp %d must be 1..%d", numQP, pingpong.SRQMaxQP)
	}
	if numQP > f.rxDepth {
		return fmt.Errorf("rx_depth %d is too small for %d QPs. Must have at least one receive per QP", f.rxDepth, numQP)
	}
	dev, err := f.opener.Open(f.dev)
	if err != nil {
		return err
	}
	defer dev.Close()

	pd, err := dev.AllocPD()
	if err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	defer pd.Dealloc()
	mr, err := pd.AllocMR(f.size, verbs.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	defer mr.Dereg()
	for i, b := 0, mr.Bytes(); i < len(b); i++ {
		b[i] = 0x7b
	}
	cq, err := dev.CreateCQ(f.rxDepth+numQP, nil)
	if err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	defer cq.Destroy()
	srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: uint32(f.rxDepth), MaxSGE: 1})
	if err != nil {
		return fmt.Errorf("Couldn't create SRQ: %w", err)
	}
	defer srq.Destroy()
	qps := make([]verbs.QP, numQP)
	byNum := map[uint32]int{}
	for i := range qps {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
		if err != nil {
			return fmt.Errorf("Couldn't create QP[%d]: %w", i, err)
		}
		defer qp.Destroy()
		r := &resources{qp: qp}
		if err := r.initRC(f); err != nil {
			return err
		}
		qps[i] = qp
		byNum[qp.QPNum()] = i
	}
	recv := verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{mr.SGE(0, f.size)}}
	postRecvs := func(n int) int {
		for i := 0; i < n; i++ {
			if srq.PostRecv(&recv) != nil {
				return i
			}
		}
		return n
	}
	routs := postRecvs(f.rxDepth)
	if routs < f.rxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", routs)
	}

	local := make([]pingpong.Dest, numQP)
	for i, qp := range qps {
		if local[i], err = localDest(dev, f, qp.QPNum()); err != nil {
			return err
		}
		fmt.Fprint(f.stdout, pingpong.LocalAddressLine(local[i]))
	}
	conn, err := ppConn(f)
	if err != nil {
		return err
	}
	defer conn.Close()
	connectAll := func(rem []pingpong.Dest) error {
		for i, qp := range qps {
			r := &resources{qp: qp}
			if err := r.connectRC(local[i].PSN, rem[i].QPN, rem[i].PSN, verbs.GID(rem[i].GID), f); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var remote []pingpong.Dest
	if f.server != "" {
		if remote, err = pingpong.ClientExchangeN(ctx, conn, pingpong.PadSRQ(local)); err == nil {
			err = connectAll(remote)
		}
	} else {
		remote, err = pingpong.ServerExchangeN(ctx, conn, pingpong.PadSRQ(local), connectAll)
	}
	if err != nil {
		return err
	}
	for i := range qps {
		fmt.Fprint(f.stdout, pingpong.RemoteAddressLine(remote[i]))
	}

	send := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, f.size)}}
	pending := make([]int, numQP)
	for i := range pending {
		pending[i] = recvWRID
	}
	if f.server != "" {
		for i, qp := range qps {
			if err := qp.PostSend(&send); err != nil {
				return fmt.Errorf("Couldn't post send: %w", err)
			}
			pending[i] |= sendWRID
		}
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	wcs := make([]verbs.WC, 2*numQP)
	for rcnt < f.iters || scnt < f.iters {
		if f.events {
			if err := cq.Wait(ctx); err != nil {
				return err
			}
		}
		n, err := cq.Poll(wcs)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			i, ok := byNum[wc.QPNum]
			if !ok {
				return fmt.Errorf("Couldn't find QPN %06x", wc.QPNum)
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				if routs--; routs <= numQP {
					routs += postRecvs(f.rxDepth - routs)
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", wc.WRID)
			}
			pending[i] &^= int(wc.WRID)
			if scnt < f.iters && pending[i] == 0 {
				if err := qps[i].PostSend(&send); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				pending[i] = recvWRID | sendWRID
			}
		}
	}
	fmt.Fprint(f.stdout, pingpong.ResultLines(f.size, f.iters, time.Since(start)))
	lingerShm(dev, lingerQuiet)
	return nil
}
