//go:build cgo && clib

package main

// rdma_cm for C programs: the Go half of softrdma's librdmacm.so.1.
//
//	rdma_resolve_addr ─▶ srdgo_cm_resolve_addr: device and source address
//	                     of the route, ADDR_RESOLVED into the id's pipe
//	rdma_connect      ─▶ srdgo_cm_connect: cm.Dial with the program's QP in
//	                     a goroutine ─▶ ESTABLISHED / REJECTED / UNREACHABLE
//	rdma_listen       ─▶ srdgo_cm_listen: cm.Listen per device ─▶ one
//	                     CONNECT_REQUEST (a new id) per cm.ConnRequest
//	rdma_accept       ─▶ srdgo_cm_accept: ConnRequest.Accept ─▶ ESTABLISHED
//	rdma_disconnect   ─▶ Conn.Close ─▶ DISCONNECTED (the peer's DREQ too)
//	rdma_get_cm_event ◀─ one 8-byte event handle per event in the channel's
//	                     pipe; srdgo_cm_event turns it into the event
//
// The C half (clib/librdmacm) owns the C structs (rdma_cm_id, the events,
// the channels' pipes) and calls these functions through libibverbs.so.1's
// private exports, so the process has one Go runtime. Events of an id
// destroyed before they were read are dropped by srdgo_cm_event.

/*
#define SRD_CM_GO 1
#include <string.h>
#include "ibverbs.h"
#include "rdmacm.h"

static inline uintptr_t srd_cm_ctx_handle(struct ibv_context *c) { return srd_ctx_of(c)->h; }
static inline uintptr_t srd_cm_qp_handle(struct ibv_qp *qp) { return SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base)->h; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/handle"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// cmDev is a device librdmacm opened: its Go context and its C struct.
type cmDev struct {
	vctx verbs.Context
	cptr *C.struct_ibv_context
}

var (
	cmDevMu sync.Mutex
	cmDevs  []cmDev
)

//export srdgo_cm_register_ctx
func srdgo_cm_register_ctx(c *C.struct_ibv_context) (ret C.int) {
	defer guard("rdma_cm (open device)", &ret)
	o := ctxOf(C.srd_cm_ctx_handle(c))
	cmDevMu.Lock()
	defer cmDevMu.Unlock()
	for _, d := range cmDevs {
		if d.cptr == c {
			return 0
		}
	}
	cmDevs = append(cmDevs, cmDev{vctx: o.ctx, cptr: c})
	return 0
}

// devices returns the devices librdmacm opened.
func devices() []cmDev {
	cmDevMu.Lock()
	defer cmDevMu.Unlock()
	return append([]cmDev(nil), cmDevs...)
}

// devOf returns the C context of a Go one (nil if librdmacm did not open it).
func devOf(v verbs.Context) *cmDev {
	for _, d := range devices() {
		if d.vctx == v {
			return &d
		}
	}
	return nil
}

// gidIndexOf returns the index of a's GID in the device's table, or -1.
func gidIndexOf(v verbs.Context, a netip.Addr) int {
	pa, err := v.QueryPort(1)
	if err != nil {
		return -1
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		g, err := v.QueryGID(1, i)
		if err == nil && !g.IsZero() && g.Addr().Unmap() == a.Unmap() {
			return i
		}
	}
	return -1
}

// devFor returns the device that has address a.
func devFor(a netip.Addr) *cmDev {
	for _, d := range devices() {
		if gidIndexOf(d.vctx, a) >= 0 {
			return &d
		}
	}
	return nil
}

// cmID is the Go side of an rdma_cm_id.
type cmID struct {
	mu        sync.Mutex
	cptr      *C.struct_srd_cm_id
	fd        int // write end of the current channel's pipe
	ps        cm.PortSpace
	qpType    verbs.QPType
	dev       *cmDev
	local     netip.AddrPort
	remote    netip.AddrPort
	routed    bool
	listeners []*cm.Listener
	req       *cm.ConnRequest // a CONNECT_REQUEST's new id, until accepted or rejected
	conn      *cm.Conn
	cancel    context.CancelFunc // ends a connect or accept in flight
	// For a QP the program moves itself (cm_ownqp.go): where
	// rdma_init_qp_attr's answers come from (the request, then the
	// connect response), and the response until rdma_establish.
	attrs attrSource
	resp  *cm.Response
	// rdma_set_option's RDMA_OPTION_ID_TOS and ACK_TIMEOUT (0: unset).
	tos, ackTimeout uint8
	destroyed       bool
	discSent        bool // the DISCONNECTED event was posted
}

func idOf(h C.uintptr_t) *cmID { return handle.Handle(h).Value().(*cmID) }

// liveIDs are the ids not destroyed yet, so that a channel closed while
// ids still use it (a program error rdma-core does not catch either)
// stops their events instead of letting them reach whatever file
// descriptor reuses the number.
var (
	liveMu  sync.Mutex
	liveIDs = map[*cmID]struct{}{}
)

func (id *cmID) live(on bool) {
	liveMu.Lock()
	if on {
		liveIDs[id] = struct{}{}
	} else {
		delete(liveIDs, id)
	}
	liveMu.Unlock()
}

//export srdgo_cm_close_fd
func srdgo_cm_close_fd(fd C.int) {
	defer func() { recover() }()
	liveMu.Lock()
	defer liveMu.Unlock()
	for id := range liveIDs {
		id.mu.Lock()
		if id.fd == int(fd) {
			id.fd = -1
		}
		id.mu.Unlock()
	}
}

// cmEvent is one event waiting in a channel's pipe.
type cmEvent struct {
	id     *cmID
	typ    C.int
	status int
	child  *cmID
	pdata  []byte
	// param.conn
	respRes, initDepth, retry, rnr uint8
	// param.ud
	ud         bool
	qpn, qkey  uint32
	dgid       verbs.GID
	sgidIndex  uint8
	remoteAddr netip.AddrPort
}

// post writes the event's handle into the id's channel.
func (id *cmID) post(ev *cmEvent) {
	ev.id = id
	h := handle.New(ev)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed || id.fd < 0 {
		h.Delete()
		return
	}
	var rec [8]byte
	*(*uint64)(unsafe.Pointer(&rec[0])) = uint64(h)
	if n, err := sysWrite(id.fd, rec[:]); err != nil || n != len(rec) {
		h.Delete()
		if logErrors {
			fmt.Fprintf(os.Stderr, "softrdma: rdma_cm: an event was lost: the channel's pipe refused it: %v\n", err)
		}
	}
}

//export srdgo_cm_create_id
func srdgo_cm_create_id(cptr *C.struct_srd_cm_id, ps, qpType, fd C.int, h *C.uintptr_t) (ret C.int) {
	defer guard("rdma_create_id", &ret)
	if _, err := listDevices(); err != nil {
		return errnoOf("rdma_create_id", err)
	}
	id := &cmID{cptr: cptr, fd: int(fd), ps: cm.PortSpace(ps), qpType: verbs.QPType(qpType)}
	id.live(true)
	*h = C.uintptr_t(handle.New(id))
	return 0
}

//export srdgo_cm_set_fd
func srdgo_cm_set_fd(h C.uintptr_t, fd C.int) (ret C.int) {
	defer guard("rdma_migrate_id", &ret)
	id := idOf(h)
	id.mu.Lock()
	id.fd = int(fd)
	id.mu.Unlock()
	return 0
}

//export srdgo_cm_child_bind
func srdgo_cm_child_bind(h C.uintptr_t, cptr *C.struct_srd_cm_id) (ret C.int) {
	defer guard("rdma_get_cm_event", &ret)
	id := idOf(h)
	id.mu.Lock()
	id.cptr = cptr
	id.mu.Unlock()
	return 0
}

//export srdgo_cm_destroy_id
func srdgo_cm_destroy_id(h C.uintptr_t) {
	defer func() { recover() }()
	id := idOf(h)
	id.mu.Lock()
	id.destroyed = true
	ls, req, conn, cancel, resp := id.listeners, id.req, id.conn, id.cancel, id.resp
	id.listeners, id.req, id.conn, id.cancel, id.resp = nil, nil, nil, nil, nil
	id.mu.Unlock()
	id.live(false)
	for _, l := range ls {
		l.Close()
	}
	if cancel != nil {
		cancel()
	}
	if req != nil {
		req.Reject(nil) // destroying a request's id refuses it, as the kernel does
	}
	if resp != nil {
		resp.Reject(nil) // a connect response never established
	}
	if conn != nil {
		conn.Close() // destroying a connected id disconnects (DREQ)
	}
	handle.Handle(h).Delete()
}

func addrFromC(a *C.struct_srd_cm_addr) (netip.AddrPort, bool) {
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&a.addr[0])), 16)
	switch a.family {
	case C.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[:4])), uint16(a.port)), true
	case C.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(raw)).Unmap(), uint16(a.port)), true
	}
	return netip.AddrPort{}, false
}

func addrToC(a *C.struct_srd_cm_addr, ap netip.AddrPort) {
	*a = C.struct_srd_cm_addr{}
	if !ap.IsValid() {
		return
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&a.addr[0])), 16)
	a.port = C.uint16_t(ap.Port())
	if ip := ap.Addr(); ip.Is4() || ip.Is4In6() {
		a.family = C.AF_INET
		b := ip.Unmap().As4()
		copy(raw, b[:])
	} else {
		a.family = C.AF_INET6
		b := ip.As16()
		copy(raw, b[:])
	}
}

func gidToC(dst *[16]C.uint8_t, a netip.Addr) {
	g := verbs.GIDFromAddr(a)
	for i := range g {
		dst[i] = C.uint8_t(g[i])
	}
}

func routeToC(r *C.struct_srd_cm_route, d *cmDev, src, dst netip.AddrPort) {
	*r = C.struct_srd_cm_route{}
	if d != nil {
		r.verbs = d.cptr
	}
	addrToC(&r.src, src)
	if src.IsValid() && !src.Addr().IsUnspecified() {
		gidToC(&r.sgid, src.Addr())
	}
	if dst.IsValid() {
		gidToC(&r.dgid, dst.Addr())
	}
}

//export srdgo_cm_bind
func srdgo_cm_bind(h C.uintptr_t, a *C.struct_srd_cm_addr, r *C.struct_srd_cm_route) (ret C.int) {
	defer guard("rdma_bind_addr", &ret)
	id := idOf(h)
	ap, ok := addrFromC(a)
	if !ok {
		return C.EAFNOSUPPORT
	}
	var d *cmDev
	if !ap.Addr().IsUnspecified() {
		if d = devFor(ap.Addr()); d == nil {
			if logErrors {
				fmt.Fprintf(os.Stderr, "softrdma: rdma_bind_addr: no softrdma device has address %v (SOFTRDMA_ADDR names the device's address)\n", ap.Addr())
			}
			return C.EADDRNOTAVAIL
		}
	}
	id.mu.Lock()
	id.dev, id.local = d, ap
	id.mu.Unlock()
	routeToC(r, d, ap, netip.AddrPort{})
	return 0
}

// sourceFor picks the local address that reaches dst: the kernel's route
// choice (a connected UDP socket sends nothing), loopback for loopback.
func sourceFor(dst netip.Addr) (netip.Addr, error) {
	if dst.IsLoopback() {
		return dst, nil
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

//export srdgo_cm_resolve_addr
func srdgo_cm_resolve_addr(h C.uintptr_t, src, dst *C.struct_srd_cm_addr, r *C.struct_srd_cm_route) (ret C.int) {
	defer guard("rdma_resolve_addr", &ret)
	id := idOf(h)
	dap, ok := addrFromC(dst)
	if !ok {
		return C.EAFNOSUPPORT
	}
	id.mu.Lock()
	local, d := id.local, id.dev
	id.mu.Unlock()
	if sap, ok := addrFromC(src); ok && !sap.Addr().IsUnspecified() {
		local = sap
		d = nil
	}
	var err error
	if d == nil {
		if !local.IsValid() || local.Addr().IsUnspecified() {
			var a netip.Addr
			if a, err = sourceFor(dap.Addr()); err == nil {
				local = netip.AddrPortFrom(a, local.Port())
			}
		}
		if err == nil {
			if d = devFor(local.Addr()); d == nil {
				if ds := roceDevices(); len(ds) == 1 {
					d = &ds[0] // SOFTRDMA_ADDR named the one device
					if a := deviceAddr(d.vctx, dap.Addr()); a.IsValid() {
						local = netip.AddrPortFrom(a, local.Port())
					}
				} else {
					err = fmt.Errorf("no softrdma device has the address %v that reaches %v (SOFTRDMA_ADDR names the device's address)", local.Addr(), dap.Addr())
				}
			}
		}
	}
	if err != nil {
		if logErrors {
			fmt.Fprintf(os.Stderr, "softrdma: rdma_resolve_addr: %v\n", err)
		}
		id.post(&cmEvent{typ: C.RDMA_CM_EVENT_ADDR_ERROR, status: -int(C.EADDRNOTAVAIL)})
		return 0
	}
	id.mu.Lock()
	id.dev, id.local, id.remote = d, local, dap
	id.mu.Unlock()
	routeToC(r, d, local, dap)
	id.post(&cmEvent{typ: C.RDMA_CM_EVENT_ADDR_RESOLVED})
	return 0
}

// roceDevices returns the devices librdmacm opened that carry CM MADs
// over the network (not the shared-memory ones).
func roceDevices() []cmDev {
	var out []cmDev
	for _, d := range devices() {
		if _, ok := d.vctx.(verbs.ServiceDirectory); !ok {
			out = append(out, d)
		}
	}
	return out
}

// deviceAddr returns the device's first address of dst's family.
func deviceAddr(v verbs.Context, dst netip.Addr) netip.Addr {
	pa, err := v.QueryPort(1)
	if err != nil {
		return netip.Addr{}
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		g, err := v.QueryGID(1, i)
		if err != nil || g.IsZero() {
			continue
		}
		if a := g.Addr().Unmap(); a.Is4() == dst.Is4() && !a.IsLinkLocalUnicast() {
			return a
		}
	}
	return netip.Addr{}
}

//export srdgo_cm_resolve_route
func srdgo_cm_resolve_route(h C.uintptr_t) (ret C.int) {
	defer guard("rdma_resolve_route", &ret)
	id := idOf(h)
	id.mu.Lock()
	ok := id.dev != nil && id.remote.IsValid()
	id.routed = ok
	id.mu.Unlock()
	if !ok {
		return C.EINVAL
	}
	id.post(&cmEvent{typ: C.RDMA_CM_EVENT_ROUTE_RESOLVED})
	return 0
}

//export srdgo_cm_listen
func srdgo_cm_listen(h C.uintptr_t, backlog C.int, port *C.uint16_t) (ret C.int) {
	defer guard("rdma_listen", &ret)
	id := idOf(h)
	id.mu.Lock()
	local, d, busy := id.local, id.dev, len(id.listeners) > 0
	id.mu.Unlock()
	if busy {
		return C.EINVAL
	}
	if !local.IsValid() {
		local = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	var ds []cmDev
	if d != nil {
		ds = []cmDev{*d}
	} else {
		ds = roceDevices()
	}
	if len(ds) == 0 {
		return C.ENODEV
	}
	qpType := verbs.QPTypeRC
	if id.ps == cm.PortSpaceUDP {
		qpType = verbs.QPTypeUD
	}
	if backlog <= 0 {
		backlog = 1024
	}
	p := local.Port()
	var ls []*cm.Listener
	for _, dv := range ds {
		a := local.Addr()
		if a.IsUnspecified() {
			if a = deviceAddr(dv.vctx, a); !a.IsValid() {
				continue
			}
		}
		l, err := cm.Listen("rdma", netip.AddrPortFrom(a, p).String(), &cm.Options{Context: dv.vctx, QPType: qpType, Backlog: int(backlog)})
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			if errors.Is(err, verbs.ErrInUse) || errors.Is(err, syscall.EADDRINUSE) {
				return C.EADDRINUSE
			}
			return errnoOf("rdma_listen", err)
		}
		p = l.Addr().Port()
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return C.ENODEV
	}
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		for _, l := range ls {
			l.Close()
		}
		return C.EINVAL
	}
	id.listeners = ls
	id.local = netip.AddrPortFrom(local.Addr(), p)
	id.mu.Unlock()
	for _, l := range ls {
		go id.acceptLoop(l)
	}
	*port = C.uint16_t(p)
	return 0
}

// acceptLoop turns each connection request of l into a CONNECT_REQUEST
// event with a new id.
func (id *cmID) acceptLoop(l *cm.Listener) {
	for {
		req, err := l.Accept(context.Background())
		if err != nil {
			return
		}
		d := devOf(req.Context())
		if d == nil {
			req.Reject(nil)
			continue
		}
		child := &cmID{ps: id.ps, qpType: req.QPType, dev: d, local: req.Local, remote: req.Remote, req: req, routed: true}
		id.mu.Lock()
		child.fd = id.fd
		id.mu.Unlock()
		child.live(true)
		ev := &cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_REQUEST, child: child, pdata: req.PrivateData}
		if req.QPType == verbs.QPTypeUD {
			ev.ud = true
		} else {
			child.attrs, ev.qpn = req, req.Req.LocalQPN
			ev.respRes, ev.initDepth = req.Req.ResponderResources, req.Req.InitiatorDepth
			ev.retry, ev.rnr = req.Req.RetryCount, req.Req.RNRRetryCount
		}
		id.post(ev)
	}
}

// qpOf returns the Go QP behind a C QP of this library.
func qpOf(qp *C.struct_ibv_qp) *qpObj {
	return handle.Handle(C.srd_cm_qp_handle(qp)).Value().(*qpObj)
}

func pdataOf(p *C.struct_rdma_conn_param) []byte {
	if p == nil || p.private_data == nil || p.private_data_len == 0 {
		return nil
	}
	return C.GoBytes(p.private_data, C.int(p.private_data_len))
}

// connError turns a failed Dial or Accept into the event rdma_cm gives.
func connError(err error) *cmEvent {
	var rej *cm.RejectError
	var sidr *cm.SIDRError
	switch {
	case errors.As(err, &rej):
		return &cmEvent{typ: C.RDMA_CM_EVENT_REJECTED, status: int(rej.Reason), pdata: rej.PrivateData}
	case errors.As(err, &sidr):
		// The kernel's rdma_cm reports the SIDR_REP's status (1: nobody
		// listens on the port).
		return &cmEvent{typ: C.RDMA_CM_EVENT_UNREACHABLE, status: int(sidr.Status), pdata: sidr.PrivateData}
	case errors.Is(err, cm.ErrTimeout):
		return &cmEvent{typ: C.RDMA_CM_EVENT_UNREACHABLE, status: -int(C.ETIMEDOUT)}
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, cm.ErrUnreachable):
		return &cmEvent{typ: C.RDMA_CM_EVENT_UNREACHABLE, status: -int(C.EHOSTUNREACH)}
	}
	return &cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_ERROR, status: -int(errnoOf("rdma_cm", err))}
}

// established posts ESTABLISHED for a connection and watches it for the
// DISCONNECTED event.
func (id *cmID) established(c *cm.Conn, active bool) {
	ev := &cmEvent{typ: C.RDMA_CM_EVENT_ESTABLISHED, respRes: c.ResponderResources, initDepth: c.InitiatorDepth}
	if active {
		ev.pdata = c.PeerPrivateData
	}
	if c.AH != nil { // UD: the peer's QPN, Q_Key and address
		ev.ud, ev.qpn, ev.qkey = true, c.RemoteQPN, c.RemoteQKey
		id.mu.Lock()
		remote, d := id.remote, id.dev
		id.mu.Unlock()
		ev.dgid = verbs.GIDFromAddr(remote.Addr())
		if d != nil {
			if i := gidIndexOf(d.vctx, id.local.Addr()); i >= 0 {
				ev.sgidIndex = uint8(i)
			}
		}
		id.post(ev)
		return
	}
	id.post(ev)
	id.watch(c)
}

// watch posts DISCONNECTED when c ends.
func (id *cmID) watch(c *cm.Conn) {
	go func() {
		<-c.Done()
		id.disconnected()
	}()
}

func (id *cmID) disconnected() {
	id.mu.Lock()
	sent := id.discSent
	id.discSent = true
	id.mu.Unlock()
	if !sent {
		id.post(&cmEvent{typ: C.RDMA_CM_EVENT_DISCONNECTED})
	}
}

//export srdgo_cm_connect
func srdgo_cm_connect(h C.uintptr_t, qp *C.struct_ibv_qp, p *C.struct_rdma_conn_param) (ret C.int) {
	defer guard("rdma_connect", &ret)
	id := idOf(h)
	id.mu.Lock()
	d, remote, routed, busy := id.dev, id.remote, id.routed, id.conn != nil || id.cancel != nil
	id.mu.Unlock()
	if !routed || d == nil || busy {
		return C.EINVAL
	}
	if qp == nil {
		return id.connectOwn(d, remote, p) // cm_ownqp.go
	}
	q := qpOf(qp)
	o := id.options(d, p)
	o.QP, o.PD, o.QPType = q.qp, q.pd.pd, q.typ
	id.background(func(ctx context.Context) {
		c, err := dialGrace(ctx, func() (*cm.Conn, error) { return cm.Dial(ctx, "rdma", remote.String(), o) })
		id.finish("rdma_connect", c, err, true)
	})
	return 0
}

// background runs a connect or accept in a goroutine, with a context
// that destroying the id cancels.
func (id *cmID) background(run func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	id.mu.Lock()
	id.cancel = cancel
	id.mu.Unlock()
	go func() {
		defer cancel()
		run(ctx)
	}()
}

// options are the cm options of a connect: the device, the program's
// connection parameters and the id's rdma_set_option values.
func (id *cmID) options(d *cmDev, p *C.struct_rdma_conn_param) *cm.Options {
	id.mu.Lock()
	o := &cm.Options{Context: d.vctx, PrivateData: pdataOf(p), TrafficClass: id.tos, ACKTimeout: id.ackTimeout}
	id.mu.Unlock()
	if p != nil {
		o.ResponderResources, o.InitiatorDepth = uint8(p.responder_resources), uint8(p.initiator_depth)
		o.RetryCount, o.RNRRetryCount = uint8(p.retry_count), uint8(p.rnr_retry_count)
		// rdma_cm's 0 means none; cm's 0 means the default.
		if o.ResponderResources == 0 {
			o.ResponderResources = 1
		}
		if o.InitiatorDepth == 0 {
			o.InitiatorDepth = 1
		}
	}
	return o
}

// listenGrace is how long rdma_connect keeps asking a peer that answers
// "nobody listens on that port" (REJ reason 8, SIDR status 1) before it
// reports it. Programs start a connection right after telling their peer
// to listen (perftest -R's client connects as soon as an exchange that
// precedes its server's rdma_listen is done); a peer that listens within
// the grace connects, one that does not is reported a second later than
// the kernel's rdma_cm would.
const listenGrace = time.Second

func dialGrace[T any](ctx context.Context, dial func() (T, error)) (T, error) {
	deadline := time.Now().Add(listenGrace)
	for {
		c, err := dial()
		var rej *cm.RejectError
		var sidr *cm.SIDRError
		nobody := (errors.As(err, &rej) && rej.Reason == wire.RejInvalidServiceID) ||
			(errors.As(err, &sidr) && sidr.Status == wire.SIDRUnsupportedService)
		if !nobody || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

//export srdgo_cm_accept
func srdgo_cm_accept(h C.uintptr_t, qp *C.struct_ibv_qp, p *C.struct_rdma_conn_param) (ret C.int) {
	defer guard("rdma_accept", &ret)
	id := idOf(h)
	id.mu.Lock()
	req, d := id.req, id.dev
	id.req = nil
	id.mu.Unlock()
	if req == nil || d == nil {
		return C.EINVAL
	}
	if qp == nil {
		return id.acceptOwn(req, d, p) // cm_ownqp.go
	}
	id.mu.Lock()
	id.attrs = nil // cm moves this QP: its attributes are cm's own
	id.mu.Unlock()
	q := qpOf(qp)
	o := id.acceptOptions(d, p)
	o.QP, o.PD = q.qp, q.pd.pd
	if req.QPType == verbs.QPTypeUD {
		c, err := req.Accept(context.Background(), o)
		if err != nil {
			return errnoOf("rdma_accept", err)
		}
		id.mu.Lock()
		id.conn = c
		id.mu.Unlock()
		return 0
	}
	done := make(chan error, 1)
	id.background(func(ctx context.Context) {
		c, err := req.Accept(ctx, o)
		id.finish("rdma_accept", c, err, false, done)
	})
	// rdma_accept returns with the QP in RTS, as librdmacm's does (it
	// moves the QP before sending the REP): the program may post sends
	// at once. The REP's answer (RTU) comes later, as ESTABLISHED.
	for {
		select {
		case err := <-done:
			if err != nil {
				return errnoOf("rdma_accept", err)
			}
			return 0
		case <-time.After(50 * time.Microsecond):
		}
		if q.qp.State() == verbs.QPStateRTS {
			return 0
		}
	}
}

// acceptOptions are the cm options of an accept: the device, the
// program's connection parameters, the id's ACK timeout.
func (id *cmID) acceptOptions(d *cmDev, p *C.struct_rdma_conn_param) *cm.Options {
	id.mu.Lock()
	o := &cm.Options{Context: d.vctx, PrivateData: pdataOf(p), ACKTimeout: id.ackTimeout}
	id.mu.Unlock()
	if p != nil {
		o.ResponderResources, o.InitiatorDepth = max(uint8(p.responder_resources), 1), max(uint8(p.initiator_depth), 1)
		o.RNRRetryCount = uint8(p.rnr_retry_count)
	}
	return o
}

//export srdgo_cm_reject
func srdgo_cm_reject(h C.uintptr_t, pdata unsafe.Pointer, n C.int) (ret C.int) {
	defer guard("rdma_reject", &ret)
	id := idOf(h)
	id.mu.Lock()
	req := id.req
	id.req = nil
	id.mu.Unlock()
	if req == nil {
		return C.EINVAL
	}
	var b []byte
	if pdata != nil && n > 0 {
		b = C.GoBytes(pdata, n)
	}
	if err := req.Reject(b); err != nil {
		return errnoOf("rdma_reject", err)
	}
	return 0
}

//export srdgo_cm_disconnect
func srdgo_cm_disconnect(h C.uintptr_t) (ret C.int) {
	defer guard("rdma_disconnect", &ret)
	id := idOf(h)
	id.mu.Lock()
	c := id.conn
	id.mu.Unlock()
	if c == nil {
		return C.EINVAL
	}
	c.Close()
	return 0
}

//export srdgo_cm_event
func srdgo_cm_event(evh C.uintptr_t, info *C.struct_srd_cm_evinfo) (ret C.int) {
	defer guard("rdma_get_cm_event", &ret)
	ev := handle.Handle(evh).Value().(*cmEvent)
	handle.Handle(evh).Delete()
	id := ev.id
	id.mu.Lock()
	gone, cptr := id.destroyed, id.cptr
	id.mu.Unlock()
	if gone {
		if ev.child != nil {
			if ev.child.req != nil {
				ev.child.req.Reject(nil)
			}
			ev.child.live(false)
		}
		return C.ENOENT
	}
	*info = C.struct_srd_cm_evinfo{}
	info.id = cptr
	info.event = ev.typ
	info.status = C.int(ev.status)
	if c := ev.child; c != nil {
		info.child = C.uintptr_t(handle.New(c))
		info.verbs = c.dev.cptr
		addrToC(&info.src, c.local)
		addrToC(&info.dst, c.remote)
		info.port_num = 1
	}
	info.responder_resources = C.uint8_t(ev.respRes)
	info.initiator_depth = C.uint8_t(ev.initDepth)
	info.retry_count = C.uint8_t(ev.retry)
	info.rnr_retry_count = C.uint8_t(ev.rnr)
	info.qp_num = C.uint32_t(ev.qpn)
	if ev.ud {
		info.ud = 1
		info.qkey = C.uint32_t(ev.qkey)
		for i := range ev.dgid {
			info.dgid[i] = C.uint8_t(ev.dgid[i])
		}
		info.sgid_index, info.hop_limit, info.port_num = C.uint8_t(ev.sgidIndex), 64, 1
	}
	n := min(len(ev.pdata), C.SRD_CM_PDATA_MAX, 255)
	for i := 0; i < n; i++ {
		info.pdata[i] = C.uint8_t(ev.pdata[i])
	}
	info.pdata_len = C.uint8_t(n)
	return 0
}

// finish ends a connect or accept that ran in the background: the id
// takes the connection, or, if the program destroyed the id meanwhile,
// the connection is closed; an error becomes the id's failure event and
// success its ESTABLISHED. done, if given, learns the result before any
// event is posted (rdma_accept waits for it).
func (id *cmID) finish(op string, c *cm.Conn, err error, active bool, done ...chan<- error) {
	id.mu.Lock()
	id.cancel = nil
	gone := id.destroyed
	if err == nil && !gone {
		id.conn = c
	}
	id.mu.Unlock()
	for _, d := range done {
		d <- err
	}
	if gone {
		if c != nil {
			c.Close()
		}
		return
	}
	if err != nil {
		if logErrors {
			fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", op, err)
		}
		id.post(connError(err))
		return
	}
	id.established(c, active)
}
