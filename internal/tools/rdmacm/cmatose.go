package rdmacm

// softrdma ucmatose and softrdma udaddy: librdmacm's cmatose.c (RC
// connections, SENDs both ways, the server disconnects) and udaddy.c (UD
// "connections" resolved with SIDR, SEND_WITH_IMM carrying the sender's
// QPN) over package cm, with their flags and output.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/verbs"
)

type cmaOpts struct {
	*runEnv
	server, bind       string
	conns, count, size int
	port               int
	ud                 bool
	name               string
}

func parseCmaOpts(e *runEnv, name string, args []string, ud bool) (*cmaOpts, error) {
	o := &cmaOpts{runEnv: e, ud: ud, name: name}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.StringVar(&o.server, "s", "", "server address (client mode)")
	fs.StringVar(&o.bind, "b", "", "bind address")
	fs.IntVar(&o.conns, "c", 1, "connections")
	fs.IntVar(&o.count, "C", 10, "message count")
	fs.IntVar(&o.size, "S", 100, "message size")
	fs.String("t", "", "type of service (ignored)")
	fs.String("f", "ip", "address format (ip only)")
	fs.String("P", "", "port space (the default only)")
	if ud {
		fs.String("p", "", "port space, for backwards compatibility (ignored)")
		o.port = 7174
	} else {
		port := fs.String("p", "7471", "port number")
		fs.Bool("m", false, "migrate (ignored)")
		fs.String("a", "", "ack timeout (ignored)")
		defer func() {
			if p, err := strconv.Atoi(*port); err == nil {
				o.port = p
			}
		}()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.server == "" && fs.NArg() > 0 {
		o.server = fs.Arg(0)
	}
	return o, nil
}

func runUcmatose(e *runEnv, args []string) error {
	o, err := parseCmaOpts(e, "cmatose", args, false)
	if err != nil {
		return err
	}
	return cmaMain(o)
}

func runUdaddy(e *runEnv, args []string) error {
	o, err := parseCmaOpts(e, "udaddy", args, true)
	if err != nil {
		return err
	}
	return cmaMain(o)
}

func cmaMain(o *cmaOpts) error {
	var err error
	if o.server != "" {
		err = cmaClient(o)
	} else {
		err = cmaServer(o)
	}
	fmt.Fprintf(o.stdout, "test complete\n")
	status := 0
	if err != nil {
		fmt.Fprintf(o.stdout, "%s: %v\n", o.name, err)
		status = -1
	}
	fmt.Fprintf(o.stdout, "return status %d\n", status)
	if err != nil {
		return errors.New("failed")
	}
	return nil
}

// cmaNode is one connection of the test and its verbs objects.
type cmaNode struct {
	// early are completions that came while completions waited for the
	// other kind (the one CQ holds sends and receives).
	early []verbs.WC
	t     *cmTool
	mr    verbs.MR
	conn  *cm.Conn
}

func (o *cmaOpts) newNode(dev verbs.Context) (*cmaNode, error) {
	typ := verbs.QPTypeRC
	if o.ud {
		typ = verbs.QPTypeUD
	}
	n := max(o.count, 1)
	t, err := newCMTool(dev, typ, uint32(n), uint32(n))
	if err != nil {
		return nil, err
	}
	node := &cmaNode{t: t}
	// UD receives get the 40-byte network header first.
	if node.mr, err = t.pd.AllocMR(o.size+40, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	recvLen := o.size
	if o.ud {
		recvLen += 40
	}
	for range o.count {
		if err := t.qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{node.mr.SGE(0, recvLen)}}); err != nil {
			return nil, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return node, nil
}

func (n *cmaNode) close() {
	if n.conn != nil {
		n.conn.Close()
	}
	n.mr.Dereg()
	n.t.close()
}

// sends posts count signaled SENDs (UD: SEND_WITH_IMM with our QPN, as
// udaddy) and waits for their completions.
func (o *cmaOpts) sends(n *cmaNode, ah verbs.AH, qpn, qkey uint32) error {
	wr := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{n.mr.SGE(0, o.size)}}
	if o.ud {
		wr.Opcode, wr.ImmData, wr.AH, wr.RemoteQPN, wr.RemoteQKey = verbs.WRSendWithImm, n.t.qp.QPNum(), ah, qpn, qkey
	}
	for range o.count {
		if err := n.t.qp.PostSend(wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return o.completions(n, false, nil)
}

// next returns a kept completion of the kind wanted (recv or send), else
// the CQ's next one.
func (n *cmaNode) next(recv bool, done <-chan struct{}) (verbs.WC, error) {
	for i, wc := range n.early {
		if (wc.Opcode&verbs.WCRecv != 0) == recv {
			n.early = append(n.early[:i], n.early[i+1:]...)
			return wc, nil
		}
	}
	return waitWC(n.t.cq, done)
}

// completions waits for count send (or receive) completions.
func (o *cmaOpts) completions(n *cmaNode, recv bool, first func(verbs.WC) error) error {
	var done <-chan struct{}
	if n.conn != nil && !o.ud {
		done = n.conn.Done()
	}
	for got := 0; got < o.count; {
		wc, err := n.next(recv, done)
		if err != nil {
			return fmt.Errorf("failed polling CQ: %w", err)
		}
		if (wc.Opcode&verbs.WCRecv != 0) != recv {
			// The peer's answer may complete before our own SENDs
			// retire (over shm, at once): keep it for the next wait.
			n.early = append(n.early, wc)
			continue
		}
		if got == 0 && first != nil {
			if err := first(wc); err != nil {
				return err
			}
		}
		got++
	}
	return nil
}

func cmaClient(o *cmaOpts) error {
	fmt.Fprintf(o.stdout, "%s: starting client\n", o.name)
	dev, err := o.opener.OpenCM(o.bind, o.server)
	if err != nil {
		return err
	}
	defer dev.Close()
	ip, err := device.ResolveIP(o.server)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "%s: connecting\n", o.name)
	var nodes []*cmaNode
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	ctx, cancel := context.WithTimeout(o.ctx, 2*time.Minute)
	defer cancel()
	for range o.conns {
		n, err := o.newNode(dev)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
		opts := &cm.Options{Context: dev, PD: n.t.pd, QP: n.t.qp}
		if o.ud {
			opts.QPType = verbs.QPTypeUD
		}
		n.conn, err = cm.Dial(ctx, "rdma", netip.AddrPortFrom(ip, uint16(o.port)).String(), opts)
		if err != nil {
			var rej *cm.RejectError
			if errors.As(err, &rej) {
				fmt.Fprintf(o.stdout, "%s: event: RDMA_CM_EVENT_REJECTED, error: %d\n", o.name, rej.Reason)
			} else {
				fmt.Fprintf(o.stdout, "%s: event: RDMA_CM_EVENT_UNREACHABLE, error: -1\n", o.name)
			}
			return err
		}
	}
	if o.count == 0 {
		return nil
	}
	if o.ud {
		fmt.Fprintf(o.stdout, "initiating data transfers\n")
		for _, n := range nodes {
			if err := o.sends(n, n.conn.AH, n.conn.RemoteQPN, n.conn.RemoteQKey); err != nil {
				return err
			}
		}
		fmt.Fprintf(o.stdout, "receiving data transfers\n")
		for _, n := range nodes {
			if err := o.completions(n, true, nil); err != nil {
				return err
			}
		}
		fmt.Fprintf(o.stdout, "data transfers complete\n")
		return nil
	}
	fmt.Fprintf(o.stdout, "receiving data transfers\n")
	for _, n := range nodes {
		if err := o.completions(n, true, nil); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.stdout, "sending replies\n")
	for _, n := range nodes {
		if err := o.sends(n, nil, 0, 0); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.stdout, "data transfers complete\n")
	// The server disconnects.
	for _, n := range nodes {
		select {
		case <-n.conn.Done():
		case <-ctx.Done():
			return errors.New("no disconnect from the server")
		}
	}
	return nil
}

func cmaServer(o *cmaOpts) error {
	fmt.Fprintf(o.stdout, "%s: starting server\n", o.name)
	dev, err := o.opener.OpenCMServer(o.bind)
	if err != nil {
		return err
	}
	defer device.Close(dev)
	opts := &cm.Options{Context: dev}
	if o.ud {
		opts.QPType = verbs.QPTypeUD
	}
	ln, err := cm.Listen("rdma", device.ListenAddr(dev, o.port), opts)
	if err != nil {
		return err
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(o.ctx, 5*time.Minute)
	defer cancel()
	var nodes []*cmaNode
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	peers := map[*cmaNode]netip.Addr{}
	for range o.conns {
		req, err := ln.Accept(ctx)
		if err != nil {
			return err
		}
		n, err := o.newNode(req.Context())
		if err != nil {
			fmt.Fprintf(o.stdout, "%s: failing connection request\n", o.name)
			req.Reject(nil)
			return err
		}
		nodes = append(nodes, n)
		if n.conn, err = req.Accept(ctx, &cm.Options{PD: n.t.pd, QP: n.t.qp}); err != nil {
			fmt.Fprintf(o.stdout, "%s: failing connection request\n", o.name)
			return err
		}
		peers[n] = req.Remote.Addr()
	}
	if o.ud {
		if o.count == 0 {
			return nil
		}
		fmt.Fprintf(o.stdout, "receiving data transfers\n")
		type reply struct {
			ah  verbs.AH
			qpn uint32
		}
		replies := map[*cmaNode]reply{}
		for _, n := range nodes {
			err := o.completions(n, true, func(wc verbs.WC) error {
				// udaddy's ibv_create_ah_from_wc: back to the sender's
				// address and the QPN in the immediate data.
				ah, err := n.t.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1,
					GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(peers[n]), SGIDIndex: 1, HopLimit: 64}})
				if err != nil {
					return fmt.Errorf("failed to create reply AH: %w", err)
				}
				replies[n] = reply{ah, wc.SrcQP}
				return nil
			})
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(o.stdout, "sending replies\n")
		for _, n := range nodes {
			r := replies[n]
			if err := o.sends(n, r.ah, r.qpn, cm.RDMAUDPQKey); err != nil {
				return err
			}
			r.ah.Destroy()
		}
		fmt.Fprintf(o.stdout, "data transfers complete\n")
		return nil
	}
	if o.count > 0 {
		fmt.Fprintf(o.stdout, "initiating data transfers\n")
		for _, n := range nodes {
			for range o.count {
				if err := n.t.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{n.mr.SGE(0, o.size)}}); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(o.stdout, "completing sends\n")
		for _, n := range nodes {
			if err := o.completions(n, false, nil); err != nil {
				return err
			}
		}
		fmt.Fprintf(o.stdout, "receiving data transfers\n")
		for _, n := range nodes {
			if err := o.completions(n, true, nil); err != nil {
				return err
			}
		}
		fmt.Fprintf(o.stdout, "data transfers complete\n")
	}
	fmt.Fprintf(o.stdout, "cmatose: disconnecting\n")
	for _, n := range nodes {
		n.conn.Close()
	}
	fmt.Fprintf(o.stdout, "disconnected\n")
	return nil
}
