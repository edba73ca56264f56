package main

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// openToolDevice opens the device a tool's -d names. SOFTRDMA_ADDR, if
// set, picks the address directly. Tools accept packets whose ICRC a UDP
// socket cannot verify, because their peers are usually Linux rxe, which
// sends non-zero IPv4 identifications.
func openToolDevice(name string) (*soft.Device, error) {
	if a := os.Getenv("SOFTRDMA_ADDR"); a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("SOFTRDMA_ADDR=%q: %v", a, err)
		}
		n := name
		if n == "" {
			n = "softrdma0"
		}
		return soft.Open(soft.Config{Name: n, Addr: addr, AcceptUnverifiedICRC: true})
	}
	devs, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		if name != "" && d.Name() != name {
			continue
		}
		if name == "" && d.Name() == "softrdma_lo" && len(devs) > 1 {
			continue // like rdma-core, prefer a real network device
		}
		addr, ok := soft.DeviceAddr(d)
		if !ok {
			continue
		}
		return soft.Open(soft.Config{Name: d.Name(), Addr: addr, AcceptUnverifiedICRC: true})
	}
	if name == "" {
		return nil, fmt.Errorf("No IB devices found (set SOFTRDMA_ADDR to an IP address)")
	}
	return nil, fmt.Errorf("IB device %s not found", name)
}

// resources are the verbs objects of a pingpong run.
type resources struct {
	dev     *soft.Device
	pd      verbs.PD
	cq      verbs.CQ
	qp      verbs.QP
	mr      verbs.MR
	buf     []byte
	sendOff int // UD sends from after the 40-byte GRH area
	recvLen int
}

func newResources(dev *soft.Device, typ verbs.QPType, size, rxDepth, sendDepth int, events bool) (*resources, error) {
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
