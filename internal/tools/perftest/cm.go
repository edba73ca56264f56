package perftest

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
//	  leave it to the CM; UD resolves the server's QPN and Q_Key with SIDR
//	  and, if the server sends too, the client's first SEND_WITH_IMM tells
//	  it the client's QPN), then a barrier
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
	"github.com/softrdma/softrdma/internal/tools/device"
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
	udLn    *cm.Listener // the server's for UD test QPs (port space UDP)
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
	wc, err := ptWaitCQ(wctx, cq, what)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil && ch.gone.Err() != nil {
		// A peer that took our last message may disconnect at once: its
		// DREQ ends the connection only once the QP has processed what
		// arrived before it (cm settles the QP), so the message's
		// completion is in the CQ if the peer took it; the wait may have
		// ended before looking.
		var last [1]verbs.WC
		if n, _ := cq.Poll(last[:]); n == 1 && last[0].Status == verbs.WCSuccess {
			return last[0], nil
		}
		return verbs.WC{}, fmt.Errorf("the rdma_cm connection ended: %w", ch.conn.Err())
	}
	return wc, err
}

func (ch *ptCMChannel) close() {
	for _, ln := range []*cm.Listener{ch.ln, ch.udLn} {
		if ln != nil {
			ln.Close()
		}
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
		c, err := ptDialRetry(ctx, addr, ch.options(r.dev, port), -1, nil)
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
	if o.conn == perftest.UD {
		// UD test QPs resolve through SIDR in the UDP port space, on the
		// same port.
		udOpts := &cm.Options{Context: r.dev, Port: port, QPType: verbs.QPTypeUD}
		if ch.udLn, err = cm.Listen("rdma", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(o.port)).String(), udOpts); err != nil {
			ch.close()
			return nil, fmt.Errorf(" rdma_listen failed: %w", err)
		}
	}
	c, err := ptAccept(r.env.ctx, ln, ch.options(r.dev, port), verbs.QPTypeRC)
	if err != nil {
		ch.close()
		return nil, err
	}
	ch.connected(c)
	return ch, nil
}

// cmServerAddr is the server's rdma_cm address: its host and -p.
func (r *ptRun) cmServerAddr() (netip.AddrPort, error) {
	ip, err := device.ResolveIP(r.o.server)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ip, uint16(r.o.port)), nil
}

// ptDialRetry dials addr, again after ptCMRetryDelay while the peer
// refuses (a REJ, or a SIDR_REP that is not a success: nobody listens
// yet), at most tries times (-1: until ctx ends). again, if not nil,
// readies the QP for another try.
func ptDialRetry(ctx context.Context, addr netip.AddrPort, opts *cm.Options, tries int, again func() error) (*cm.Conn, error) {
	for i := 1; ; i++ {
		c, err := cm.Dial(ctx, "rdma", addr.String(), opts)
		var rej *cm.RejectError
		var sidr *cm.SIDRError
		if err == nil || !(errors.As(err, &rej) || errors.As(err, &sidr)) || i == tries {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(ptCMRetryDelay):
		}
		if again != nil {
			if err := again(); err != nil {
				return nil, err
			}
		}
	}
}

// ptAccept accepts the next connection request on ln with opts; it must
// be for a QP of type want.
func ptAccept(ctx context.Context, ln *cm.Listener, opts *cm.Options, want verbs.QPType) (*cm.Conn, error) {
	req, err := ln.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf(" Couldn't get a connect request on port %v: %w", ln.Addr().Port(), err)
	}
	if req.QPType != want {
		req.Reject(nil)
		return nil, fmt.Errorf(" bad connect request: a %v QP where %v was expected", req.QPType, want)
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
	ud := o.conn == perftest.UD
	for i, qp := range r.res.qps {
		opts := &cm.Options{Context: r.dev, Port: uint8(o.ibPort), PD: r.res.pd, QP: qp, Access: qpAccess,
			ResponderResources: depth, InitiatorDepth: depth, RetryCount: 7, RNRRetryCount: 7}
		var again func() error
		if ud {
			opts.QPType = verbs.QPTypeUD
			// A UD Dial moves the QP to RTS before its SIDR_REQ: back
			// to INIT for another try.
			again = func() error {
				if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
					return err
				}
				p := cm.DefaultParams()
				p.Port, p.QKey = uint8(o.ibPort), cm.RDMAUDPQKey
				return cm.Init(qp, &p)
			}
		}
		var c *cm.Conn
		var err error
		if o.role() == perftest.Client {
			addr, aerr := r.cmServerAddr()
			if aerr != nil {
				return aerr
			}
			c, err = ptDialRetry(ctx, addr, opts, ptCMRetries, again)
			if err == nil && ud {
				r.cmConns = append(r.cmConns, c)
				err = r.udClientReady(ctx, i, c)
			}
		} else if ud {
			c, err = r.udServerAccept(ctx, i, opts)
		} else {
			c, err = ptAccept(ctx, r.cm.ln, opts, verbs.QPTypeRC)
		}
		if err != nil {
			return fmt.Errorf("QP %d of %d: %w", i+1, len(r.res.qps), err)
		}
		if !(ud && o.role() == perftest.Client) {
			r.cmConns = append(r.cmConns, c)
		}
	}
	// Like perftest's rdma_destroy_id of its listener: no more requests.
	for _, ln := range []**cm.Listener{&r.cm.ln, &r.cm.udLn} {
		if *ln != nil {
			(*ln).Close()
			*ln = nil
		}
	}
	return nil
}

// ptUDRemote is where a UD test QP sends.
type ptUDRemote struct {
	ah   verbs.AH
	qpn  uint32
	qkey uint32
}

// ptUDNeedsQPN is perftest's rule for when the server of a UD test
// learns the client's QPN from a first SEND (it sends too): latency tests
// and bidirectional bandwidth tests.
func (o *ptOptions) ptUDNeedsQPN() bool {
	return o.test.kind == perftest.Lat || o.duplex
}

// udClientReady records where QP i sends (the SIDR_REP's QPN and Q_Key,
// cm's AH) and, when the server must learn our QPN, sends it as
// perftest's rdma_cm_send_ud_connection_parameters does: a 4-byte
// SEND_WITH_IMM whose immediate data is the QPN.
func (r *ptRun) udClientReady(ctx context.Context, i int, c *cm.Conn) error {
	r.setUDRemote(i, ptUDRemote{ah: c.AH, qpn: c.RemoteQPN, qkey: c.RemoteQKey})
	if !r.o.ptUDNeedsQPN() {
		return nil
	}
	qp := r.res.qps[i]
	if err := qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled,
		ImmData: qp.QPNum(), SGList: []verbs.SGE{r.res.mr.SGE(int(r.res.sendOff(i)), 4)},
		AH: c.AH, RemoteQPN: c.RemoteQPN, RemoteQKey: c.RemoteQKey}); err != nil {
		return err
	}
	_, err := ptWaitCQ(ctx, r.res.sendCQ, "send of the QP number")
	return err
}

// udServerAccept accepts QP i's SIDR_REQ and, when the client sends its
// QPN (ptUDNeedsQPN), receives it as perftest's server does
// (rdma_cm_initialize_ud_connection_parameters): one receive of the
// 40-byte GRH area and 4 bytes, posted before the SIDR_REP; the address
// handle goes back to the sender, the Q_Key is rdma_cm's.
func (r *ptRun) udServerAccept(ctx context.Context, i int, opts *cm.Options) (*cm.Conn, error) {
	qp := r.res.qps[i]
	need := r.o.ptUDNeedsQPN()
	if need {
		if err := qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{r.res.mr.SGE(int(r.res.sendOff(i)), ptUDAddition+4)}}); err != nil {
			return nil, err
		}
	}
	req, err := r.cm.udLn.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf(" Couldn't get a connect request on port %v: %w", r.cm.udLn.Addr().Port(), err)
	}
	c, err := req.Accept(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf(" Function rdma_accept failed: %w", err)
	}
	if !need {
		return c, nil
	}
	wc, err := ptWaitCQ(ctx, r.res.recvCQ, "receive of the client's QP number")
	if err != nil {
		c.Close()
		return nil, err
	}
	if wc.Opcode != verbs.WCRecv || wc.WCFlags&verbs.WCWithImm == 0 {
		c.Close()
		return nil, fmt.Errorf("the client's QP number came as %v without immediate data", wc.Opcode)
	}
	ah, err := r.res.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: uint8(r.o.ibPort),
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(req.Remote.Addr()), SGIDIndex: uint8(r.gidIndex), HopLimit: 64}})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("Failed to create AH: %w", err)
	}
	if r.res.ahs == nil {
		r.res.ahs = make([]verbs.AH, len(r.res.qps))
	}
	r.res.ahs[i] = ah // destroyed with the resources
	r.setUDRemote(i, ptUDRemote{ah: ah, qpn: wc.ImmData, qkey: cm.RDMAUDPQKey})
	return c, nil
}

func (r *ptRun) setUDRemote(i int, u ptUDRemote) {
	if r.udRemote == nil {
		r.udRemote = make([]ptUDRemote, len(r.res.qps))
	}
	r.udRemote[i] = u
}

// ptWaitCQ returns cq's next completion, failing on an error status or
// when ctx ends.
func ptWaitCQ(ctx context.Context, cq verbs.CQ, what string) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return wc[0], fmt.Errorf("%s: completion with status %v", what, wc[0].Status)
			}
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, fmt.Errorf("%s: %w", what, err)
		}
	}
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
