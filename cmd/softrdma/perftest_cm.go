package main

// -R: a perftest benchmark whose QPs are connected through rdma_cm, as
// perftest 4.5 runs it (perftest_communication.c: establish_connection,
// rdma_client_connect, rdma_server_connect, create_rdma_cm_connection):
//
//	the exchange: an rdma_cm connection to port -p (default 18515, port
//	  space TCP) with an RC QP of its own; every swap of the exchange is
//	  one SEND each way into the one receive each side keeps posted
//	  (ptCMChannel, perftest.NewCMSession)
//	→ Session.Negotiate: versions, sizes, MTU, as over TCP
//	→ Session.ConnectQPs: a barrier, then one rdma_cm connection per test
//	  QP to the same port (the client dials, the server accepts; READ and
//	  atomic tests offer -o outstanding requests both ways, the others
//	  leave it to the CM), then a barrier
//	→ Session.ExchangeKeys: binary struct pingpong_dest keys, no GID check,
//	  nothing moves the QPs (the CM did)
//	→ the measurement and reports as over TCP; no "done" at the end
//	→ both sides disconnect the test connections, then the exchange's
//	  (DREQ; perftest's client does too, its server just destroys them).
//
// perftest's server destroys its listener once the exchange connection is
// accepted and listens again for the test QPs; softrdma keeps one listener
// for both, so a client's REQ cannot arrive between the two. perftest's
// client retries its test connections 10 times, 100 ms apart, when they
// are refused (its server may not listen yet); softrdma's too.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// ptCMRetries and ptCMRetryDelay are perftest's retries of a refused test
// connection (rdma_cm_client_connection).
const (
	ptCMRetries    = 10
	ptCMRetryDelay = 100 * time.Millisecond
)

// ptCMChannel is the exchange's rdma_cm connection: an RC QP whose SENDs
// and receives carry perftest's messages (perftest.Messenger).
type ptCMChannel struct {
	pd      verbs.PD
	scq     verbs.CQ
	rcq     verbs.CQ
	qp      verbs.QP
	mr      verbs.MR // [ send | receive ], ptCMMsgMax bytes each
	conn    *cm.Conn
	ln      *cm.Listener // the server's, kept for the test QPs
	gone    context.Context
	goneEnd context.CancelFunc
}

// ptCMMsgMax is the size of each message buffer: perftest's are
// sizeof(struct pingpong_dest), its longest message.
const ptCMMsgMax = perftest.DestBinarySize

// newPTCMChannel creates the exchange's QP (RC, one message each way, as
// perftest's comm context with tx and rx depth 1), in INIT with its
// receive posted, so that the peer's first message finds it.
func newPTCMChannel(dev verbs.Context, port uint8) (*ptCMChannel, error) {
	ch := &ptCMChannel{}
	ok := false
	defer func() {
		if !ok {
			ch.close()
		}
	}()
	var err error
	if ch.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if ch.mr, err = ch.pd.AllocMR(2*ptCMMsgMax, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if ch.scq, err = dev.CreateCQ(2, nil); err != nil {
		return nil, err
	}
	if ch.rcq, err = dev.CreateCQ(2, nil); err != nil {
		return nil, err
	}
	if ch.qp, err = ch.pd.CreateQP(&verbs.QPInitAttr{SendCQ: ch.scq, RecvCQ: ch.rcq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	p := cm.DefaultParams()
	p.Port, p.Access = port, verbs.AccessLocalWrite
	if err := cm.Init(ch.qp, &p); err != nil {
		return nil, err
	}
	if err := ch.postRecv(); err != nil {
		return nil, err
	}
	ch.gone, ch.goneEnd = context.WithCancel(context.Background())
	ok = true
	return ch, nil
}

// options are the exchange connection's: perftest's comm context asks
// for no READ depth (its verb is SEND) and 7 retries of each kind.
func (ch *ptCMChannel) options(dev verbs.Context, port uint8) *cm.Options {
	return &cm.Options{Context: dev, Port: port, PD: ch.pd, QP: ch.qp, RetryCount: 7, RNRRetryCount: 7}
}

// connected records the connection and watches it: a peer that
// disconnects or dies ends every wait of the exchange.
func (ch *ptCMChannel) connected(c *cm.Conn) {
	ch.conn = c
	go func() {
		<-c.Done()
		ch.goneEnd()
	}()
}

func (ch *ptCMChannel) postRecv() error {
	clear(ch.mr.Bytes()[ptCMMsgMax:])
	return ch.qp.PostRecv(&verbs.RecvWR{WRID: 5, SGList: []verbs.SGE{ch.mr.SGE(ptCMMsgMax, ptCMMsgMax)}})
}

// SendMsg sends b (at most ptCMMsgMax bytes) as one SEND and waits for
// its completion, as rdma_write_data does.
func (ch *ptCMChannel) SendMsg(ctx context.Context, b []byte) error {
	if len(b) > ptCMMsgMax {
		return fmt.Errorf("perftest over rdma_cm: a %d-byte message exceeds the %d-byte buffers", len(b), ptCMMsgMax)
	}
	n := copy(ch.mr.Bytes(), b)
	if err := ch.qp.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{ch.mr.SGE(0, n)}}); err != nil {
		return err
	}
	_, err := ch.wait(ctx, ch.scq, "send")
	return err
}

// RecvMsg waits for the peer's next message, copies its first len(b)
// bytes into b and posts the receive again, as rdma_read_data does.
func (ch *ptCMChannel) RecvMsg(ctx context.Context, b []byte) error {
	if _, err := ch.wait(ctx, ch.rcq, "receive"); err != nil {
		return err
	}
	copy(b, ch.mr.Bytes()[ptCMMsgMax:])
	return ch.postRecv()
}

// wait returns cq's next completion, failing on an error status, when ctx
// ends or when the connection does.
func (ch *ptCMChannel) wait(ctx context.Context, cq verbs.CQ, what string) (verbs.WC, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ch.gone, cancel)
	defer stop()
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return wc[0], fmt.Errorf("%s completion with status %v", what, wc[0].Status)
			}
			return wc[0], nil
		}
		if err := cq.Wait(wctx); err != nil {
			if ctx.Err() == nil && ch.gone.Err() != nil {
				return verbs.WC{}, fmt.Errorf("the rdma_cm connection ended: %w", ch.conn.Err())
			}
			return verbs.WC{}, err
		}
	}
}

func (ch *ptCMChannel) close() {
	if ch.ln != nil {
		ch.ln.Close()
	}
	if ch.conn != nil {
		ch.conn.Close()
	}
	if ch.goneEnd != nil {
		ch.goneEnd()
	}
	if ch.qp != nil {
		ch.qp.Destroy()
	}
	for _, cq := range []verbs.CQ{ch.scq, ch.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if ch.mr != nil {
		ch.mr.Dereg()
	}
	if ch.pd != nil {
		ch.pd.Dealloc()
	}
}

// establishCM connects the exchange through rdma_cm: the server listens
// on -p and accepts one connection, the client dials it, retrying while
// the server refuses (is not listening yet) within ptConnectTimeout.
func (r *ptRun) establishCM() (*ptCMChannel, error) {
	o := r.o
	port := uint8(o.ibPort)
	ch, err := newPTCMChannel(r.dev, port)
	if err != nil {
		return nil, fmt.Errorf(" Unable to create the resources needed by comm struct: %w", err)
	}
	if o.role() == perftest.Client {
		addr, err := r.cmServerAddr()
		if err != nil {
			ch.close()
			return nil, err
		}
		ctx, cancel := context.WithTimeout(r.env.ctx, ptConnectTimeout)
		defer cancel()
		c, err := ptDialRetry(ctx, addr, ch.options(r.dev, port), -1)
		if err != nil {
			ch.close()
			return nil, fmt.Errorf("Couldn't connect to %v through rdma_cm within %v: %w", addr, ptConnectTimeout, err)
		}
		ch.connected(c)
		return ch, nil
	}
	fmt.Fprintf(r.out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	ln, err := cm.Listen("rdma", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(o.port)).String(),
		&cm.Options{Context: r.dev, Port: port})
	if err != nil {
		ch.close()
		return nil, fmt.Errorf(" rdma_listen failed: %w", err)
	}
	ch.ln = ln
	c, err := ptAccept(r.env.ctx, ln, ch.options(r.dev, port))
	if err != nil {
		ch.close()
		return nil, err
	}
	ch.connected(c)
	return ch, nil
}

// cmServerAddr is the server's rdma_cm address: its host and -p.
func (r *ptRun) cmServerAddr() (netip.AddrPort, error) {
	ip, err := resolveIP(r.o.server)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ip, uint16(r.o.port)), nil
}

// ptDialRetry dials addr, again after ptCMRetryDelay while the peer
// rejects the REQ (nobody listens yet), at most tries times (-1: until
// ctx ends).
func ptDialRetry(ctx context.Context, addr netip.AddrPort, opts *cm.Options, tries int) (*cm.Conn, error) {
	for i := 1; ; i++ {
		c, err := cm.Dial(ctx, "rdma", addr.String(), opts)
		var rej *cm.RejectError
		if err == nil || !errors.As(err, &rej) || i == tries {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(ptCMRetryDelay):
		}
	}
}

// ptAccept accepts the next connection request on ln with opts.
func ptAccept(ctx context.Context, ln *cm.Listener, opts *cm.Options) (*cm.Conn, error) {
	req, err := ln.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf(" Couldn't get a connect request on port %v: %w", ln.Addr().Port(), err)
	}
	if req.QPType != verbs.QPTypeRC {
		req.Reject(nil)
		return nil, fmt.Errorf(" bad connect request: a %v QP on the RC port space", req.QPType)
	}
	c, err := req.Accept(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf(" Function rdma_accept failed: %w", err)
	}
	return c, nil
}

// connectCMQPs connects the test's QPs through rdma_cm (perftest's
// create_rdma_cm_connection, between its two barriers): one connection
// per QP, in order; the client dials the server's -p, the server accepts
// on the exchange's listener. READ and atomic tests offer the
// outstanding-request depth both ways, as perftest does; the other tests
// leave it to the CM.
func (r *ptRun) connectCMQPs(ctx context.Context) error {
	o := r.o
	var depth uint8
	if o.test.verb == perftest.Read || o.test.verb == perftest.Atomic {
		depth = uint8(min(r.outReads, 255))
	}
	_, qpAccess := ptAccess(o.test.verb)
	for i, qp := range r.res.qps {
		opts := &cm.Options{Context: r.dev, Port: uint8(o.ibPort), PD: r.res.pd, QP: qp, Access: qpAccess,
			ResponderResources: depth, InitiatorDepth: depth, RetryCount: 7, RNRRetryCount: 7}
		var c *cm.Conn
		var err error
		if o.role() == perftest.Client {
			addr, aerr := r.cmServerAddr()
			if aerr != nil {
				return aerr
			}
			c, err = ptDialRetry(ctx, addr, opts, ptCMRetries)
		} else {
			c, err = ptAccept(ctx, r.cm.ln, opts)
		}
		if err != nil {
			return fmt.Errorf("QP %d of %d: %w", i+1, len(r.res.qps), err)
		}
		r.cmConns = append(r.cmConns, c)
	}
	// Like perftest's rdma_destroy_id of its listener: no more requests.
	if r.cm.ln != nil {
		r.cm.ln.Close()
		r.cm.ln = nil
	}
	return nil
}

// closeCMQPs disconnects the test connections (perftest's client waits
// for each DISCONNECTED; its server just destroys them, which sends a DREQ
// all the same).
func (r *ptRun) closeCMQPs() {
	for _, c := range r.cmConns {
		c.Close()
	}
	r.cmConns = nil
}
