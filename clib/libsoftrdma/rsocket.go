//go:build cgo && clib

package main

// rsockets for C programs: the Go half of librdmacm.so.1's rsocket calls,
// over softrdma's rdmanet (librdmacm's rsocket wire protocol).
//
//	rsocket   ─▶ the C half makes an eventfd: the socket's number, so it
//	             never collides with the program's descriptors
//	rconnect  ─▶ rdmanet.Dialer (in a goroutine when non-blocking)
//	rlisten   ─▶ rdmanet.ListenConfig per device ─▶ accept goroutines ─▶ backlog
//	rsend     ─▶ copy into the send ring ─▶ writer goroutine ─▶ Conn.Write
//	rrecv     ◀─ copy from the receive ring ◀─ reader goroutine ◀─ Conn.Read
//	rpoll     ─▶ revents from the socket's state; to wait, poll() the
//	             eventfds, which every state change makes readable
//
// The rings let rsend and rrecv return EAGAIN without blocking when the
// socket is non-blocking (O_NONBLOCK or MSG_DONTWAIT), as rsocket's do,
// while rdmanet's Read and Write block. Every export returns 0 or a
// positive errno and never lets a panic reach C (guard).

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
	"os"
	"sync"
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

// rsRingSize is each direction's library buffer.
const rsRingSize = 1 << 20

// rsDirectWait bounds an rsend's own Conn.Write (see srdgo_cm_rs_send).
const rsDirectWait = 100 * time.Microsecond

// rsock is one rsocket. mu guards everything; cond is broadcast (and the
// eventfd written) on every change a waiter or rpoll could care about.
type rsock struct {
	fd   int
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
	lnErr   syscall.Errno

	// Connected.
	conn        *rdmanet.Conn
	peer        netip.AddrPort
	rbuf        []byte
	rhead, rlen int
	rEOF        bool
	rErr        syscall.Errno
	rShut       bool // rshutdown SHUT_RD
	wbuf        []byte
	whead, wlen int
	wErr        syscall.Errno
	wShut       bool // rshutdown SHUT_WR: the writer sends the shutdown after the ring
	writing     bool // a Conn.Write is in progress (writer goroutine or rsend)
	want        bool // the program waits for data: the reader reads
	writerDone  chan struct{}
	readerDone  chan struct{}
	maps        map[uintptr]*rdmanet.Mapping
}

var (
	rsMu   sync.Mutex
	rsocks = map[int]*rsock{}
)

func rsOf(fd C.int) *rsock {
	rsMu.Lock()
	defer rsMu.Unlock()
	return rsocks[int(fd)]
}

// notifyLocked wakes waiters and makes the eventfd readable for rpoll.
// Precondition: mu held.
func (s *rsock) notifyLocked() {
	s.cond.Broadcast()
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
	s := &rsock{fd: int(fd), opts: map[[2]int]int{}, nonblock: typ&C.SOCK_NONBLOCK != 0}
	s.cond = sync.NewCond(&s.mu)
	rsMu.Lock()
	rsocks[int(fd)] = s
	rsMu.Unlock()
	return 0
}

//export srdgo_cm_rs_bind
func srdgo_cm_rs_bind(fd C.int, a *C.struct_srd_cm_addr) (ret C.int) {
	defer guard("rbind", &ret)
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	ap, ok := addrFromC(a)
	if !ok {
		return C.EAFNOSUPPORT
	}
	if !ap.Addr().IsUnspecified() && devFor(ap.Addr()) == nil {
		return C.EADDRNOTAVAIL
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
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
	n := &rsock{fd: int(nfd), opts: opts, cfg: cfg}
	n.cond = sync.NewCond(&n.mu)
	rsMu.Lock()
	rsocks[int(nfd)] = n
	rsMu.Unlock()
	n.mu.Lock()
	n.startLocked(c)
	addrToC(peer, n.peer)
	n.mu.Unlock()
	return 0
}

// startLocked makes s a connected socket over c. Precondition: mu held.
func (s *rsock) startLocked(c *rdmanet.Conn) {
	s.conn = c
	s.state = rsConnected
	s.local = c.LocalAddr().(*rdmanet.Addr).AddrPort
	s.peer = c.RemoteAddr().(*rdmanet.Addr).AddrPort
	s.rbuf = make([]byte, rsRingSize)
	s.wbuf = make([]byte, rsRingSize)
	s.readerDone = make(chan struct{})
	s.writerDone = make(chan struct{})
	s.maps = map[uintptr]*rdmanet.Mapping{}
	go s.reader()
	go s.writer()
	s.notifyLocked()
}

// reader moves what the peer sends into the receive ring.
func (s *rsock) reader() {
	defer close(s.readerDone)
	tmp := make([]byte, 256<<10)
	for {
		// Read when the program waits for data (want): Conn.Read polls
		// the CQ for a while before it sleeps, and that while should
		// start when the program starts waiting, as a Go program's Read
		// does. Until then the data waits in rdmanet's own ring.
		s.mu.Lock()
		for !s.want && s.state != rsClosed {
			s.cond.Wait()
		}
		s.want = false
		closed := s.state == rsClosed
		s.mu.Unlock()
		if closed {
			return
		}
		n, err := s.conn.Read(tmp)
		s.mu.Lock()
		p := tmp[:n]
		for len(p) > 0 {
			for s.rlen == len(s.rbuf) && s.state != rsClosed {
				s.cond.Wait()
			}
			if s.state == rsClosed {
				s.mu.Unlock()
				return
			}
			tail := (s.rhead + s.rlen) % len(s.rbuf)
			k := copy(s.rbuf[tail:min(len(s.rbuf), tail+len(s.rbuf)-s.rlen)], p)
			s.rlen += k
			p = p[k:]
			s.notifyLocked()
		}
		if err != nil {
			if err == io.EOF {
				s.rEOF = true
			} else if s.state != rsClosed {
				s.rErr = connErrno(err)
			}
			s.notifyLocked()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// writer sends the send ring's bytes, then the shutdown if rshutdown
// asked for one.
func (s *rsock) writer() {
	defer close(s.writerDone)
	s.mu.Lock()
	for {
		for s.writing || (s.wlen == 0 && !s.wShut && s.state != rsClosed && s.wErr == 0) {
			s.cond.Wait()
		}
		if s.wErr != 0 || (s.wlen == 0 && (s.wShut || s.state == rsClosed)) {
			shut := s.wShut && s.wErr == 0
			s.mu.Unlock()
			if shut {
				s.conn.CloseWrite()
			}
			return
		}
		k := min(s.wlen, len(s.wbuf)-s.whead)
		chunk := s.wbuf[s.whead : s.whead+k]
		s.writing = true
		s.mu.Unlock()
		n, err := s.conn.Write(chunk) // the ring's producers never touch these bytes
		s.mu.Lock()
		s.writing = false
		s.whead = (s.whead + n) % len(s.wbuf)
		s.wlen -= n
		if err != nil {
			s.wErr = connErrno(err)
		}
		s.notifyLocked()
	}
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	dst, ok := addrFromC(a)
	if !ok {
		return C.EAFNOSUPPORT
	}
	if !dst.IsValid() || dst.Addr().IsUnspecified() || dst.Port() == 0 {
		return C.EINVAL
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != rsConnected {
		return C.ENOTCONN
	}
	switch how {
	case C.SHUT_RD, C.SHUT_WR, C.SHUT_RDWR:
	default:
		return C.EINVAL
	}
	if how != C.SHUT_WR {
		s.rShut = true
	}
	if how != C.SHUT_RD {
		s.wShut = true
	}
	s.notifyLocked()
	return 0
}

// rsLinger bounds how long rclose waits for the send ring to drain.
const rsLinger = 5 * time.Second

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
	s.fd = -1 // the C half closes the eventfd after this returns
	s.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
	for _, c := range backlog {
		c.Close()
	}
	if prev == rsConnected {
		// What rsend accepted goes out before the disconnect.
		select {
		case <-s.writerDone:
		case <-time.After(rsLinger):
		}
		for _, m := range maps {
			m.Unmap()
		}
		s.conn.Close()
		<-s.readerDone
	}
	return 0
}

//export srdgo_cm_rs_recv
func srdgo_cm_rs_recv(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, out *C.ssize_t) (ret C.int) {
	defer guard("rrecv", &ret)
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	p := unsafe.Slice((*byte)(buf), int(n))
	s.mu.Lock()
	defer s.mu.Unlock()
	nonblock := s.nonblock || flags&C.MSG_DONTWAIT != 0
	done := 0
	for {
		switch {
		case s.state == rsConnecting && nonblock:
			return C.EAGAIN
		case s.state == rsConnecting:
			s.cond.Wait()
			continue
		case s.state != rsConnected:
			return C.ENOTCONN
		}
		if s.rlen > 0 && !s.rShut {
			for done < len(p) && s.rlen > 0 {
				k := copy(p[done:], s.rbuf[s.rhead:min(len(s.rbuf), s.rhead+s.rlen)])
				if flags&C.MSG_PEEK != 0 {
					*out = C.ssize_t(k)
					return 0
				}
				done += k
				s.rhead = (s.rhead + k) % len(s.rbuf)
				s.rlen -= k
			}
			s.notifyLocked() // the reader may go on
			if done == len(p) || flags&C.MSG_WAITALL == 0 || nonblock {
				*out = C.ssize_t(done)
				return 0
			}
		}
		if s.rlen == 0 && !s.want && !s.rEOF && s.rErr == 0 {
			s.want = true
			s.cond.Broadcast()
		}
		switch {
		case len(p) == 0 || s.rShut || s.rEOF:
			*out = C.ssize_t(done)
			return 0
		case s.rErr != 0:
			if done > 0 {
				*out = C.ssize_t(done)
				return 0
			}
			return C.int(s.rErr)
		case nonblock:
			if done > 0 {
				*out = C.ssize_t(done)
				return 0
			}
			return C.EAGAIN
		}
		s.cond.Wait()
	}
}

//export srdgo_cm_rs_send
func srdgo_cm_rs_send(fd C.int, buf unsafe.Pointer, n C.size_t, flags C.int, out *C.ssize_t) (ret C.int) {
	defer guard("rsend", &ret)
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	p := unsafe.Slice((*byte)(buf), int(n))
	s.mu.Lock()
	defer s.mu.Unlock()
	nonblock := s.nonblock || flags&C.MSG_DONTWAIT != 0
	done := 0
	for {
		switch {
		case s.state == rsConnecting && nonblock:
			return C.EAGAIN
		case s.state == rsConnecting:
			s.cond.Wait()
			continue
		case s.state != rsConnected:
			return C.ENOTCONN
		case s.wShut:
			return C.EPIPE
		case s.wErr != 0:
			if done > 0 {
				*out = C.ssize_t(done)
				return 0
			}
			return C.int(s.wErr)
		}
		if s.wlen == 0 && !s.writing && done < len(p) {
			// Nothing queued: write from the caller's thread, sparing
			// the writer goroutine's wake-up. The short deadline keeps
			// a non-blocking call from waiting for the peer's credits;
			// what it did not send goes into the ring.
			s.writing = true
			s.mu.Unlock()
			s.conn.SetWriteDeadline(time.Now().Add(rsDirectWait))
			k, err := s.conn.Write(p[done:])
			s.conn.SetWriteDeadline(time.Time{})
			s.mu.Lock()
			s.writing = false
			done += k
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				s.wErr = connErrno(err)
			}
			s.notifyLocked()
			continue
		}
		for done < len(p) && s.wlen < len(s.wbuf) {
			tail := (s.whead + s.wlen) % len(s.wbuf)
			k := copy(s.wbuf[tail:min(len(s.wbuf), tail+len(s.wbuf)-s.wlen)], p[done:])
			s.wlen += k
			done += k
		}
		if done > 0 {
			s.notifyLocked()
		}
		if done == len(p) {
			*out = C.ssize_t(done)
			return 0
		}
		if nonblock {
			if done > 0 {
				*out = C.ssize_t(done)
				return 0
			}
			return C.EAGAIN
		}
		s.cond.Wait()
	}
}

// srdgo_cm_rs_revents returns the poll events of events that are
// ready on fd, or -1 if fd is not an rsocket.
//
//export srdgo_cm_rs_revents
func srdgo_cm_rs_revents(fd C.int, events C.short) (ret C.int) {
	defer guard("rpoll", &ret)
	s := rsOf(fd)
	if s == nil {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var r C.int
	switch s.state {
	case rsListening:
		if len(s.backlog) > 0 {
			r |= C.POLLIN
		}
	case rsConnecting:
	case rsConnected:
		if s.rlen > 0 || s.rEOF || s.rShut {
			r |= C.POLLIN
		} else if events&(C.POLLIN|C.POLLRDHUP) != 0 && !s.want && s.rErr == 0 {
			s.want = true // rpoll waits for data
			s.cond.Broadcast()
		}
		if s.rEOF {
			r |= C.POLLRDHUP
		}
		if s.wlen < len(s.wbuf) && !s.wShut && s.wErr == 0 {
			r |= C.POLLOUT
		}
		if s.rErr != 0 || s.wErr != 0 {
			r |= C.POLLERR
		}
		if s.rEOF && s.wShut {
			r |= C.POLLHUP
		}
	case rsIdle:
		if s.soErr != 0 { // a failed non-blocking connect
			r |= C.POLLOUT | C.POLLERR
		}
	default:
		r |= C.POLLNVAL
	}
	return r & (C.int(events) | C.POLLERR | C.POLLHUP | C.POLLNVAL)
}

//export srdgo_cm_rs_name
func srdgo_cm_rs_name(fd, peer C.int, a *C.struct_srd_cm_addr) (ret C.int) {
	defer guard("rgetsockname", &ret)
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]int{int(level), int(name)}
	switch k {
	case optError:
		*val = C.int(s.soErr)
		s.soErr = 0
	case optRcvBuf:
		*val = C.int(s.cfg.RecvBuffer)
		if *val == 0 {
			*val = C.int(len(s.rbuf))
		}
	case optSndBuf:
		*val = C.int(s.cfg.SendBuffer)
		if *val == 0 {
			*val = C.int(len(s.wbuf))
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	if buf == nil || n == 0 || prot&^(C.PROT_WRITE|C.PROT_NONE) != 0 {
		return C.EINVAL
	}
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return C.EINVAL // rsocket: no protection domain before connecting
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
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
	s := rsOf(fd)
	if s == nil {
		return C.EBADF
	}
	s.mu.Lock()
	// What rsend queued goes first: the peer sees the messages and the
	// direct writes in the order the program made them.
	for s.state == rsConnected && s.wlen > 0 && s.wErr == 0 {
		s.cond.Wait()
	}
	c, st, werr, shut := s.conn, s.state, s.wErr, s.wShut
	s.mu.Unlock()
	switch {
	case st != rsConnected:
		return C.ENOTCONN
	case shut:
		return C.EPIPE
	case werr != 0:
		return C.int(werr)
	}
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
