package rdmacm

// softrdma rping: librdmacm's rping (examples/rping.c) over package cm,
// with its flags, its exchange and its output, so either side can be the
// real rping. Per ping:
//
//	client SENDs {addr, rkey, size} of its start buffer (rping_rdma_info, big-endian)
//	server RDMA READs the start buffer, SENDs "go ahead"
//	client SENDs {addr, rkey, size} of its sink buffer
//	server RDMA WRITEs the data back, SENDs "go ahead"

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/verbs"
)

const (
	rpingBufSize = 64 * 1024 // RPING_BUFSIZE
	rpingMinSize = 26        // RPING_MIN_BUFSIZE: sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)
	rpingInfoLen = 16
)

// cmTool is the device and verbs objects of one librdmacm-style tool.
type cmTool struct {
	dev verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
}

// newCMTool creates a PD, one CQ and an RC QP in INIT, as rping's
// setup_qp does (send depth 16, receive depth 2).
func newCMTool(dev verbs.Context, typ verbs.QPType, sendWR, recvWR uint32) (*cmTool, error) {
	t := &cmTool{dev: dev}
	var err error
	if t.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if t.cq, err = dev.CreateCQ(int(2*(sendWR+recvWR)), nil); err != nil {
		return nil, err
	}
	t.qp, err = t.pd.CreateQP(&verbs.QPInitAttr{SendCQ: t.cq, RecvCQ: t.cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: sendWR, MaxRecvWR: recvWR, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	p := cm.DefaultParams()
	if typ == verbs.QPTypeUD {
		p.QKey = cm.RDMAUDPQKey
	}
	return t, cm.Init(t.qp, &p)
}

func (t *cmTool) close() {
	if t.qp != nil {
		t.qp.Destroy()
	}
	t.cq.Destroy()
	t.pd.Dealloc()
}

// errPeerGone is returned by waitWC when the connection ended.
var errPeerGone = errors.New("disconnected")

// waitWC returns the next completion, or errPeerGone once done is closed
// and the CQ is empty, or at a flushed completion: the QP went to ERR
// because the connection ended (rping's cq_thread takes a flush as the
// end, not as a failure; over shm the peer's exit flushes our receive
// about when its DREQ arrives).
func waitWC(cq verbs.CQ, done <-chan struct{}) (verbs.WC, error) {
	wc := make([]verbs.WC, 1)
	for {
		n, err := cq.Poll(wc)
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			if wc[0].Status == verbs.WCWRFlushErr {
				return wc[0], errPeerGone
			}
			if wc[0].Status != verbs.WCSuccess {
				return wc[0], fmt.Errorf("%v completion error: %v", wc[0].Opcode, wc[0].Status)
			}
			return wc[0], nil
		}
		select {
		case <-done:
			return verbs.WC{}, errPeerGone
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		cq.Wait(ctx)
		cancel()
	}
}

type rpingOpts struct {
	*runEnv
	server, client, verbose, validate, debug, persistent bool
	addr, src                                            string
	port, size, count                                    int
}

func runRping(e *runEnv, args []string) error {
	o := rpingOpts{runEnv: e}
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.BoolVar(&o.server, "s", false, "server side")
	fs.BoolVar(&o.client, "c", false, "client side")
	fs.StringVar(&o.addr, "a", "", "address")
	fs.StringVar(&o.src, "I", "", "source address to bind to for client")
	fs.IntVar(&o.port, "p", 7174, "port")
	fs.IntVar(&o.size, "S", 64, "ping data size")
	fs.IntVar(&o.count, "C", 0, "ping count times (0: forever)")
	fs.BoolVar(&o.verbose, "v", false, "display ping data to stdout")
	fs.BoolVar(&o.validate, "V", false, "validate ping data")
	fs.BoolVar(&o.debug, "d", false, "debug printfs")
	fs.BoolVar(&o.persistent, "P", false, "persistent server mode allowing multiple connections")
	fs.Bool("q", false, "use self-created, self-modified QP (always so here)")
	fs.Int("t", 0, "type of service (ignored)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.size < rpingMinSize || o.size > rpingBufSize-1 {
		return fmt.Errorf("Invalid size %d (valid range is %d to %d)", o.size, rpingMinSize, rpingBufSize-1)
	}
	if o.server == o.client {
		return fmt.Errorf("usage: rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] | -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]")
	}
	if o.client {
		if o.addr == "" && fs.NArg() > 0 {
			o.addr = fs.Arg(0) // the interop suite appends the server's address
		}
		return rpingClient(&o)
	}
	return rpingServer(&o)
}

func (o *rpingOpts) logf(format string, args ...any) {
	if o.debug {
		fmt.Fprintf(o.stdout, format, args...)
	}
}

// rpingBufs are rping's registered buffers.
type rpingBufs struct {
	recv, send, rdma, start verbs.MR
}

func newRpingBufs(pd verbs.PD, size int, client bool) (*rpingBufs, error) {
	b := &rpingBufs{}
	var err error
	if b.recv, err = pd.AllocMR(rpingInfoLen, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if b.send, err = pd.AllocMR(rpingInfoLen, 0); err != nil {
		return nil, err
	}
	if b.rdma, err = pd.AllocMR(rpingBufSize, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if client {
		if b.start, err = pd.AllocMR(rpingBufSize, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *rpingBufs) free() {
	for _, mr := range []verbs.MR{b.recv, b.send, b.rdma, b.start} {
		if mr != nil {
			mr.Dereg()
		}
	}
}

func postRecv(qp verbs.QP, mr verbs.MR) error {
	return qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, mr.Len())}})
}

func rpingClient(o *rpingOpts) error {
	dev, err := o.opener.OpenCM(o.src, o.addr)
	if err != nil {
		return err
	}
	defer dev.Close()
	t, err := newCMTool(dev, verbs.QPTypeRC, 16, 2)
	if err != nil {
		return err
	}
	defer t.close()
	b, err := newRpingBufs(t.pd, o.size, true)
	if err != nil {
		return err
	}
	defer b.free()
	if err := postRecv(t.qp, b.recv); err != nil {
		return err
	}
	ip, err := device.ResolveIP(o.addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(o.ctx, 2*time.Minute)
	defer cancel()
	conn, err := cm.Dial(ctx, "rdma", netip.AddrPortFrom(ip, uint16(o.port)).String(),
		&cm.Options{Context: dev, PD: t.pd, QP: t.qp, ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		var rej *cm.RejectError
		if errors.As(err, &rej) {
			fmt.Fprintf(o.stderr, "cma event RDMA_CM_EVENT_REJECTED, error %d\n", rej.Reason)
		} else {
			fmt.Fprintf(o.stderr, "cma event RDMA_CM_EVENT_UNREACHABLE, error %v\n", err)
		}
		fmt.Fprintf(o.stderr, "wait for CONNECTED state 4\nconnect error -1\n")
		return fmt.Errorf("rping client failed: %w", err)
	}
	o.logf("rdma_connect successful\n")
	info := func(mr verbs.MR) error {
		s := b.send.Bytes()
		binary.BigEndian.PutUint64(s[0:], mr.Addr())
		binary.BigEndian.PutUint32(s[8:], mr.RKey())
		binary.BigEndian.PutUint32(s[12:], uint32(o.size))
		o.logf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), o.size)
		return t.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{b.send.SGE(0, rpingInfoLen)}})
	}
	// awaitGoAhead waits for the server's SEND, skipping send completions.
	awaitGoAhead := func() error {
		for {
			wc, err := waitWC(t.cq, conn.Done())
			if err != nil {
				return err
			}
			if wc.Opcode == verbs.WCRecv {
				return postRecv(t.qp, b.recv)
			}
		}
	}
	start := byte(65)
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		sb := b.start.Bytes()[:o.size]
		cc := copy(sb, fmt.Sprintf("rdma-ping-%d: ", ping))
		for i, c := cc, start; i < o.size; i++ {
			sb[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		sb[o.size-1] = 0
		if err := info(b.start); err != nil {
			return err
		}
		if err := awaitGoAhead(); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_ADV: %w", err)
		}
		if err := info(b.rdma); err != nil {
			return err
		}
		if err := awaitGoAhead(); err != nil {
			return fmt.Errorf("wait for RDMA_WRITE_COMPLETE: %w", err)
		}
		rb := b.rdma.Bytes()[:o.size]
		if o.validate && string(sb) != string(rb) {
			fmt.Fprintf(o.stderr, "data mismatch!\n")
			return errors.New("data mismatch")
		}
		if o.verbose {
			fmt.Fprintf(o.stdout, "ping data: %s\n", cstr(rb))
		}
	}
	conn.Close() // DREQ; the QP goes to ERR, the tool destroys it
	fmt.Fprintf(o.stderr, "client DISCONNECT EVENT...\n")
	return nil
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func rpingServer(o *rpingOpts) error {
	dev, err := o.opener.OpenCMServer(o.addr)
	if err != nil {
		return err
	}
	defer device.Close(dev)
	ln, err := cm.Listen("rdma", device.ListenAddr(dev, o.port), &cm.Options{Context: dev})
	if err != nil {
		return err
	}
	defer ln.Close()
	o.logf("rdma_listen\n")
	for {
		if err := rpingServeOne(o, ln); err != nil {
			return fmt.Errorf("rping server failed: %w", err)
		}
		if !o.persistent {
			return nil
		}
	}
}

func rpingServeOne(o *rpingOpts, ln *cm.Listener) error {
	req, err := ln.Accept(o.ctx)
	if err != nil {
		return err
	}
	t, err := newCMTool(req.Context(), verbs.QPTypeRC, 16, 2)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer t.close()
	b, err := newRpingBufs(t.pd, o.size, false)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer b.free()
	if err := postRecv(t.qp, b.recv); err != nil {
		req.Reject(nil)
		return err
	}
	ctx, cancel := context.WithTimeout(o.ctx, time.Minute)
	defer cancel()
	conn, err := req.Accept(ctx, &cm.Options{PD: t.pd, QP: t.qp, ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		return err
	}
	o.logf("accepting client connection request\n")
	defer conn.Close()
	// early is the client's next message when it arrived before the
	// completion post waited for: the one CQ holds both, and a fast
	// client (over shm, the responder's pass can complete its SEND
	// before our go-ahead's) answers before our SEND retires. rping.c's
	// cq_thread handles each completion as it comes; dropping it here
	// left adv waiting forever.
	var early *verbs.WC
	post := func(wr *verbs.SendWR) error {
		if err := t.qp.PostSend(wr); err != nil {
			return err
		}
		for {
			wc, err := waitWC(t.cq, conn.Done())
			if err != nil {
				return err
			}
			if wc.Opcode != verbs.WCRecv {
				return nil
			}
			early = &wc
		}
	}
	goAhead := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{b.send.SGE(0, rpingInfoLen)}}
	// adv waits for the client's {addr, rkey, size}.
	adv := func() (addr uint64, rkey, size uint32, err error) {
		for {
			var wc verbs.WC
			var err error
			if early != nil {
				wc, early = *early, nil
			} else if wc, err = waitWC(t.cq, conn.Done()); err != nil {
				return 0, 0, 0, err
			}
			if wc.Opcode != verbs.WCRecv {
				continue
			}
			if wc.ByteLen != rpingInfoLen {
				fmt.Fprintf(o.stderr, "Received bogus data, size %d\n", wc.ByteLen)
				return 0, 0, 0, errors.New("bogus data")
			}
			r := b.recv.Bytes()
			addr, rkey, size = binary.BigEndian.Uint64(r), binary.BigEndian.Uint32(r[8:]), binary.BigEndian.Uint32(r[12:])
			o.logf("Received rkey %x addr %x len %d from peer\n", rkey, addr, size)
			return addr, rkey, min(size, rpingBufSize), postRecv(t.qp, b.recv)
		}
	}
	for ping := 0; ; ping++ {
		addr, rkey, size, err := adv()
		if err == errPeerGone {
			fmt.Fprintf(o.stderr, "server DISCONNECT EVENT...\n")
			return nil
		}
		if err != nil {
			return err
		}
		err = post(&verbs.SendWR{Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{b.rdma.SGE(0, int(size))}, RemoteAddr: addr, RKey: rkey})
		if err != nil {
			return err
		}
		if o.verbose {
			fmt.Fprintf(o.stdout, "server ping data: %s\n", cstr(b.rdma.Bytes()[:size]))
		}
		if err := post(goAhead); err != nil {
			return err
		}
		addr, rkey, _, err = adv()
		if err != nil {
			return err
		}
		n := len(cstr(b.rdma.Bytes()[:size])) + 1
		err = post(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{b.rdma.SGE(0, n)}, RemoteAddr: addr, RKey: rkey})
		if err != nil {
			return err
		}
		if err := post(goAhead); err != nil {
			return err
		}
	}
}
