package shm_test

import (
	"fmt"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/verbs"
)

// Two processes each open a device, create an RC QP and exchange their
// cm.Endpoint (QPN and GID; the GID names the device's socket) and the
// rkey and address of the memory the other may write, by any channel:
// a pipe, a file, a TCP connection. Here both live in one process.
func Example() {
	type proc struct {
		dev *shm.Device
		pd  verbs.PD
		cq  verbs.CQ
		qp  verbs.QP
		mr  verbs.MR
	}
	open := func() *proc {
		p := &proc{}
		p.dev, _ = shm.Open(shm.Config{})
		p.pd, _ = p.dev.AllocPD()
		p.cq, _ = p.dev.CreateCQ(16, nil)
		p.mr, _ = p.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		p.qp, _ = p.pd.CreateQP(&verbs.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return p
	}
	a, b := open(), open()
	ep := func(p *proc) cm.Endpoint { return cm.Endpoint{QPN: p.qp.QPNum(), GID: p.dev.GID()} }
	// ... exchange ep(a), ep(b), b.mr.RKey() and b.mr.Addr() ...
	if err := cm.Connect(a.qp, ep(a), ep(b), nil); err != nil {
		fmt.Println(err)
		return
	}
	if err := cm.Connect(b.qp, ep(b), ep(a), nil); err != nil {
		fmt.Println(err)
		return
	}
	copy(a.mr.Bytes(), "one memcpy")
	a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 10)}})
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; n, _ = a.cq.Poll(wc) {
	}
	fmt.Println(wc[0].Status, string(b.mr.Bytes()[:10]))

	for _, p := range []*proc{a, b} {
		p.qp.Destroy()
		p.mr.Dereg()
		p.cq.Destroy()
		p.pd.Dealloc()
		p.dev.Close()
	}
	// Output: success one memcpy
}
