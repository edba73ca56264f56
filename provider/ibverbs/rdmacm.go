//go:build ibverbs && cgo && linux

package ibverbs

// Connection management through librdmacm (verbs.KernelCM). The kernel
// owns QP1 of a kernel device, so its CM exchange is the kernel's: an
// rdma_cm ID per connection, each with its own event channel whose file
// descriptor waits in Go's netpoller:
//
//	CMDial ──▶ rdma_create_id ─▶ resolve_addr ─▶ resolve_route ─▶ QP INIT ─▶ rdma_connect (REQ / SIDR_REQ)
//	      ◀── ESTABLISHED (UD: the peer's QPN, Q_Key, AH) or CONNECT_RESPONSE ─▶ QP RTR, RTS ─▶ rdma_establish (RTU)
//	CMListen ─▶ rdma_bind_addr ─▶ rdma_listen ◀── CONNECT_REQUEST: the new ID moves to its own channel
//	Accept ─▶ QP INIT, RTR, RTS ─▶ rdma_accept (REP / SIDR_REP) ◀── ESTABLISHED (RTU)
//
// The QP is the caller's, created by this provider on any of its PDs:
// librdmacm's rdma_create_qp would need the PD to be on librdmacm's own
// ibv_context of the device, which a Context opened by Open is not. The
// attributes of each transition come from the kernel (rdma_init_qp_attr),
// exactly as rdma_create_qp's QPs get them, and the QPN goes into the
// connection parameters, as librdmacm does for QPs it did not create.

/*
#cgo LDFLAGS: -lrdmacm
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

int sr_nonblock_dup(int fd);

struct sr_cm_event {
	int event;
	int status;
	struct rdma_cm_id *id;
	struct rdma_event_channel *newch;
	uint8_t private_data[256];
	uint32_t private_len;
	uint8_t resp_res, init_depth, retry, rnr;
	uint32_t qp_num, qkey;
	struct ibv_ah_attr ah_attr;
};

static void sr_sa(struct sockaddr_storage *ss, const uint8_t *ip, int is4, uint16_t port) {
	memset(ss, 0, sizeof *ss);
	if (is4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip + 12, 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
	}
}

// sr_sa_get writes sa's address as 16 bytes (IPv4 mapped) and its port;
// it returns 4, 6 or 0 (no address).
static int sr_sa_get(struct sockaddr *sa, uint8_t *ip, uint16_t *port) {
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memset(ip, 0, 10);
		ip[10] = ip[11] = 0xff;
		memcpy(ip + 12, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 6;
	}
	return 0;
}

static int sr_cm_local(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port) {
	return sr_sa_get(rdma_get_local_addr(id), ip, port);
}

static int sr_cm_peer(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port) {
	return sr_sa_get(rdma_get_peer_addr(id), ip, port);
}

// sr_cm_channel creates an event channel and a non-blocking duplicate of
// its descriptor for Go's netpoller (*fd).
static struct rdma_event_channel *sr_cm_channel(int *fd) {
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return NULL;
	*fd = sr_nonblock_dup(ch->fd);
	if (*fd < 0) {
		rdma_destroy_event_channel(ch);
		return NULL;
	}
	return ch;
}

static int sr_cm_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, int ps, int udp) {
	return rdma_create_id(ch, id, NULL, udp ? RDMA_PS_UDP : RDMA_PS_TCP);
}

static int sr_cm_resolve_addr(struct rdma_cm_id *id, const uint8_t *src, int has_src,
		const uint8_t *dst, int is4, uint16_t port, int ms) {
	struct sockaddr_storage s, d;
	if (has_src)
		sr_sa(&s, src, is4, 0);
	sr_sa(&d, dst, is4, port);
	return rdma_resolve_addr(id, has_src ? (struct sockaddr *)&s : NULL, (struct sockaddr *)&d, ms);
}

static int sr_cm_bind_listen(struct rdma_cm_id *id, const uint8_t *ip, int is4, uint16_t port, int backlog) {
	struct sockaddr_storage s;
	sr_sa(&s, ip, is4, port);
	if (rdma_bind_addr(id, (struct sockaddr *)&s))
		return -1;
	return rdma_listen(id, backlog);
}

static const char *sr_cm_devname(struct rdma_cm_id *id) {
	return id->verbs ? ibv_get_device_name(id->verbs->device) : NULL;
}

static int sr_cm_port(struct rdma_cm_id *id) { return id->port_num; }

// sr_cm_get_event takes one event off a non-blocking channel, copies
// what Go needs and acks it: 1 if there was one, 0 if none, -1 on error.
// A connection request's new ID moves to a channel of its own here, so
// its later events reach its own reader.
static int sr_cm_get_event(struct rdma_event_channel *ch, struct sr_cm_event *o) {
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return errno == EAGAIN ? 0 : -1;
	memset(o, 0, sizeof *o);
	o->event = e->event;
	o->status = e->status;
	o->id = e->id;
	const void *pd = NULL;
	uint8_t len = 0;
	if (e->id && e->id->ps == RDMA_PS_UDP) {
		pd = e->param.ud.private_data;
		len = e->param.ud.private_data_len;
		o->qp_num = e->param.ud.qp_num;
		o->qkey = e->param.ud.qkey;
		o->ah_attr = e->param.ud.ah_attr;
	} else {
		pd = e->param.conn.private_data;
		len = e->param.conn.private_data_len;
		o->resp_res = e->param.conn.responder_resources;
		o->init_depth = e->param.conn.initiator_depth;
		o->retry = e->param.conn.retry_count;
		o->rnr = e->param.conn.rnr_retry_count;
	}
	if (pd && len) {
		memcpy(o->private_data, pd, len);
		o->private_len = len;
	}
	int ev = e->event;
	struct rdma_cm_id *id = e->id;
	rdma_ack_cm_event(e);
	if (ev == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct rdma_event_channel *nc = rdma_create_event_channel();
		if (!nc || rdma_migrate_id(id, nc)) {
			if (nc)
				rdma_destroy_event_channel(nc);
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			o->event = -1;
			return 1;
		}
		o->newch = nc;
	}
	return 1;
}

// sr_cm_modify moves qp to state with the attributes the kernel's CM
// gives for the ID (rdma_init_qp_attr), as librdmacm does for the QPs it
// creates; access (INIT) replaces the access flags when not 0. A UD QP
// takes the kernel's attributes for INIT only, then RTR and RTS from PSN
// 0, as librdmacm's ucma_init_ud_qp. Returns 0 or an errno.
static int sr_cm_modify(struct rdma_cm_id *id, struct ibv_qp *qp, int state, int access) {
	struct ibv_qp_attr a;
	int mask;
	memset(&a, 0, sizeof a);
	a.qp_state = state;
	if (qp->qp_type == IBV_QPT_UD && state != IBV_QPS_INIT) {
		mask = IBV_QP_STATE;
		if (state == IBV_QPS_RTS) {
			a.sq_psn = 0;
			mask |= IBV_QP_SQ_PSN;
		}
		return ibv_modify_qp(qp, &a, mask);
	}
	if (rdma_init_qp_attr(id, &a, &mask))
		return errno;
	if (state == IBV_QPS_INIT && access && (mask & IBV_QP_ACCESS_FLAGS))
		a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, mask);
}

static int sr_cm_connect(struct rdma_cm_id *id, const void *pd, int len, int rr, int idp,
		int retry, int rnr, uint32_t qpn, int srq, int accept) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = pd;
	p.private_data_len = len;
	p.responder_resources = rr;
	p.initiator_depth = idp;
	p.retry_count = retry;
	p.rnr_retry_count = rnr;
	p.qp_num = qpn;
	p.srq = srq;
	return accept ? rdma_accept(id, &p) : rdma_connect(id, &p);
}
*/
import "C"

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

var _ verbs.KernelCM = (*Context)(nil)

// errCMClosed: the ID was closed while waiting.
var errCMClosed = errors.New("rdma_cm: the ID was closed")

// resolveTimeout bounds address and route resolution, as rping's 2 s.
const resolveTimeout = 2000

// NetDevice returns the network interface of the device's port 1 (the
// netdev of its first GID; RoCE, iWARP), or "" if it has none. Package
// cm uses it to find the kernel device that has an address.
func (d *Device) NetDevice() string {
	b, err := os.ReadFile("/sys/class/infiniband/" + d.name + "/ports/1/gid_attrs/ndevs/0")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cmEvent is one rdma_cm event, copied out of librdmacm.
type cmEvent struct {
	typ, status int
	id          *C.struct_rdma_cm_id
	newch       *C.struct_rdma_event_channel
	private     []byte
	rr, depth   uint8
	retry, rnr  uint8
	qpn, qkey   uint32
	ah          verbs.AHAttr
}

// cmID is one rdma_cm ID with an event channel of its own, read by a
// goroutine that waits in the netpoller and queues the events on ev.
type cmID struct {
	c    *Context
	id   *C.struct_rdma_cm_id
	ch   *C.struct_rdma_event_channel
	file *os.File
	ev   chan cmEvent
	quit chan struct{} // closed by close: the reader stops queueing
	loop chan struct{} // closed when the reader has returned
	once sync.Once
}

// newCMChannel creates an event channel and, if id is nil, an ID of the
// port space of qpType on it; else id (already on ch) is adopted.
func (c *Context) newCMID(op string, id *C.struct_rdma_cm_id, ch *C.struct_rdma_event_channel, qpType verbs.QPType) (*cmID, error) {
	var fd C.int = -1
	if ch == nil {
		var err error
		ch, err = C.sr_cm_channel(&fd)
		if ch == nil {
			return nil, errnoErr(op, err, "rdma_create_event_channel (is the rdma_ucm module loaded?)")
		}
	} else {
		fd = C.sr_nonblock_dup(ch.fd)
		if fd < 0 {
			C.rdma_destroy_id(id)
			C.rdma_destroy_event_channel(ch)
			return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "cannot make the event channel non-blocking")
		}
	}
	if id == nil {
		udp := C.int(0)
		if qpType == verbs.QPTypeUD {
			udp = 1
		}
		if r, err := C.sr_cm_create_id(ch, &id, 0, udp); r != 0 {
			C.close(fd)
			C.rdma_destroy_event_channel(ch)
			return nil, errnoErr(op, err, "rdma_create_id")
		}
	}
	m := &cmID{c: c, id: id, ch: ch, file: os.NewFile(uintptr(fd), "rdma-cm"),
		ev: make(chan cmEvent, 16), quit: make(chan struct{}), loop: make(chan struct{})}
	raw, err := m.file.SyscallConn()
	if err != nil {
		close(m.loop)
		m.close()
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "event channel: %v", err)
	}
	go m.read(raw)
	return m, nil
}

// read queues the channel's events until the ID is closed.
func (m *cmID) read(raw syscall.RawConn) {
	defer close(m.loop)
	var e C.struct_sr_cm_event
	for {
		got := 0
		err := raw.Read(func(uintptr) bool {
			got = int(C.sr_cm_get_event(m.ch, &e))
			return got != 0
		})
		if err != nil || got < 0 {
			return
		}
		if e.event < 0 {
			continue // a request whose ID could not get a channel: rejected in C
		}
		ev := cmEvent{typ: int(e.event), status: int(e.status), id: e.id, newch: e.newch,
			private: C.GoBytes(unsafe.Pointer(&e.private_data[0]), C.int(e.private_len)),
			rr:      uint8(e.resp_res), depth: uint8(e.init_depth), retry: uint8(e.retry), rnr: uint8(e.rnr),
			qpn: uint32(e.qp_num), qkey: uint32(e.qkey)}
		if e.ah_attr.is_global != 0 || e.ah_attr.dlid != 0 {
			ev.ah = ahAttrFromC(&e.ah_attr)
		}
		select {
		case m.ev <- ev:
		case <-m.quit:
			if ev.newch != nil { // a request nobody will take
				C.rdma_reject(ev.id, nil, 0)
				C.rdma_destroy_id(ev.id)
				C.rdma_destroy_event_channel(ev.newch)
			}
			return
		}
	}
}

// close stops the reader and destroys the ID and its channel. A
// connected RC ID sends its DREQ as the kernel destroys it.
func (m *cmID) close() {
	m.once.Do(func() {
		close(m.quit)
		m.file.Close() // waits for a read in progress
		<-m.loop
		C.rdma_destroy_id(m.id)
		C.rdma_destroy_event_channel(m.ch)
	})
}

// wait returns the next event, or ctx's error.
func (m *cmID) wait(ctx context.Context) (cmEvent, error) {
	select {
	case ev := <-m.ev:
		return ev, nil
	case <-ctx.Done():
		return cmEvent{}, ctx.Err()
	case <-m.quit:
		return cmEvent{}, errCMClosed
	}
}

// expect waits for the event want; any other ends the exchange with the
// error it means.
func (m *cmID) expect(ctx context.Context, op string, want C.enum_rdma_cm_event_type) (cmEvent, error) {
	ev, err := m.wait(ctx)
	if err != nil {
		return ev, err
	}
	if ev.typ == int(want) {
		return ev, nil
	}
	return ev, eventErr(op, ev, m.id.ps == C.RDMA_PS_UDP)
}

// eventErr is the error an unexpected event means.
func eventErr(op string, ev cmEvent, ud bool) error {
	name := C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(ev.typ)))
	switch ev.typ {
	case C.RDMA_CM_EVENT_REJECTED:
		return &verbs.CMRejectError{Reason: uint16(ev.status), UD: ud, PrivateData: ev.private}
	case C.RDMA_CM_EVENT_ADDR_ERROR, C.RDMA_CM_EVENT_ROUTE_ERROR:
		return verbs.Errorf(op, verbs.ErrNotFound, "%s (status %d): the address is not reachable through a kernel RDMA device", name, ev.status)
	case C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_CONNECT_ERROR:
		if ud && ev.status != 0 && ev.status != -int(syscall.ETIMEDOUT) {
			return &verbs.CMRejectError{Reason: uint16(ev.status), UD: true, PrivateData: ev.private}
		}
		return verbs.Errorf(op, context.DeadlineExceeded, "%s (status %d): the peer did not answer", name, ev.status)
	}
	return verbs.Errorf(op, verbs.ErrInvalidState, "unexpected rdma_cm event %s (status %d)", name, ev.status)
}

// addrOf reads an address C wrote as 16 bytes and a port.
func addrOf(fam C.int, ip *[16]byte, port C.uint16_t) netip.AddrPort {
	if fam == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(netip.AddrFrom16(*ip).Unmap(), uint16(port))
}

func (m *cmID) addrs() (local, remote netip.AddrPort) {
	var ip [16]byte
	var port C.uint16_t
	fam := C.sr_cm_local(m.id, (*C.uint8_t)(&ip[0]), &port)
	local = addrOf(fam, &ip, port)
	fam = C.sr_cm_peer(m.id, (*C.uint8_t)(&ip[0]), &port)
	return local, addrOf(fam, &ip, port)
}

// kernelQP checks that p's QP is this device's and in RESET.
func (c *Context) kernelQP(op string, p *verbs.CMParams) (*QP, error) {
	qp, ok := p.QP.(*QP)
	if !ok || qp.ctx.dev.name != c.dev.name {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "the QP must be one of kernel device %s's (provider/ibverbs)", c.dev.name)
	}
	if p.QPType == verbs.QPTypeUD {
		if _, ok := p.PD.(*PD); !ok {
			return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "a UD connection needs the PD for the peer's AH, one of device %s's", c.dev.name)
		}
	}
	if st := qp.State(); st != verbs.QPStateReset && st != verbs.QPStateInit {
		return nil, verbs.Errorf(op, verbs.ErrInvalidState, "the QP is in %v; the kernel's CM takes it from RESET or INIT", st)
	}
	return qp, nil
}

// onDevice checks that the ID resolved to this device.
func (c *Context) onDevice(op string, m *cmID) error {
	name := C.sr_cm_devname(m.id)
	if name == nil {
		return verbs.Errorf(op, verbs.ErrNotFound, "the address is not on any kernel RDMA device")
	}
	if got := C.GoString(name); got != c.dev.name {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "the address is reached through kernel device %s, not %s: open that one", got, c.dev.name)
	}
	return nil
}

// modify moves qp to state with the kernel's attributes for m.
func (m *cmID) modify(op string, qp *QP, state verbs.QPState, access verbs.Access) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if r := C.sr_cm_modify(m.id, qp.qp, C.int(state), C.int(access&0xf)); r != 0 {
		return errnoCode(op, int(r), "ibv_modify_qp to "+state.String()+" with rdma_init_qp_attr's attributes")
	}
	qp.state.Store(uint32(state))
	return nil
}

// depths returns the READ/atomic depths to offer: p's, or the device's
// maximum (at most 16) where p says 0, as package cm offers them.
func (c *Context) depths(p *verbs.CMParams) (rr, depth uint8) {
	pick := func(v uint8, dev int) uint8 {
		if v == 0 || int(v) > dev {
			return uint8(max(1, min(dev, 16)))
		}
		return v
	}
	return pick(p.ResponderResources, c.attr.MaxQPRdAtom), pick(p.InitiatorDepth, c.attr.MaxQPInitRdAtom)
}

func (m *cmID) connect(op string, qp *QP, p *verbs.CMParams, rr, depth uint8, accept bool) error {
	var pd unsafe.Pointer
	if len(p.PrivateData) > 0 {
		pd = C.CBytes(p.PrivateData)
		defer C.free(pd)
	}
	srq := C.int(0)
	if qp.srq != nil {
		srq = 1
	}
	what := "rdma_connect"
	if accept {
		what = "rdma_accept"
	}
	r, err := C.sr_cm_connect(m.id, pd, C.int(len(p.PrivateData)), C.int(rr), C.int(depth),
		C.int(p.RetryCount), C.int(p.RNRRetryCount), C.uint32_t(qp.num), srq, boolC(accept))
	if r != 0 {
		return errnoErr(op, err, what)
	}
	return nil
}

func boolC(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// CMDial connects p.QP to the rdma_cm listener at p.Dst through
// librdmacm (verbs.KernelCM).
func (c *Context) CMDial(ctx context.Context, p *verbs.CMParams) (verbs.CMConn, error) {
	const op = "rdma_cm.Dial"
	if err := c.check(op); err != nil {
		return nil, err
	}
	qp, err := c.kernelQP(op, p)
	if err != nil {
		return nil, err
	}
	m, err := c.newCMID(op, nil, nil, p.QPType)
	if err != nil {
		return nil, err
	}
	conn, err := c.dial(ctx, op, m, qp, p)
	if err != nil {
		m.close()
		return nil, err
	}
	return conn, nil
}

func (c *Context) dial(ctx context.Context, op string, m *cmID, qp *QP, p *verbs.CMParams) (*cmConn, error) {
	dst := p.Dst.Addr().As16()
	src := p.Src.Addr().As16()
	is4 := boolC(p.Dst.Addr().Is4())
	if r, err := C.sr_cm_resolve_addr(m.id, (*C.uint8_t)(&src[0]), boolC(p.Src.Addr().IsValid() && p.Src.Addr().Is4() == p.Dst.Addr().Is4()),
		(*C.uint8_t)(&dst[0]), is4, C.uint16_t(p.Dst.Port()), resolveTimeout); r != 0 {
		return nil, errnoErr(op, err, "rdma_resolve_addr "+p.Dst.String())
	}
	if _, err := m.expect(ctx, op, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return nil, err
	}
	if err := c.onDevice(op, m); err != nil {
		return nil, err
	}
	if r, err := C.rdma_resolve_route(m.id, resolveTimeout); r != 0 {
		return nil, errnoErr(op, err, "rdma_resolve_route")
	}
	if _, err := m.expect(ctx, op, C.RDMA_CM_EVENT_ROUTE_RESOLVED); err != nil {
		return nil, err
	}
	if err := m.modify(op, qp, verbs.QPStateInit, p.Access); err != nil {
		return nil, err
	}
	rr, depth := c.depths(p)
	if p.QPType == verbs.QPTypeUD {
		rr, depth = 0, 0
	}
	if err := m.connect(op, qp, p, rr, depth, false); err != nil {
		return nil, err
	}
	conn := &cmConn{m: m, done: make(chan struct{})}
	if p.QPType == verbs.QPTypeUD {
		ev, err := m.expect(ctx, op, C.RDMA_CM_EVENT_ESTABLISHED)
		if err != nil {
			return nil, err
		}
		if err := m.modify(op, qp, verbs.QPStateRTR, 0); err != nil {
			return nil, err
		}
		if err := m.modify(op, qp, verbs.QPStateRTS, 0); err != nil {
			return nil, err
		}
		ah, err := p.PD.CreateAH(&ev.ah)
		if err != nil {
			return nil, err
		}
		conn.info = verbs.CMConnInfo{PrivateData: ev.private, RemoteQPN: ev.qpn, RemoteQKey: ev.qkey, AH: ah}
	} else {
		ev, err := m.expect(ctx, op, C.RDMA_CM_EVENT_CONNECT_RESPONSE)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				C.rdma_reject(m.id, nil, 0)
			}
			return nil, err
		}
		if err := m.modify(op, qp, verbs.QPStateRTR, 0); err != nil {
			C.rdma_reject(m.id, nil, 0)
			return nil, err
		}
		if err := m.modify(op, qp, verbs.QPStateRTS, 0); err != nil {
			C.rdma_reject(m.id, nil, 0)
			return nil, err
		}
		if r, err := C.rdma_establish(m.id); r != 0 {
			return nil, errnoErr(op, err, "rdma_establish (the RTU)")
		}
		conn.info = verbs.CMConnInfo{PrivateData: ev.private,
			ResponderResources: min(rr, ev.depth), InitiatorDepth: min(depth, ev.rr)}
	}
	conn.info.Local, conn.info.Remote = m.addrs()
	conn.ud = p.QPType == verbs.QPTypeUD
	go conn.watch()
	return conn, nil
}

// cmConn is a connected ID (verbs.CMConn).
type cmConn struct {
	m    *cmID
	info verbs.CMConnInfo
	ud   bool
	done chan struct{}
	once sync.Once
}

func (k *cmConn) Info() verbs.CMConnInfo { return k.info }
func (k *cmConn) Done() <-chan struct{}  { return k.done }

// watch ends the connection at the peer's DREQ or a device removal.
func (k *cmConn) watch() {
	for {
		ev, err := k.m.wait(context.Background())
		if err != nil {
			return
		}
		switch ev.typ {
		case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL, C.RDMA_CM_EVENT_TIMEWAIT_EXIT:
			k.once.Do(func() { close(k.done) })
		}
	}
}

// Close disconnects and destroys the ID (the QP is the caller's).
func (k *cmConn) Close() error {
	if !k.ud {
		C.rdma_disconnect(k.m.id)
	}
	k.once.Do(func() { close(k.done) })
	k.m.close()
	return nil
}

// CMListen listens on addr through librdmacm (verbs.KernelCM).
func (c *Context) CMListen(addr netip.AddrPort, qpType verbs.QPType, backlog int) (verbs.CMListener, error) {
	const op = "rdma_cm.Listen"
	if err := c.check(op); err != nil {
		return nil, err
	}
	m, err := c.newCMID(op, nil, nil, qpType)
	if err != nil {
		return nil, err
	}
	ip := addr.Addr().As16()
	if r, err := C.sr_cm_bind_listen(m.id, (*C.uint8_t)(&ip[0]), boolC(addr.Addr().Is4()), C.uint16_t(addr.Port()), C.int(max(backlog, 1))); r != 0 {
		m.close()
		return nil, errnoErr(op, err, "rdma_bind_addr and rdma_listen on "+addr.String())
	}
	if !addr.Addr().IsUnspecified() {
		if err := c.onDevice(op, m); err != nil {
			m.close()
			return nil, err
		}
	}
	local, _ := m.addrs()
	if !local.IsValid() {
		local = addr
	}
	return &cmListener{c: c, m: m, addr: local, qpType: qpType}, nil
}

// cmListener is a listening ID (verbs.CMListener).
type cmListener struct {
	c      *Context
	m      *cmID
	addr   netip.AddrPort
	qpType verbs.QPType
}

func (l *cmListener) Addr() netip.AddrPort { return l.addr }
func (l *cmListener) Close() error         { l.m.close(); return nil }

// Accept returns the next connection request.
func (l *cmListener) Accept(ctx context.Context) (verbs.CMRequest, error) {
	for {
		ev, err := l.m.wait(ctx)
		if err != nil {
			return nil, err
		}
		if ev.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST || ev.newch == nil {
			continue
		}
		m, err := l.c.newCMID("rdma_cm.Accept", ev.id, ev.newch, l.qpType)
		if err != nil {
			continue // newCMID destroyed the ID: the peer times out
		}
		r := &cmRequest{c: l.c, m: m}
		r.info = verbs.CMRequestInfo{QPType: l.qpType, PrivateData: ev.private,
			ResponderResources: ev.rr, InitiatorDepth: ev.depth, RetryCount: ev.retry, RNRRetryCount: ev.rnr,
			Port: uint8(C.sr_cm_port(m.id))}
		r.info.Local, r.info.Remote = m.addrs()
		return r, nil
	}
}

// cmRequest is a connection request (verbs.CMRequest).
type cmRequest struct {
	c        *Context
	m        *cmID
	info     verbs.CMRequestInfo
	answered bool
	mu       sync.Mutex
}

func (r *cmRequest) Info() verbs.CMRequestInfo { return r.info }

func (r *cmRequest) answer() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return verbs.Errorf("rdma_cm", verbs.ErrInvalidState, "the request was already answered")
	}
	r.answered = true
	return nil
}

// Reject refuses the request (a REJ, or a SIDR_REP "rejected").
func (r *cmRequest) Reject(private []byte) error {
	if err := r.answer(); err != nil {
		return err
	}
	var pd unsafe.Pointer
	if len(private) > 0 {
		pd = C.CBytes(private)
		defer C.free(pd)
	}
	_, err := C.rdma_reject(r.m.id, pd, C.uint8_t(len(private)))
	// Give the kernel a moment to send the REJ before the ID goes.
	time.AfterFunc(time.Second, r.m.close)
	if err != nil && !errors.Is(err, syscall.Errno(0)) {
		return nil // rdma_reject's errno is informational once the ID is going
	}
	return nil
}

// Accept connects p.QP to the requester (verbs.CMRequest).
func (r *cmRequest) Accept(ctx context.Context, p *verbs.CMParams) (verbs.CMConn, error) {
	const op = "rdma_cm.Accept"
	if err := r.answer(); err != nil {
		return nil, err
	}
	qp, err := r.c.kernelQP(op, p)
	if err == nil {
		err = r.c.onDevice(op, r.m)
	}
	if err != nil {
		C.rdma_reject(r.m.id, nil, 0)
		time.AfterFunc(time.Second, r.m.close)
		return nil, err
	}
	conn, err := r.accept(ctx, op, qp, p)
	if err != nil {
		r.m.close()
		return nil, err
	}
	return conn, nil
}

func (r *cmRequest) accept(ctx context.Context, op string, qp *QP, p *verbs.CMParams) (*cmConn, error) {
	m := r.m
	ud := r.info.QPType == verbs.QPTypeUD
	fail := func(err error) (*cmConn, error) {
		C.rdma_reject(m.id, nil, 0)
		return nil, err
	}
	if err := m.modify(op, qp, verbs.QPStateInit, p.Access); err != nil {
		return fail(err)
	}
	if err := m.modify(op, qp, verbs.QPStateRTR, 0); err != nil {
		return fail(err)
	}
	if err := m.modify(op, qp, verbs.QPStateRTS, 0); err != nil {
		return fail(err)
	}
	rr, depth := r.c.depths(p)
	rr, depth = min(rr, r.info.InitiatorDepth), min(depth, r.info.ResponderResources)
	if ud {
		rr, depth = 0, 0
	}
	if err := m.connect(op, qp, p, rr, depth, true); err != nil {
		return nil, err
	}
	conn := &cmConn{m: m, ud: ud, done: make(chan struct{}),
		info: verbs.CMConnInfo{PrivateData: r.info.PrivateData, ResponderResources: rr, InitiatorDepth: depth}}
	if !ud {
		if _, err := m.expect(ctx, op, C.RDMA_CM_EVENT_ESTABLISHED); err != nil {
			return nil, err
		}
	}
	conn.info.Local, conn.info.Remote = m.addrs()
	go conn.watch()
	return conn, nil
}
