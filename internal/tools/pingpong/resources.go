package pingpong

import (
	"fmt"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/verbs"
)

// resources are the verbs objects of a pingpong run.
type resources struct {
	dev     verbs.Context
	pd      verbs.PD
	cq      verbs.CQ
	qp      verbs.QP
	mr      verbs.MR
	buf     []byte
	sendOff int // UD sends from after the 40-byte GRH area
	recvLen int
}

func newResources(dev verbs.Context, typ verbs.QPType, size, rxDepth, sendDepth int, events bool) (*resources, error) {
	r := &resources{dev: dev}
	var err error
	if r.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	bufSize := size
	if typ == verbs.QPTypeUD {
		bufSize += 40
		r.sendOff = 40
	}
	if r.mr, err = r.pd.AllocMR(bufSize, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	r.buf = r.mr.Bytes()
	var ch *verbs.CompChannel
	if events {
		ch = verbs.NewCompChannel(1)
	}
	if r.cq, err = dev.CreateCQ(rxDepth+sendDepth, ch); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	if r.qp, err = r.pd.CreateQP(&verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: uint32(sendDepth), MaxRecvWR: uint32(rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	r.recvLen = bufSize
	return r, nil
}

func (r *resources) close() {
	if r.qp != nil {
		if r.qp.Type() == verbs.QPTypeRC && r.qp.State() == verbs.QPStateRTS {
			r.linger(lingerQuiet, lingerMax)
		}
		r.qp.Destroy()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
}

// An RC QP stays up after the last iteration until the peer has been
// quiet for lingerQuiet (at most lingerMax): if the ACK of the peer's last
// message was lost, the peer retransmits it and needs this QP to answer —
// rxe retries forever at retry_cnt 7, so without this a lost last ACK
// hangs the peer (ibv_rc_pingpong has the same race; it rarely loses).
const (
	lingerQuiet = 200 * time.Millisecond
	lingerMax   = 2 * time.Second
)

// linger waits until the device has received nothing for quiet, or max
// has passed. A shared-memory device lingers quiet (lingerShm).
func (r *resources) linger(quiet, max time.Duration) {
	dev, ok := r.dev.(interface{ Counter(string) (uint64, bool) })
	if !ok {
		lingerShm(r.dev, quiet)
		return
	}
	deadline := time.Now().Add(max)
	last, _ := dev.Counter("rcvd_pkts")
	since := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n, _ := dev.Counter("rcvd_pkts")
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return
		}
	}
}

// lingerShm keeps a shared-memory device's QPs up for d after a run:
// the peer's last SEND is acknowledged only when this process consumes it
// from the ring (a NIC acknowledges on arrival), which the device's
// progress goroutine does within milliseconds once the tool stops
// polling; a QP destroyed first fails that SEND at the peer with
// WCRetryExcErr. A pingpong's last messages can be ones this side no
// longer waits for (ibv_srq_pingpong's, one per QP).
func lingerShm(dev verbs.Context, d time.Duration) {
	if device.IsShm(dev) {
		time.Sleep(d)
	}
}

// postRecvs posts up to n receives of the whole buffer, returning how many
// (pp_post_recv stops at the first failure; posting none is an error).
func (r *resources) postRecvs(n, size int) (int, error) {
	wr := verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{r.mr.SGE(0, r.recvLen)}}
	for i := 0; i < n; i++ {
		if err := r.qp.PostRecv(&wr); err != nil {
			if i == 0 {
				return 0, fmt.Errorf("Couldn't post receive: %w", err)
			}
			return i, nil
		}
	}
	return n, nil
}

// ppParams are pingpong.c's QP attributes (pp_init_ctx, pp_connect_ctx):
// cm's defaults except no remote access, the -m MTU, -l SL, -g GID index
// and hop limit 1.
func ppParams(f *ppFlags) *cm.Params {
	p := cm.DefaultParams()
	p.Port = uint8(f.ibPort)
	p.Access = 0
	p.PathMTU = verbs.MTUFromBytes(f.mtu)
	p.SL = uint8(f.sl)
	p.SGIDIndex = uint8(max(f.gidx, 0))
	p.HopLimit = 1
	return &p
}

// initRC moves a new RC or UC QP to INIT, as pingpong.c does right after
// creating it, so receives can be posted before the exchange.
func (r *resources) initRC(f *ppFlags) error {
	if err := cm.Init(r.qp, ppParams(f)); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return nil
}

// connectRC moves an RC or UC QP from INIT to RTS with pingpong.c's
// attributes. Like the softrdma pingpong before cm, it leaves the DLID 0
// (rxe ignores it).
func (r *resources) connectRC(myPSN, remQPN, remPSN uint32, remGID verbs.GID, f *ppFlags) error {
	p := ppParams(f)
	if err := cm.ReadyToReceive(r.qp, cm.Endpoint{QPN: remQPN, PSN: remPSN, GID: remGID}, p); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := cm.ReadyToSend(r.qp, cm.Endpoint{PSN: myPSN}, p); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}
