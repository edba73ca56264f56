package cm

// Connections on kernel RDMA devices. A device whose kernel runs the
// connection manager (it owns QP1: every device of provider/ibverbs)
// implements verbs.KernelCM, and Dial, Listen and Accept hand the
// exchange to it instead of starting a CM agent on the device:
//
//	Dial ──resolveRoute──▶ device is a verbs.KernelCM? ──yes──▶ CMDial (librdmacm: resolve, REQ/REP/RTU or SIDR)
//	                                                   ╰─no──▶ the agent (agent.go) on the device's QP1
//	Listen ──▶ CMListen ──pump──▶ Listener.reqs ──▶ ConnRequest (k set) ──▶ Accept: CMRequest.Accept
//
// What cm creates (PD, CQs, QP) and what Options give is the same on both
// paths; the kernel computes the QP's attributes and moves it to RTS.
// Packet protection (Options.Security) cannot work there: the device
// builds and checks every packet itself, and has no place for the MAC.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// ErrKernelSecurity is returned by Dial, Listen and Accept asked for
// Options.Security on a kernel RDMA device.
var ErrKernelSecurity = fmt.Errorf("cm: Options.Security on a kernel RDMA device: its packets are built and checked by the device (NIC or kernel driver), which cannot add or verify softrdma's per-packet MAC or encryption; use a softrdma device (provider/soft, provider/shm) for protected connections, or IPsec/MACsec underneath RoCE: %w", verbs.ErrNotSupported)

func kernelParams(o *Options, c *Conn) *verbs.CMParams {
	return &verbs.CMParams{QPType: o.QPType, QP: c.QP, PD: c.PD, Access: o.Access,
		PrivateData: o.PrivateData, ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RetryCount: min(o.RetryCount, 7), RNRRetryCount: min(o.RNRRetryCount, 7), Port: o.Port}
}

// kernelErr turns the provider's refusal into cm's errors.
func kernelErr(err error) error {
	var rej *verbs.CMRejectError
	if errors.As(err, &rej) {
		if rej.UD {
			return &SIDRError{Status: wire.SIDRStatus(rej.Reason), PrivateData: rej.PrivateData}
		}
		return &RejectError{Reason: wire.CMRejReason(rej.Reason), PrivateData: rej.PrivateData}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return err
}

// dialKernel is Dial on a kernel device.
func dialKernel(ctx context.Context, k verbs.KernelCM, r *route, raddr netip.AddrPort, o *Options) (*Conn, error) {
	if o.Security != 0 {
		return nil, ErrKernelSecurity
	}
	c := newConn()
	if err := resources(r.ctx, o, c); err != nil {
		c.release()
		return nil, err
	}
	w, err := watchKernel(r.ctx)
	if err != nil {
		c.release()
		return nil, err
	}
	actx, done, err := w.attempt(ctx)
	if err != nil {
		c.release()
		return nil, err
	}
	defer done()
	p := kernelParams(o, c)
	p.Src, p.Dst, p.Port = netip.AddrPortFrom(r.src, 0), raddr, r.port
	kc, err := k.CMDial(actx, p)
	if err != nil {
		c.release()
		return nil, attemptErr(actx, kernelErr(err))
	}
	c.adoptKernel(kc)
	if err := w.adopt(c); err != nil {
		return nil, err
	}
	return c, nil
}

// adoptKernel fills c from the kernel's connection and watches it.
func (c *Conn) adoptKernel(kc verbs.CMConn) {
	in := kc.Info()
	c.kc = kc
	c.local, c.remote = in.Local, in.Remote
	c.PeerPrivateData = in.PrivateData
	c.ResponderResources, c.InitiatorDepth = in.ResponderResources, in.InitiatorDepth
	if c.QP.Type() == verbs.QPTypeUD {
		c.AH, c.RemoteQPN, c.RemoteQKey = in.AH, in.RemoteQPN, in.RemoteQKey
		if in.AH != nil {
			c.owned = append(c.owned, in.AH.Destroy)
		}
	}
	go func() {
		select {
		case <-kc.Done():
			c.closeWith(ErrDisconnected)
		case <-c.watchEnd:
		}
	}()
	go c.watch()
}

// kernelListener is the part of a Listener on a kernel device.
type kernelListener struct {
	kl   verbs.CMListener
	stop context.CancelFunc
	done chan struct{}
	w    *kernelWatch // the device's (kernel_lifetime.go)
	// devClosed: the device's Close closed the listener.
	devClosed atomic.Bool
}

// listenKernel is listenOn on a kernel device.
func listenKernel(k verbs.KernelCM, vctx verbs.Context, local netip.Addr, port uint16, o Options, address string, reqs chan *ConnRequest) (*Listener, error) {
	if o.Security != 0 {
		return nil, ErrKernelSecurity
	}
	w, err := watchKernel(vctx)
	if err != nil {
		return nil, fmt.Errorf("cm.Listen: %v: %w", address, err)
	}
	kl, err := k.CMListen(netip.AddrPortFrom(local, port), o.QPType, o.Backlog)
	if err != nil {
		return nil, fmt.Errorf("cm.Listen: %v: %w", address, err)
	}
	l := &Listener{qpType: o.QPType, opts: o, reqs: reqs, part: reqs != nil, closed: make(chan struct{})}
	if reqs == nil {
		l.reqs = make(chan *ConnRequest, o.Backlog)
	}
	l.opts.Context = vctx
	l.addr = kl.Addr()
	l.serviceID = ServiceID(portSpace(o.QPType), l.addr.Port())
	ctx, cancel := context.WithCancel(context.Background())
	l.kernel = &kernelListener{kl: kl, stop: cancel, done: make(chan struct{}), w: w}
	if err := w.addListener(l); err != nil {
		cancel()
		kl.Close()
		return nil, fmt.Errorf("cm.Listen: %v: %w", address, err)
	}
	go l.pumpKernel(ctx)
	return l, nil
}

// pumpKernel moves the kernel listener's requests to l's queue.
func (l *Listener) pumpKernel(ctx context.Context) {
	defer close(l.kernel.done)
	for {
		kr, err := l.kernel.kl.Accept(ctx)
		if err != nil {
			return
		}
		in := kr.Info()
		cr := &ConnRequest{Local: in.Local, Remote: in.Remote, PrivateData: in.PrivateData, QPType: in.QPType, l: l, k: kr}
		cr.Req.ResponderResources, cr.Req.InitiatorDepth = in.ResponderResources, in.InitiatorDepth
		cr.Req.RetryCount, cr.Req.RNRRetryCount = in.RetryCount, in.RNRRetryCount
		select {
		case l.reqs <- cr:
		case <-l.closed:
			kr.Reject(nil)
			return
		default:
			kr.Reject(nil) // the backlog is full, as a socket's
		}
	}
}

// closeKernel stops the kernel listener (Close).
func (l *Listener) closeKernel() {
	if l.kernel == nil {
		return
	}
	l.kernel.stop()
	l.kernel.kl.Close()
	<-l.kernel.done
	l.kernel.w.removeListener(l)
}

// acceptKernel is ConnRequest.Accept for a request from a kernel device.
func (r *ConnRequest) acceptKernel(ctx context.Context, o *Options) (*Conn, error) {
	if o.Security != 0 {
		r.k.Reject(nil)
		return nil, ErrKernelSecurity
	}
	w, err := watchKernel(o.Context)
	if err != nil {
		r.k.Reject(nil)
		return nil, err
	}
	actx, done, err := w.attempt(ctx)
	if err != nil {
		r.k.Reject(nil)
		return nil, err
	}
	defer done()
	c := newConn()
	c.local, c.remote = r.Local, r.Remote
	if err := resources(o.Context, o, c); err != nil {
		c.release()
		r.k.Reject(nil)
		return nil, err
	}
	kc, err := r.k.Accept(actx, kernelParams(o, c))
	if err != nil {
		c.release()
		return nil, attemptErr(actx, kernelErr(err))
	}
	c.adoptKernel(kc)
	c.PeerPrivateData = r.PrivateData
	if err := w.adopt(c); err != nil {
		return nil, err
	}
	return c, nil
}

// kernelDevices caches the kernel devices cm opened itself to reach an
// address, so each Dial does not open the device again.
var kernelDevices struct {
	mu sync.Mutex
	m  map[string]verbs.Context
}

// openKernelFor opens the kernel RDMA device of network interface
// ifname: a listed device that says it sits on the interface
// (NetDevice), opened once per process.
func openKernelFor(ifname string) (verbs.Context, bool) {
	devs, _ := verbs.Devices()
	for _, d := range devs {
		nd, ok := d.(interface{ NetDevice() string })
		if !ok || nd.NetDevice() != ifname || strings.HasPrefix(d.Name(), "softrdma") {
			continue
		}
		kernelDevices.mu.Lock()
		defer kernelDevices.mu.Unlock()
		if c := kernelDevices.m[d.Name()]; c != nil {
			return c, true
		}
		c, err := d.Open()
		if err != nil {
			return nil, false
		}
		if kernelDevices.m == nil {
			kernelDevices.m = map[string]verbs.Context{}
		}
		kernelDevices.m[d.Name()] = c
		return c, true
	}
	return nil, false
}
