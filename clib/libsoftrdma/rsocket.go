//go:build cgo && clib

package main

// rsockets for C programs: the Go half of librdmacm.so.1's rsocket calls,
// over softrdma's rdmanet (librdmacm's rsocket wire protocol).
//
//	rsocket   ─▶ the C half makes an eventfd: the socket's number, so it
//	             never collides with the program's descriptors
//	rconnect  ─▶ rdmanet.Dialer (in a goroutine when non-blocking)
//	rlisten   ─▶ rdmanet.ListenConfig per device ─▶ accept goroutines ─▶ backlog
//	rsend     ─▶ Conn.Write, or Conn.TryWrite when non-blocking, on the
//	             caller's thread: the bytes go from its buffer to the wire
//	rrecv     ◀─ Conn.Read, or Conn.TryRead, on the caller's thread
//	rpoll     ─▶ revents from Conn.Ready; to wait, poll() the eventfds,
//	             which the connection's completions make readable while
//	             an rpoll waits (and only then: no write per message)
//
// Each call runs the data path on the program's own thread, as rsocket's
// do: no goroutine hand-off and no copy beyond rdmanet's own per message.
// Every export returns 0 or a positive errno and never lets a panic reach
// C (guard).

/*
#define SRD_CM_GO 1
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include "ibverbs.h"
#include "rdmacm.h"
#ifndef POLLRDHUP
#define POLLRDHUP 0x2000
#endif
*/
import "C"

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/rdmanet"
	"github.com/softrdma/softrdma/verbs"
)

type rsState int

const (
	rsIdle       rsState = iota // created, maybe bound
	rsListening                 // rlisten
	rsConnecting                // a non-blocking rconnect in progress
	rsConnected                 // connected (rconnect or raccept)
	rsClosed                    // rclose called
)

// rsDefaultBuffer is what SO_RCVBUF and SO_SNDBUF read before they are
// set: rdmanet's buffers when Config leaves them zero.
const rsDefaultBuffer = 512 << 10

// rsock is one rsocket. mu guards the state; cond is broadcast on every
// change a blocked call waits for (a connection, a backlog entry). The
// data path does not take mu for long: it runs in rdmanet's Conn, which
// has its own locks.
type rsock struct {
	mu   sync.Mutex
	cond *sync.Cond

	state    rsState
	nonblock bool
	local    netip.AddrPort // rbind's address, then the connection's
	cfg      rdmanet.Config
	opts     map[[2]int]int // options read back by rgetsockopt
	soErr    syscall.Errno  // SO_ERROR: a non-blocking connect's result

	// Listening.
	lns     []*rdmanet.Listener
	backlog []*rdmanet.Conn

	// Connected.
	conn  *rdmanet.Conn
	peer  netip.AddrPort
	rShut atomic.Bool // rshutdown SHUT_RD: rrecv returns 0
	wShut atomic.Bool // rshutdown SHUT_WR: rsend fails with EPIPE
	maps  map[uintptr]*rdmanet.Mapping

	// rmu serializes rrecv, which may wait in Conn.Read without mu;
	// it guards peeked, the bytes MSG_PEEK took from the connection,
	// which the next rrecv returns first.
	rmu    sync.Mutex
	peeked []byte

	// waiters counts the rpoll calls about to wait on the eventfd; only
	// then does a change write it (signal). sigMu guards fd against
	// rclose, which gives the number back to the program.
	waiters atomic.Int32
	sigMu   sync.RWMutex
	fd      int
}

var (
	rsMu   sync.RWMutex
	rsocks = map[int]*rsock{}
)

func rsOf(fd C.int) *rsock {
	rsMu.RLock()
	defer rsMu.RUnlock()
	return rsocks[int(fd)]
}

// lockRS is the prelude of the calls on one socket: the socket of fd,
// locked, or EBADF.
func lockRS(fd C.int) (*rsock, C.int) {
	s := rsOf(fd)
	if s == nil {
		return nil, C.EBADF
	}
	s.mu.Lock()
	return s, 0
}

// connectedLocked waits for a connect in progress unless nonblock (then
// EAGAIN); it returns ENOTCONN unless the socket is connected.
// Precondition: mu held.
func (s *rsock) connectedLocked(nonblock bool) C.int {
	for s.state == rsConnecting {
		if nonblock {
			return C.EAGAIN
		}
		s.cond.Wait()
	}
	if s.state != rsConnected {
		return C.ENOTCONN
	}
	return 0
}

// connOf is the prelude of the data calls: the socket of fd and its
// connection once connected (see connectedLocked), and whether the call
// must not wait (O_NONBLOCK, or MSG_DONTWAIT in flags). mu is not held
// on return.
func connOf(fd, flags C.int) (s *rsock, c *rdmanet.Conn, nonblock bool, en C.int) {
	s, en = lockRS(fd)
	if en != 0 {
		return nil, nil, false, en
	}
	defer s.mu.Unlock()
	nonblock = s.nonblock || flags&C.MSG_DONTWAIT != 0
	if en = s.connectedLocked(nonblock); en != 0 {
		return nil, nil, false, en
	}
	return s, s.conn, nonblock, 0
}

// connNow is connOf for the calls that do not wait for a connect in
// progress: ENOTCONN unless connected now.
func connNow(fd C.int) (*rsock, *rdmanet.Conn, C.int) {
	s, c, _, en := connOf(fd, C.MSG_DONTWAIT)
	if en == C.EAGAIN {
		en = C.ENOTCONN
	}
	return s, c, en
}

// notifyLocked wakes the calls waiting on cond and signals rpoll.
// Precondition: mu held.
func (s *rsock) notifyLocked() {
	s.cond.Broadcast()
	s.signal()
}

// signal makes the eventfd readable if an rpoll waits on it. The
// connection calls it on every completion (Conn.SetNotify), so it costs
// one atomic load when nobody waits.
func (s *rsock) signal() {
	if s.waiters.Load() == 0 {
		return
	}
	s.sigMu.RLock()
	defer s.sigMu.RUnlock()
	if s.fd < 0 {
		return // rclose gave the number back: it may be the program's now
	}
	var one = [8]byte{1}
	syscall.Write(s.fd, one[:])
}

//export srdgo_cm_rs_socket
func srdgo_cm_rs_socket(fd, domain, typ C.int) (ret C.int) {
	defer guard("rsocket", &ret)
	if domain != C.AF_INET && domain != C.AF_INET6 {
		return C.EAFNOSUPPORT
	}
	switch typ &^ (C.SOCK_NONBLOCK | C.SOCK_CLOEXEC) {
	case C.SOCK_STREAM:
	case C.SOCK_DGRAM:
		// rsocket's datagram sockets (UD QPs behind a UDP socket of their
		// own) are not provided.
		return C.EOPNOTSUPP
	default:
		return C.EPROTOTYPE
	}
	s := newRS(fd, map[[2]int]int{})
	s.mu.Lock()
	s.nonblock = typ&C.SOCK_NONBLOCK != 0
	s.mu.Unlock()
	return 0
}

//export srdgo_cm_rs_bind
func srdgo_cm_rs_bind(fd C.int, a *C.struct_srd_cm_addr) (ret C.int) {
	defer guard("rbind", &ret)
	ap, ok := addrFromC(a)
	if !ok {
		return C.EAFNOSUPPORT
	}
	if !ap.Addr().IsUnspecified() && devFor(ap.Addr()) == nil {
		return C.EADDRNOTAVAIL
	}
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	defer s.mu.Unlock()
	if s.state != rsIdle || s.local.IsValid() {
		return C.EINVAL
	}
	s.local = ap
	return 0
}

//export srdgo_cm_rs_listen
func srdgo_cm_rs_listen(fd, backlog C.int) (ret C.int) {
	defer guard("rlisten", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	defer s.mu.Unlock()
	if s.state == rsListening {
		return 0
	}
	if s.state != rsIdle {
		return C.EINVAL
	}
	local := s.local
	if !local.IsValid() {
		local = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	var ds []cmDev
	if local.Addr().IsUnspecified() {
		ds = roceDevices()
	} else if d := devFor(local.Addr()); d != nil {
		ds = []cmDev{*d}
	}
	if len(ds) == 0 {
		return C.ENODEV
	}
	port := local.Port()
	for _, d := range ds {
		a := local.Addr()
		if a.IsUnspecified() {
			if a = deviceAddr(d.vctx, a); !a.IsValid() {
				continue
			}
		}
		cfg := s.cfg
		cfg.Context = d.vctx
		l, err := rdmanet.ListenConfig("rdma", netip.AddrPortFrom(a, port).String(), &cfg)
		if err != nil {
			for _, l := range s.lns {
				l.Close()
			}
			s.lns = nil
			if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, verbs.ErrInUse) {
				return C.EADDRINUSE
			}
			return errnoOf("rlisten", err)
		}
		port = l.Addr().(*rdmanet.Addr).AddrPort.Port()
		s.lns = append(s.lns, l)
	}
	if len(s.lns) == 0 {
		return C.ENODEV
	}
	s.local = netip.AddrPortFrom(local.Addr(), port)
	s.state = rsListening
	for _, l := range s.lns {
		go s.acceptLoop(l)
	}
	return 0
}

func (s *rsock) acceptLoop(l *rdmanet.Listener) {
	for {
		c, err := l.Accept()
		s.mu.Lock()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.state != rsListening {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			continue // a failed handshake: the next one
		}
		if s.state != rsListening {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.backlog = append(s.backlog, c.(*rdmanet.Conn))
		s.notifyLocked()
		s.mu.Unlock()
	}
}

//export srdgo_cm_rs_accept
func srdgo_cm_rs_accept(fd, nfd C.int, peer *C.struct_srd_cm_addr) (ret C.int) {
	defer guard("raccept", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	for len(s.backlog) == 0 && s.state == rsListening && !s.nonblock {
		s.cond.Wait()
	}
	if s.state != rsListening {
		s.mu.Unlock()
		return C.EINVAL
	}
	if len(s.backlog) == 0 {
		s.mu.Unlock()
		return C.EAGAIN
	}
	c := s.backlog[0]
	s.backlog = s.backlog[1:]
	cfg := s.cfg
	opts := make(map[[2]int]int, len(s.opts))
	for k, v := range s.opts {
		opts[k] = v
	}
	s.mu.Unlock()
	n := newRS(nfd, opts)
	n.cfg = cfg
	n.mu.Lock()
	n.startLocked(c)
	addrToC(peer, n.peer)
	n.mu.Unlock()
	return 0
}

// newRS makes the socket of the eventfd fd and enters it in the table.
func newRS(fd C.int, opts map[[2]int]int) *rsock {
	s := &rsock{fd: int(fd), opts: opts}
	s.cond = sync.NewCond(&s.mu)
	rsMu.Lock()
	rsocks[int(fd)] = s
	rsMu.Unlock()
	return s
}

// startLocked makes s a connected socket over c. Precondition: mu held.
func (s *rsock) startLocked(c *rdmanet.Conn) {
	s.conn = c
	s.state = rsConnected
	s.local = c.LocalAddr().(*rdmanet.Addr).AddrPort
	s.peer = c.RemoteAddr().(*rdmanet.Addr).AddrPort
	s.maps = map[uintptr]*rdmanet.Mapping{}
	c.SetNotify(s.signal)
	s.notifyLocked()
}

// connErrno is the errno of a failed connection or connect.
func connErrno(err error) syscall.Errno {
	var en syscall.Errno
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		return syscall.ECONNREFUSED
	case errors.Is(err, cm.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, cm.ErrUnreachable):
		return syscall.EHOSTUNREACH
	case errors.Is(err, net.ErrClosed):
		return syscall.EBADF
	case errors.As(err, &en):
		return en
	}
	return syscall.ECONNRESET
}

//export srdgo_cm_rs_connect
func srdgo_cm_rs_connect(fd C.int, a *C.struct_srd_cm_addr) (ret C.int) {
	defer guard("rconnect", &ret)
	dst, ok := addrFromC(a)
	if !ok {
		return C.EAFNOSUPPORT
	}
	if !dst.IsValid() || dst.Addr().IsUnspecified() || dst.Port() == 0 {
		return C.EINVAL
	}
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	switch s.state {
	case rsConnecting:
		s.mu.Unlock()
		return C.EALREADY
	case rsConnected:
		s.mu.Unlock()
		return C.EISCONN
	case rsIdle:
	default:
		s.mu.Unlock()
		return C.EINVAL
	}
	src, err := sourceFor(dst.Addr())
	if s.local.IsValid() && !s.local.Addr().IsUnspecified() {
		src, err = s.local.Addr(), nil
	}
	var d *cmDev
	if err == nil {
		d = devFor(src)
	}
	if d == nil {
		s.mu.Unlock()
		return C.ENETUNREACH
	}
	cfg := s.cfg
	cfg.Context = d.vctx
	s.state = rsConnecting
	nonblock := s.nonblock
	s.mu.Unlock()
	dial := func() syscall.Errno {
		dl := rdmanet.Dialer{Config: &cfg, Timeout: 30 * time.Second}
		c, err := dl.DialContext(context.Background(), "rdma", dst.String())
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			if s.state == rsConnecting {
				s.state = rsIdle
			}
			s.soErr = connErrno(err)
			s.notifyLocked()
			return s.soErr
		}
		if s.state != rsConnecting { // closed meanwhile
			go c.Close()
			return syscall.EBADF
		}
		s.startLocked(c.(*rdmanet.Conn))
		return 0
	}
	if nonblock {
		go dial()
		return C.EINPROGRESS
	}
	if en := dial(); en != 0 {
		s.mu.Lock()
		s.soErr = 0
		s.mu.Unlock()
		return C.int(en)
	}
	return 0
}

//export srdgo_cm_rs_shutdown
func srdgo_cm_rs_shutdown(fd, how C.int) (ret C.int) {
	defer guard("rshutdown", &ret)
	switch how {
	case C.SHUT_RD, C.SHUT_WR, C.SHUT_RDWR:
	default:
		return C.EINVAL
	}
	s, c, en := connNow(fd)
	if en != 0 {
		return en
	}
	if how != C.SHUT_WR {
		s.rShut.Store(true)
	}
	if how != C.SHUT_RD && !s.wShut.Swap(true) {
		// After what rsend returned for: Conn.Write has posted it.
		c.CloseWrite()
	}
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
	return 0
}

//export srdgo_cm_rs_close
func srdgo_cm_rs_close(fd C.int) (ret C.int) {
	defer guard("rclose", &ret)
	rsMu.Lock()
	s := rsocks[int(fd)]
	delete(rsocks, int(fd))
	rsMu.Unlock()
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
	prev := s.state
	s.state = rsClosed
	lns := s.lns
	backlog := s.backlog
	s.lns, s.backlog = nil, nil
	maps := s.maps
	s.maps = nil
	s.notifyLocked()
	s.mu.Unlock()
	s.sigMu.Lock()
	s.fd = -1 // the C half closes the eventfd after this returns
	s.sigMu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, c := range backlog {
		c.Close()
	}
	if prev == rsConnected {
		s.conn.SetNotify(nil)
		for _, m := range maps {
			m.Unmap()
		}
		// What rsend returned for goes out before the disconnect:
		// Close waits for the peer's acknowledgements (a few seconds at
		// most), and wakes calls blocked in Read or Write.
		s.conn.Close()
	}
	return 0
}

//export srdgo_cm_rs_recv
func srdgo_cm_rs_recv(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, out *C.ssize_t) (ret C.int) {
	defer guard("rrecv", &ret)
	s, c, nonblock, en := connOf(fd, flags)
	if en != 0 {
		return en
	}
	k, en := s.recv(c, unsafe.Slice((*byte)(buf), int(n)), flags, nonblock)
	*out = C.ssize_t(k)
	return en
}

// recv is rrecv on a connected socket: what MSG_PEEK kept, then the
// connection's bytes; with MSG_WAITALL (and blocking) until p is full.
func (s *rsock) recv(c *rdmanet.Conn, p []byte, flags C.int, nonblock bool) (int, C.int) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if len(p) == 0 || s.rShut.Load() {
		return 0, 0
	}
	peek := flags&C.MSG_PEEK != 0
	done := 0
	if len(s.peeked) > 0 {
		done = copy(p, s.peeked)
		if peek {
			return done, 0
		}
		s.peeked = s.peeked[:copy(s.peeked, s.peeked[done:])]
	}
	for done < len(p) {
		var k int
		var err error
		if nonblock || (done > 0 && flags&C.MSG_WAITALL == 0) {
			k, err = c.TryRead(p[done:])
		} else {
			k, err = c.Read(p[done:])
		}
		if peek {
			s.peeked = append(s.peeked, p[:k]...)
		}
		done += k
		switch {
		case err == nil && (peek || flags&C.MSG_WAITALL == 0 || nonblock):
			return done, 0
		case err == nil:
			continue
		case done > 0 || err == io.EOF:
			return done, 0
		case errors.Is(err, syscall.EAGAIN):
			return 0, C.EAGAIN
		}
		return 0, C.int(connErrno(err))
	}
	return done, 0
}

//export srdgo_cm_rs_send
func srdgo_cm_rs_send(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, out *C.ssize_t) (ret C.int) {
	defer guard("rsend", &ret)
	s, c, nonblock, en := connOf(fd, flags)
	if en != 0 {
		return en
	}
	if s.wShut.Load() {
		return C.EPIPE
	}
	p := unsafe.Slice((*byte)(buf), int(n))
	var k int
	var err error
	if nonblock {
		k, err = c.TryWrite(p)
	} else {
		k, err = c.Write(p)
	}
	if err != nil && k == 0 {
		if errors.Is(err, syscall.EAGAIN) {
			return C.EAGAIN
		}
		return C.int(connErrno(err))
	}
	*out = C.ssize_t(k)
	return 0
}

// srdgo_cm_rs_revents returns the poll events of events that are ready
// on fd, or -1 if fd is not an rsocket (wait < 0 asks only that). wait > 0
// says the caller sleeps on the eventfd next, between srdgo_cm_rs_arm(fd,
// 1) and (fd, 0).
//
//export srdgo_cm_rs_revents
func srdgo_cm_rs_revents(fd C.int, events C.short, wait C.int) (ret C.int) {
	defer guard("rpoll", &ret)
	s := rsOf(fd)
	if s == nil {
		return -1
	}
	if wait < 0 {
		return 0 // the C half asks whether fd is an rsocket
	}
	s.mu.Lock()
	state, c, soErr, backlog := s.state, s.conn, s.soErr, len(s.backlog)
	s.mu.Unlock()
	var r C.int
	switch state {
	case rsListening:
		if backlog > 0 {
			r |= C.POLLIN
		}
	case rsConnecting:
	case rsConnected:
		ready := c.Ready(wait != 0)
		rShut, wShut := s.rShut.Load(), s.wShut.Load()
		if ready.Read || rShut {
			r |= C.POLLIN
		}
		if ready.EOF {
			r |= C.POLLRDHUP
		}
		if ready.Write && !wShut {
			r |= C.POLLOUT
		}
		if ready.Err {
			r |= C.POLLERR
		}
		if ready.EOF && wShut {
			r |= C.POLLHUP
		}
	case rsIdle:
		if soErr != 0 { // a failed non-blocking connect
			r |= C.POLLOUT | C.POLLERR
		}
	default:
		r |= C.POLLNVAL
	}
	return r & (C.int(events) | C.POLLERR | C.POLLHUP | C.POLLNVAL)
}

// srdgo_cm_rs_arm says an rpoll starts (on != 0) or stops waiting on
// fd's eventfd: meanwhile every change writes it.
//
//export srdgo_cm_rs_arm
func srdgo_cm_rs_arm(fd, on C.int) {
	if s := rsOf(fd); s != nil {
		if on != 0 {
			s.waiters.Add(1)
		} else {
			s.waiters.Add(-1)
		}
	}
}

//export srdgo_cm_rs_name
func srdgo_cm_rs_name(fd, peer C.int, a *C.struct_srd_cm_addr) (ret C.int) {
	defer guard("rgetsockname", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	defer s.mu.Unlock()
	if peer != 0 {
		if s.state != rsConnected {
			return C.ENOTCONN
		}
		addrToC(a, s.peer)
		return 0
	}
	l := s.local
	if !l.IsValid() {
		l = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	addrToC(a, l)
	return 0
}

// Option levels and names as rsocket.h and the socket headers number them.
var (
	optReuse     = [2]int{C.SOL_SOCKET, C.SO_REUSEADDR}
	optRcvBuf    = [2]int{C.SOL_SOCKET, C.SO_RCVBUF}
	optSndBuf    = [2]int{C.SOL_SOCKET, C.SO_SNDBUF}
	optLinger    = [2]int{C.SOL_SOCKET, C.SO_LINGER}
	optKeepAlive = [2]int{C.SOL_SOCKET, C.SO_KEEPALIVE}
	optError     = [2]int{C.SOL_SOCKET, C.SO_ERROR}
	optNoDelay   = [2]int{C.IPPROTO_TCP, C.TCP_NODELAY}
	optKeepIdle  = [2]int{C.IPPROTO_TCP, C.TCP_KEEPIDLE}
	optSQSize    = [2]int{C.SOL_RDMA, C.RDMA_SQSIZE}
	optRQSize    = [2]int{C.SOL_RDMA, C.RDMA_RQSIZE}
	optInline    = [2]int{C.SOL_RDMA, C.RDMA_INLINE}
	optIOMapSize = [2]int{C.SOL_RDMA, C.RDMA_IOMAPSIZE}
)

//export srdgo_cm_rs_setopt
func srdgo_cm_rs_setopt(fd, level, name, val C.int) (ret C.int) {
	defer guard("rsetsockopt", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	defer s.mu.Unlock()
	k, v := [2]int{int(level), int(name)}, int(val)
	switch k {
	case optReuse, optLinger, optNoDelay:
		// Accepted and remembered: a listener's port is free again as
		// soon as it closes, rclose always delivers what was sent
		// before it disconnects, and every rsend goes out at once.
	case optRcvBuf:
		// As rsocket, the ring is twice the size asked for.
		s.cfg.RecvBuffer = v << 1
	case optSndBuf:
		s.cfg.SendBuffer = v << 1
	case optKeepAlive, optKeepIdle:
		idle := s.opts[optKeepIdle]
		if k == optKeepIdle {
			idle = v
		}
		if idle <= 0 {
			idle = 7200 // rsocket's default keepalive time
		}
		on := s.opts[optKeepAlive] != 0
		if k == optKeepAlive {
			on = v != 0
		}
		s.cfg.KeepAlive = 0
		if on {
			s.cfg.KeepAlive = time.Duration(idle) * time.Second
		}
	case optSQSize, optRQSize:
		// One depth for both queues: the larger asked for.
		if v <= 0 {
			return C.EINVAL
		}
		s.cfg.QueueDepth = max(s.cfg.QueueDepth, v)
	case optInline:
		if v < 0 {
			return C.EINVAL
		}
		s.cfg.Inline = v
		if v == 0 {
			s.cfg.Inline = -1 // none
		}
	case optIOMapSize:
		if v < 0 {
			return C.EINVAL
		}
		s.cfg.IOMapSize = v
	default:
		return C.ENOPROTOOPT
	}
	s.opts[k] = v
	if s.state == rsListening {
		// Sockets accepted from now on take them, as rsocket's do.
		for _, l := range s.lns {
			cfg := s.cfg
			l.SetConfig(&cfg)
		}
	}
	return 0
}

//export srdgo_cm_rs_getopt
func srdgo_cm_rs_getopt(fd, level, name C.int, val *C.int) (ret C.int) {
	defer guard("rgetsockopt", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	defer s.mu.Unlock()
	k := [2]int{int(level), int(name)}
	switch k {
	case optError:
		*val = C.int(s.soErr)
		s.soErr = 0
	case optRcvBuf:
		*val = C.int(s.cfg.RecvBuffer)
		if *val == 0 {
			*val = rsDefaultBuffer
		}
	case optSndBuf:
		*val = C.int(s.cfg.SendBuffer)
		if *val == 0 {
			*val = rsDefaultBuffer
		}
	case optReuse, optLinger, optNoDelay, optKeepAlive, optKeepIdle, optSQSize, optRQSize, optInline, optIOMapSize:
		*val = C.int(s.opts[k])
	default:
		return C.ENOPROTOOPT
	}
	return 0
}

//export srdgo_cm_rs_fcntl
func srdgo_cm_rs_fcntl(fd, cmd, arg C.int, out *C.int) (ret C.int) {
	defer guard("rfcntl", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	defer s.mu.Unlock()
	switch cmd {
	case C.F_GETFL:
		*out = C.O_RDWR
		if s.nonblock {
			*out |= C.O_NONBLOCK
		}
	case C.F_SETFL:
		s.nonblock = arg&C.O_NONBLOCK != 0
		*out = 0
	default:
		return C.EINVAL
	}
	return 0
}

//export srdgo_cm_rs_iomap
func srdgo_cm_rs_iomap(fd C.int, buf unsafe.Pointer, n C.size_t, prot C.int, offset C.off_t, out *C.off_t) (ret C.int) {
	defer guard("riomap", &ret)
	if buf == nil || n == 0 || prot&^(C.PROT_WRITE|C.PROT_NONE) != 0 {
		if rsOf(fd) == nil {
			return C.EBADF
		}
		return C.EINVAL
	}
	s, c, en := connNow(fd)
	if en == C.ENOTCONN {
		return C.EINVAL // rsocket: no protection domain before connecting
	}
	if en != 0 {
		return en
	}
	if offset == -1 {
		offset = C.off_t(uintptr(buf))
	}
	if prot&C.PROT_WRITE == 0 {
		// A local mapping only speeds up riowrite from it at rsocket;
		// riowrite copies here, so there is nothing to register.
		*out = offset
		return 0
	}
	m, err := c.IOMapBuffer(unsafe.Slice((*byte)(buf), int(n)), int64(offset))
	if err != nil {
		return C.ENOMEM // rsocket: no free iomap entry (RDMA_IOMAPSIZE)
	}
	s.mu.Lock()
	if s.maps == nil {
		s.mu.Unlock()
		m.Unmap()
		return C.EBADF
	}
	s.maps[uintptr(buf)] = m
	s.mu.Unlock()
	*out = offset
	return 0
}

//export srdgo_cm_rs_iounmap
func srdgo_cm_rs_iounmap(fd C.int, buf unsafe.Pointer, n C.size_t) (ret C.int) {
	defer guard("riounmap", &ret)
	s, en := lockRS(fd)
	if en != 0 {
		return en
	}
	m := s.maps[uintptr(buf)]
	if m != nil && len(m.Bytes()) == int(n) {
		delete(s.maps, uintptr(buf))
	} else {
		m = nil
	}
	s.mu.Unlock()
	if m == nil {
		return C.EINVAL
	}
	if err := m.Unmap(); err != nil {
		return errnoOf("riounmap", err)
	}
	return 0
}

//export srdgo_cm_rs_iowrite
func srdgo_cm_rs_iowrite(fd C.int, buf unsafe.Pointer, n C.size_t, offset C.off_t, flags C.int, out *C.size_t) (ret C.int) {
	defer guard("riowrite", &ret)
	s, c, en := connNow(fd)
	if en != 0 {
		return en
	}
	if s.wShut.Load() {
		return C.EPIPE
	}
	// rsend has posted what it returned for, on the same QP: the peer
	// sees the messages and the direct writes in the program's order.
	k, err := c.IOWrite(unsafe.Slice((*byte)(buf), int(n)), int64(offset))
	if err != nil && k == 0 {
		var oe *net.OpError
		if errors.As(err, &oe) && !errors.Is(err, net.ErrClosed) && oe.Op == "iowrite" {
			return C.EINVAL // nothing mapped at offset
		}
		return C.int(connErrno(err))
	}
	*out = C.size_t(k)
	return 0
}
