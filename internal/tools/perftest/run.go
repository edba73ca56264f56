package perftest

// The flow of a perftest-compatible benchmark, step by step as perftest 4.5's
// main() of write_bw.c, read_lat.c, send_bw.c, ... runs it:
//
//	device checks (link, MTU, GID index, inline size, outstanding reads)
//	→ TCP: the server accepts, the client connects (with -R an rdma_cm
//	  connection instead: cm.go)
//	→ Session.Negotiate: versions, page and cache line sizes, MTU
//	→ resources (res.go); with -R, Session.ConnectQPs connects
//	  them through rdma_cm
//	→ banner (WriteTestInfo)
//	→ Session.ExchangeKeys, moving the QPs to RTR/RTS at the right point
//	  (not with -R: the CM did),
//	  printing the local and remote address lines
//	→ table header; per message size: post receives (SEND), BeforeRun,
//	  the measurement (bw.go, lat.go), the report row,
//	  AfterRun
//	→ table footer, Session.Finish
//
// The server of a non-duplex WRITE/READ/atomic bandwidth test and of a
// READ/atomic latency test does not measure: it waits in Finish, and the
// bandwidth server prints the client's report, as perftest does.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/internal/tools/report"
	"github.com/softrdma/softrdma/verbs"
)

// ptStallTimeout is how long a measurement waits without progress before
// it gives up (perftest's check_alive waits 60 s in bandwidth tests).
var ptStallTimeout = 60 * time.Second

// The exchange's timeouts (docs/tools.md), as the pingpong tools': the
// client's TCP connect gives up after ptConnectTimeout, and each step of
// the exchange (negotiation, keys, barriers, reports) after
// ptExchangeTimeout without an answer. A step that follows a measurement
// also allows for the peer's measurement to end on its own stall timeout.
// perftest itself waits forever in all of these.
var (
	ptConnectTimeout  = 20 * time.Second
	ptExchangeTimeout = 60 * time.Second
)

// step returns the context of one exchange step: what names it in the
// error, afterRun allows the peer's measurement to end first, and wait is
// the extra time a peer may spend measuring while this side waits (-1: no
// limit, for the server of a one-sided test in iterations or infinite
// mode, which waits as long as the client measures; it still notices a
// closed connection at once).
func (r *ptRun) step(what string, afterRun bool, wait time.Duration) (context.Context, func(error) error) {
	timeout := ptExchangeTimeout
	if afterRun {
		timeout += ptStallTimeout
	}
	ctx, cancel := r.env.ctx, context.CancelFunc(func() {})
	if wait >= 0 {
		ctx, cancel = context.WithTimeout(r.env.ctx, timeout+wait)
		timeout += wait
	}
	return ctx, func(err error) error {
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) && r.env.ctx.Err() == nil {
			return fmt.Errorf(" No answer from the peer within %v %s; giving up (%w)", timeout, what, err)
		}
		return err
	}
}

// ptRun is one benchmark run.
type ptRun struct {
	o   *ptOptions
	env ptEnv
	out io.Writer

	dev      verbs.Context
	port     verbs.PortAttr
	gid      verbs.GID
	gidIndex int
	mtu      perftest.MTU
	inline   int
	outReads int
	maxRd    int // the device's max_qp_rd_atom

	sess *perftest.Session
	conn net.Conn // the TCP exchange; nil with -R
	// cm is the exchange's rdma_cm connection with -R, cmConns the test
	// QPs' connections.
	cm      *ptCMChannel
	cmConns []*cm.Conn
	// udRemote is, with -R on UD, where each QP sends: what SIDR told
	// the client, what the client's first SEND told the server.
	udRemote []ptUDRemote
	// runCtx is the measurement's context: env.ctx, and with
	// --run_infinitely also ended when the peer closes the connection.
	runCtx context.Context
	res    *ptResources
	local  []perftest.Dest
	remote []perftest.Dest
	ti     perftest.TestInfo
	outs   ptOutputs
}

// runPT runs the benchmark o describes in env.
func runPT(env ptEnv, o *ptOptions) error {
	if env.ctx == nil {
		env.ctx = context.Background()
	}
	if env.errOut == nil {
		env.errOut = io.Discard
	}
	r := &ptRun{o: o, env: env, out: env.out, dev: env.dev}
	if r.dev == nil {
		opener, err := device.NewOpener(env.ctx, env.errOut)
		if err != nil {
			return err
		}
		defer opener.Close() // after the device: closing it flushes the capture
		opener.Pcap, opener.Metrics, opener.Log = o.pcap, o.metrics, o.log
		d, err := opener.Open(o.devName)
		if err != nil {
			return fmt.Errorf("Unable to find the Infiniband/RoCE device: %w", err)
		}
		defer d.Close()
		r.dev = d
	}
	if err := r.checkDevice(); err != nil {
		return err
	}
	if o.rdmaCM {
		ch, err := r.establishCM()
		if err != nil {
			return err
		}
		defer ch.close()
		r.cm = ch
		sess, err := perftest.NewCMSession(ch, r.sessionConfig())
		if err != nil {
			return err
		}
		return r.run(sess)
	}
	conn, err := r.establish()
	if err != nil {
		return err
	}
	defer conn.Close()
	r.conn = conn
	sess, err := perftest.NewSession(conn, r.sessionConfig())
	if err != nil {
		return err
	}
	return r.run(sess)
}

// sessionConfig describes the test to perftest.Session.
func (r *ptRun) sessionConfig() perftest.Config {
	o := r.o
	return perftest.Config{
		Role: o.role(), Verb: o.test.verb, Kind: o.test.kind, NumQPs: o.numQPs,
		Duplex: o.duplex, RunAll: o.runAll, Duration: o.duration > 0, WithGID: true,
	}
}

// checkDevice is check_link: port state and link layer, MTU, GID index,
// inline size and outstanding reads.
func (r *ptRun) checkDevice() error {
	o := r.o
	var err error
	if r.port, err = r.dev.QueryPort(uint8(o.ibPort)); err != nil {
		return fmt.Errorf(" Unable to query port %d attributes: %w", o.ibPort, err)
	}
	if r.port.State != verbs.PortActive {
		return fmt.Errorf(" Port number %d state is %v", o.ibPort, r.port.State)
	}
	attr, err := r.dev.QueryDevice()
	if err != nil {
		return err
	}
	r.maxRd = max(attr.MaxQPRdAtom, 1)
	r.mtu = r.setMTU()
	// verify_params_with_device_context. softrdma's verbs API has one
	// completion vector per device (CreateCQ takes none), so -X 0 is
	// the only one there is.
	if o.events && o.vector > 0 {
		fmt.Fprint(r.out, perftest.ResultLine)
		return errors.New(" Completion vector specified is invalid\n Max completion vector = 0")
	}

	r.gidIndex = o.gidIndex
	if r.gidIndex < 0 {
		r.gidIndex = ptBestGID(r.dev, uint8(o.ibPort), r.port.GIDTblLen)
	}
	if r.gid, err = r.dev.QueryGID(uint8(o.ibPort), r.gidIndex); err != nil {
		return fmt.Errorf(" Couldn't query GID index %d: %w", r.gidIndex, err)
	}

	// perftest gives devices it does not recognize (rxe among them) no
	// inline data unless asked; softrdma honours -I up to its limit.
	r.inline = max(o.inline, 0)
	if r.inline > attr.MaxInlineData {
		fmt.Fprint(r.out, perftest.ResultLine)
		fmt.Fprintf(r.env.errOut, " Max inline data %d is above the device's maximum %d; using %d\n", r.inline, attr.MaxInlineData, attr.MaxInlineData)
		r.inline = attr.MaxInlineData
	}
	r.outReads = 1
	if o.test.verb == perftest.Read || o.test.verb == perftest.Atomic {
		r.outReads = o.outReads
		if r.outReads > r.maxRd {
			fmt.Fprint(r.out, perftest.ResultLine)
			fmt.Fprintf(r.env.errOut, " Number of outstanding reads is above max = %d\n Changing to that max value\n", r.maxRd)
			r.outReads = r.maxRd
		} else if r.outReads <= 0 {
			r.outReads = r.maxRd
		}
	}
	return nil
}

// setMTU is perftest's set_mtu: -m if it is an MTU and not above the port's
// active MTU, the active MTU otherwise.
func (r *ptRun) setMTU() perftest.MTU {
	active := perftest.MTU(r.port.ActiveMTU)
	if r.o.mtu == 0 {
		return active
	}
	m, err := perftest.MTUFromBytes(r.o.mtu)
	if err != nil {
		fmt.Fprintf(r.env.errOut, " Invalid MTU - %d \n Please choose mtu from {256,512,1024,2048,4096}\n Will run with the port active mtu - %d\n", r.o.mtu, int(active))
		return active
	}
	if m > active {
		fmt.Fprintf(r.out, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", int(active))
		return active
	}
	return m
}

// ptBestGID is get_best_gid_index for softrdma: the first IPv4-mapped GID,
// else the first that is not link-local (a softrdma device sends from its
// address, GID index 1, only).
func ptBestGID(ctx verbs.Context, port uint8, n int) int {
	best := -1
	for i := 0; i < n; i++ {
		g, err := ctx.QueryGID(port, i)
		if err != nil || g.IsZero() {
			continue
		}
		if g.Addr().Is4() {
			return i
		}
		if best < 0 && !g.Addr().IsLinkLocalUnicast() {
			best = i
		}
	}
	return max(best, 0)
}

// establish opens the exchange's TCP connection: the server prints
// perftest's banner and accepts one connection, the client connects.
func (r *ptRun) establish() (net.Conn, error) {
	o := r.o
	if o.role() == perftest.Client {
		addr := net.JoinHostPort(o.server, strconv.Itoa(o.port))
		d := net.Dialer{Timeout: ptConnectTimeout}
		c, err := d.DialContext(r.env.ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("Couldn't connect to %s within %v: %w", addr, ptConnectTimeout, err)
		}
		return c, nil
	}
	fmt.Fprintf(r.out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	ln := r.env.ln
	if ln == nil {
		l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(o.port)))
		if err != nil {
			return nil, fmt.Errorf("Couldn't listen to port %d: %w", o.port, err)
		}
		defer l.Close()
		ln = l
	}
	stop := context.AfterFunc(r.env.ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if r.env.ctx.Err() != nil {
			return nil, r.env.ctx.Err()
		}
		return nil, fmt.Errorf("Couldn't accept a connection on port %d: %w", o.port, err)
	}
	return c, nil
}

// run does everything after the exchange's connection is up.
func (r *ptRun) run(sess *perftest.Session) error {
	o := r.o
	r.runCtx = r.env.ctx
	r.sess = sess
	sctx, done := r.step("while negotiating versions and sizes", false, 0)
	neg, err := sess.Negotiate(sctx, perftest.DefaultSysInfo(r.mtu))
	if err = done(err); err != nil {
		return err
	}
	r.mtu = neg.MTU
	if err := r.checkUDSize(); err != nil {
		return err
	}
	if neg.PageSize <= 0 || neg.CacheLineSize <= 0 || neg.PageSize > 1<<30 || neg.CacheLineSize > 1<<20 {
		return fmt.Errorf("perftest: peer sent page size %d and cache line size %d", neg.PageSize, neg.CacheLineSize)
	}

	psns := make([]uint32, o.numQPs)
	for i := range psns {
		psns[i] = ptRandPSN()
	}
	r.res, err = newPTResources(r.dev, o, uint64(neg.PageSize), uint64(neg.CacheLineSize), r.inline, ptSeed(psns[0]))
	if err != nil {
		return err
	}
	defer r.res.close()
	if o.onResources != nil {
		o.onResources(r.res)
	}
	if r.cm != nil {
		defer r.closeCMQPs() // before the QPs are destroyed
		sctx, done := r.step("while connecting the QPs through rdma_cm", false, 0)
		if err = done(sess.ConnectQPs(sctx, r.connectCMQPs)); err != nil {
			return err
		}
	}
	r.local = r.res.localDests(r.port.LID, r.outReads, r.gid, psns)
	if o.secure != 0 {
		if err := r.secure(); err != nil {
			return err
		}
	}

	r.ti = perftest.TestInfo{
		Verb: o.test.verb, AtomicOp: o.atomicOp, Kind: o.test.kind, Role: o.role(), Duplex: o.duplex,
		Device: r.dev.Device().Name(), NumQPs: o.numQPs, Connection: o.conn,
		PostList: o.postList, TXDepth: o.txDepth, RXDepth: o.rxDepth, CQMod: o.cqMod, MTU: r.mtu,
		LinkType: ptLinkType(r.port.LinkLayer), GIDIndex: r.gidIndex, InlineSize: r.inline, OutReads: r.outReads,
		RDMACM: o.rdmaCM, RDMACMExchange: o.rdmaCM, UseEvent: o.events, EQNum: max(o.vector, 0),
	}
	if err := perftest.WriteTestInfo(r.out, r.ti); err != nil {
		return err
	}
	rts := o.test.kind == perftest.Lat || o.role() == perftest.Client || o.duplex
	connect := func(remote []perftest.Dest) error {
		for i := range remote {
			if r.cm != nil {
				break // the CM connected them
			}
			if err := r.res.connect(i, o, r.local[i], remote[i], r.mtu, r.gidIndex, r.maxRd, rts); err != nil {
				return err
			}
		}
		for _, d := range r.local {
			io.WriteString(r.out, perftest.AddressLines(perftest.Local, d, o.test.verb, true))
		}
		return nil
	}
	sctx, done = r.step("while exchanging QP keys", false, 0)
	r.remote, err = sess.ExchangeKeys(sctx, r.local, connect)
	if err = done(err); err != nil {
		return err
	}
	for _, d := range r.remote {
		io.WriteString(r.out, perftest.AddressLines(perftest.Remote, d, o.test.verb, true))
	}
	r.outs.bar = report.NewProgressBar(r.env.errOut, r.env.noProgress)
	defer r.outs.bar.Stop()
	if o.test.kind == perftest.BW {
		err = r.runBW()
	} else {
		err = r.runLat()
	}
	r.outs.bar.Stop()
	if err != nil {
		return err
	}
	return r.writeOutputs()
}

// secure is --secure: a key exchange over the TCP connection (cm's, see
// cm.KeyExchange), then every QP protects its packets before it leaves
// INIT. Both ends must pass --secure (the stronger mode wins); an end
// without it fails on the offer as on a malformed key.
func (r *ptRun) secure() error {
	kx, err := cm.NewKeyExchange(r.o.secure)
	if err != nil {
		return err
	}
	// The offer travels padded to the size of a key message, so a peer
	// without --secure reads it as its first key (and fails at once on
	// it) rather than waiting for the rest of a longer message.
	offer := make([]byte, perftest.KeyMsgSizeGID)
	copy(offer, kx.Offer())
	sctx, done := r.step("while exchanging packet protection keys", false, 0)
	peer, err := r.sess.Swap(sctx, offer, "the key exchange of --secure")
	if err = done(err); err != nil {
		return err
	}
	mode, err := kx.Secure(peer[:cm.OfferLen], r.o.role() == perftest.Client, r.res.qps...)
	if err != nil {
		return fmt.Errorf(" --secure: %w (the peer must be softrdma with --secure too)", err)
	}
	fmt.Fprintf(r.out, " Packet protection: %v (softrdma --secure)\n", mode)
	return nil
}

// checkUDSize is check_mtu's rule for UD: a message is at most one path
// MTU. A size the user did not ask for (the default, or -a) shrinks to
// the MTU; a requested larger size is refused.
func (r *ptRun) checkUDSize() error {
	o := r.o
	mtu := uint64(r.mtu.Bytes())
	if o.conn != perftest.UD || o.size <= mtu {
		return nil
	}
	if o.runAll || !o.sizeSet {
		fmt.Fprintf(r.env.errOut, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
		o.size = mtu
		o.maxAllSize = min(o.maxAllSize, mtu)
		return nil
	}
	return fmt.Errorf(" Max message size in UD cannot be greater than MTU ")
}

func ptLinkType(l verbs.LinkLayer) string {
	if l == verbs.LinkLayerEthernet {
		return "Ethernet"
	}
	return "IB"
}

// runBW runs a bandwidth test from the table header to the end.
func (r *ptRun) runBW() error {
	o := r.o
	f := perftest.BWFormat{Gbits: o.gbits, CPUUtil: o.cpuUtilOn()}
	if err := perftest.WriteBWHeader(r.out, f); err != nil {
		return err
	}
	if !r.sess.Runs() {
		// The server of a one-sided test: wait for the client, print its
		// report.
		rem, ok, err := r.finish(perftest.BWReport{})
		if err != nil {
			return err
		}
		if ok {
			if err := r.printBW(rem, f); err != nil {
				return err
			}
		}
		if err := perftest.WriteBWFooter(r.out, f); err != nil {
			return err
		}
		return r.verifyServer(rem)
	}
	// watchPeer, with --run_infinitely, ends the run when the peer goes:
	// nothing more is said on the connection once the measurement has
	// started, so a read ends only then (perftest's SEND server would
	// print zero rows until killed).
	watchPeer := func() {}
	if o.infinite {
		ctx, cancel := context.WithCancelCause(r.env.ctx)
		defer cancel(nil)
		r.runCtx = ctx
		watchPeer = func() {
			go func() {
				if r.cm != nil {
					<-r.cm.gone.Done()
					cancel(fmt.Errorf("the peer closed the rdma_cm connection (%v)", r.cm.conn.Err()))
					return
				}
				var b [1]byte
				_, err := r.conn.Read(b[:])
				cancel(fmt.Errorf("the peer closed the connection (%v)", err))
			}()
		}
	}
	var my perftest.BWReport
	sender := o.role() == perftest.Client || o.duplex
	receiver := o.test.verb == perftest.Send && (o.role() == perftest.Server || o.duplex)
	sizes := o.sizes()
	for i, size := range sizes {
		r.startRun(size, i, len(sizes))
		bw := newPTBW(r, size)
		if sender {
			bw.SetSendWQEs()
		}
		if receiver {
			if err := bw.SetRecvWQEs(); err != nil {
				return err
			}
		}
		// perftest's infinite WRITE, READ and atomic runs start without
		// the barrier their regular duplex runs have; SEND keeps its.
		if !o.infinite || o.test.verb == perftest.Send {
			if err := r.beforeRun(); err != nil {
				return err
			}
		}
		watchPeer()
		var err error
		switch {
		case o.test.verb == perftest.Send && o.duplex:
			err = bw.RunBi()
		case o.test.verb == perftest.Send && o.role() == perftest.Server:
			err = bw.RunServer()
		default:
			err = bw.Run()
		}
		if err != nil {
			return err
		}
		if my, err = bw.Report(); err != nil {
			return err
		}
		if !o.duplex || (o.test.verb == perftest.Send && o.duration > 0) {
			if err := r.printBW(my, f); err != nil {
				return err
			}
		}
		rem, ok, err := r.afterRun(my)
		if err != nil {
			return err
		}
		if ok {
			if err := r.printBW(perftest.SumBW(my, rem), f); err != nil {
				return err
			}
		}
		if err := r.verifyRead(bw, size); err != nil {
			return err
		}
	}
	if err := perftest.WriteBWFooter(r.out, f); err != nil {
		return err
	}
	_, _, err := r.finish(my)
	return err
}

// beforeRun is Session.BeforeRun within the exchange timeout.
func (r *ptRun) beforeRun() error {
	ctx, done := r.step("at the barrier before the measurement", false, 0)
	return done(r.sess.BeforeRun(ctx))
}

// afterRun is Session.AfterRun within the exchange timeout, plus the
// peer's stall timeout: it may still be measuring.
func (r *ptRun) afterRun(my perftest.BWReport) (perftest.BWReport, bool, error) {
	ctx, done := r.step("after the measurement", true, 0)
	rem, ok, err := r.sess.AfterRun(ctx, my)
	return rem, ok, done(err)
}

// finish is Session.Finish. A side that measured waits for the peer's end
// of the test within the exchange and stall timeouts. The server of a
// one-sided test waits for the whole of the client's measurement: in
// duration mode its length plus those timeouts, otherwise (iterations,
// --run_infinitely) as long as the client keeps the connection open.
func (r *ptRun) finish(my perftest.BWReport) (perftest.BWReport, bool, error) {
	wait := time.Duration(0)
	if !r.sess.Runs() {
		wait = -1
		if r.o.duration > 0 && !r.o.infinite {
			wait = time.Duration(r.o.duration) * time.Second
		}
	}
	ctx, done := r.step("at the end of the test", true, wait)
	rem, ok, err := r.sess.Finish(ctx, my)
	return rem, ok, done(err)
}

// printBW prints a table row and, with --out_json, rewrites the JSON file,
// as print_full_bw_report does.
func (r *ptRun) printBW(rep perftest.BWReport, f perftest.BWFormat) error {
	r.outs.bw = append(r.outs.bw, rep)
	r.outs.bar.Pause()
	if err := perftest.WriteBWRow(r.out, rep, f); err != nil {
		return err
	}
	if r.o.outJSON {
		return r.writeJSON(func(w io.Writer) error {
			return perftest.WriteBWJSON(w, perftest.JSONValid, r.ti, rep, r.o.gbits, r.o.cpuUtilOn())
		})
	}
	return nil
}

// writeJSON replaces the --out_json file with what write writes.
func (r *ptRun) writeJSON(write func(io.Writer) error) error {
	f, err := os.Create(r.o.jsonFile)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runLat runs a latency test from the table header to the end.
func (r *ptRun) runLat() error {
	o := r.o
	if !r.sess.Runs() {
		// READ and atomic latency: only the client measures.
		if _, _, err := r.finish(perftest.BWReport{}); err != nil {
			return err
		}
		_, err := io.WriteString(r.out, perftest.ResultLine)
		return err
	}
	var err error
	if o.duration > 0 {
		err = perftest.WriteLatDurationHeader(r.out, o.cpuUtilOn())
	} else {
		err = perftest.WriteLatHeader(r.out)
	}
	if err != nil {
		return err
	}
	sizes := o.sizes()
	for i, size := range sizes {
		r.startRun(size, i, len(sizes))
		lat := newPTLat(r, size)
		if o.test.verb == perftest.Send {
			if err := lat.SetRecvWQEs(); err != nil {
				return err
			}
		}
		if err := r.beforeRun(); err != nil {
			return err
		}
		switch o.test.verb {
		case perftest.Write:
			err = lat.RunWrite()
		case perftest.Send:
			err = lat.RunSend()
		default:
			err = lat.RunRead()
		}
		if err != nil {
			return err
		}
		if err := r.reportLat(lat); err != nil {
			return err
		}
		if _, _, err := r.afterRun(perftest.BWReport{}); err != nil {
			return err
		}
		if err := r.verifyLat(lat, size); err != nil {
			return err
		}
	}
	if err := perftest.WriteLatFooter(r.out); err != nil {
		return err
	}
	_, _, err = r.finish(perftest.BWReport{})
	return err
}

// benchTest is the engine's view of the options, for one message size.
func (r *ptRun) benchTest(size uint64) *bench.Test {
	o := r.o
	t := &bench.Test{Verb: o.test.verb, AtomicOp: o.atomicOp, Role: o.role(), Duplex: o.duplex,
		Size: size, Iters: uint64(o.iters), TxDepth: o.txDepth, RxDepth: o.rxDepth, CQMod: o.cqMod,
		NoPeak: o.noPeak, Gbits: o.gbits, Inline: r.inline, PostList: o.postList, Duration: o.duration, Margin: o.margin,
		Ctx: r.runCtx, StallTimeout: ptStallTimeout, Completed: &r.outs.completed,
		NoYield: device.IsKernel(r.res.ctx)}
	if o.cpuUtilOn() {
		t.StartCPU = startPTCPUSampler
	}
	if o.infinite {
		t.Duration, t.Margin = 0, 0
		t.Interval = time.Duration(o.duration) * time.Second
		f := perftest.BWFormat{Gbits: o.gbits}
		t.Report = func(rep perftest.BWReport) error { return r.printBW(rep, f) }
	}
	return t
}

// endpoint is the engine's view of the resources and the peer's keys.
func (r *ptRun) endpoint() *bench.Endpoint {
	res := r.res
	ep := &bench.Endpoint{Ctx: res.ctx, QPs: res.qps, SendCQ: res.sendCQ, RecvCQ: res.recvCQ, Events: res.events,
		LKey: res.mr.LKey(), Buf: res.buf, Base: res.base, Layout: res.layout(), Remote: make([]bench.Remote, len(r.remote))}
	for i, d := range r.remote {
		ep.Remote[i] = bench.Remote{VAddr: d.VAddr, RKey: d.RKey}
		if i < len(res.ahs) && res.ahs[i] != nil {
			ep.Remote[i].AH, ep.Remote[i].QPN, ep.Remote[i].QKey = res.ahs[i], d.QPN, ptQKey
		}
		if i < len(r.udRemote) && r.udRemote[i].ah != nil {
			u := r.udRemote[i]
			ep.Remote[i].AH, ep.Remote[i].QPN, ep.Remote[i].QKey = u.ah, u.qpn, u.qkey
		}
	}
	ep.RecvShift, ep.RecvExtra = res.recvShift(), res.recvExtra()
	for _, mr := range res.qpMRs {
		ep.PerQP = append(ep.PerQP, bench.QPMem{LKey: mr.LKey(), Addr: mr.Addr()})
	}
	return ep
}
