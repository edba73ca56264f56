package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// endpoint is one side of the example: a device, a CQ, a registered
// buffer and an RC QP.
type endpoint struct {
	ctx verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	mr  verbs.MR
	qp  verbs.QP
}

func newEndpoint(ctx verbs.Context) *endpoint {
	e := &endpoint{ctx: ctx}
	var err error
	if e.pd, err = ctx.AllocPD(); err != nil {
		log.Fatal(err)
	}
	if e.cq, err = ctx.CreateCQ(16, nil); err != nil {
		log.Fatal(err)
	}
	if e.mr, err = e.pd.AllocMR(4096, verbs.AccessLocalWrite); err != nil {
		log.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	return e
}

func (e *endpoint) addr(psn uint32) cm.Endpoint {
	gid, err := e.ctx.QueryGID(1, 1) // index 1: the device's IPv4 address
	if err != nil {
		log.Fatal(err)
	}
	return cm.Endpoint{QPN: e.qp.QPNum(), PSN: psn, GID: gid}
}

func (e *endpoint) close() {
	e.qp.Destroy()
	e.mr.Dereg()
	e.cq.Destroy()
	e.pd.Dealloc()
	e.ctx.Close()
}

// wait returns the next work completion of the endpoint's CQ.
func (e *endpoint) wait() verbs.WC {
	wc := make([]verbs.WC, 1)
	for {
		if n, err := e.cq.Poll(wc); err != nil {
			log.Fatal(err)
		} else if n == 1 {
			return wc[0]
		}
		if err := e.cq.Wait(context.Background()); err != nil {
			log.Fatal(err)
		}
	}
}

// A SEND and its RECEIVE through the verbs API, between two softrdma
// devices of one process: post a receive, post a send, poll both
// completion queues. Only opening the devices is provider-specific.
func Example() {
	a, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.64.1")})
	if err != nil {
		log.Fatal(err)
	}
	b, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.64.2")})
	if err != nil {
		log.Fatal(err)
	}
	client, server := newEndpoint(a), newEndpoint(b)
	defer client.close()
	defer server.close()
	p := cm.DefaultParams()
	p.SGIDIndex = 1
	if err := cm.Connect(client.qp, client.addr(1), server.addr(2), &p); err != nil {
		log.Fatal(err)
	}
	if err := cm.Connect(server.qp, server.addr(2), client.addr(1), &p); err != nil {
		log.Fatal(err)
	}

	// The receiver posts a buffer first: a SEND consumes one.
	err = server.qp.PostRecv(&verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{server.mr.SGE(0, 4096)}})
	if err != nil {
		log.Fatal(err)
	}
	msg := "hello, RDMA"
	copy(client.mr.Bytes(), msg)
	err = client.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{client.mr.SGE(0, len(msg))}})
	if err != nil {
		log.Fatal(err)
	}
	sent, recvd := client.wait(), server.wait()
	fmt.Println("send:", sent.Status, "recv:", recvd.Status, recvd.WRID, recvd.ByteLen, "bytes")
	fmt.Printf("%q\n", server.mr.Bytes()[:recvd.ByteLen])
	// Output:
	// send: success recv: success 7 11 bytes
	// "hello, RDMA"
}
