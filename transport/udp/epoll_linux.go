package udp

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A transport's blocking receive wait goes through Go's network poller:
// an epoll set of its own (the receiving sockets, the eventfd Close
// signals, the sending sockets for their errors), itself registered with
// the runtime's poller. A goroutine that waits there gives up its P at
// once; one blocked in ppoll kept it until sysmon took it away (20 µs to
// 10 ms later), and a blocking server's other goroutines had one P fewer
// meanwhile.
type waiter struct {
	mu     sync.Mutex // one waiter at a time; guards the fields below
	file   *os.File   // the epoll fd
	raw    syscall.RawConn
	check  func(uintptr) bool // check, bound once (no allocation per wait)
	events [2*maxHomes + 8]unix.EpollEvent
	n      int   // events the last check found
	err    error // the last check's epoll_wait error
}

// newWaiter builds the epoll set of t's descriptors. Precondition: the
// homes, senders and evfd are open and do not change any more.
func (t *Transport) newWaiter() (*waiter, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	add := func(fd int, events uint32) error {
		return unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
	}
	for _, h := range t.homes {
		if err == nil {
			err = add(h.fd, unix.EPOLLIN)
		}
	}
	if err == nil {
		err = add(t.evfd, unix.EPOLLIN)
	}
	for _, s := range t.senders {
		if err == nil && !t.isHomeFD(s.fd) {
			err = add(s.fd, 0) // EPOLLERR is always reported
		}
	}
	if err == nil {
		err = unix.SetNonblock(epfd, true)
	}
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	w := &waiter{file: os.NewFile(uintptr(epfd), "softrdma-udp-wait")}
	if w.raw, err = w.file.SyscallConn(); err != nil {
		w.file.Close()
		return nil, err
	}
	w.check = w.poll
	return w, nil
}

// poll is the RawConn.Read callback: it looks at the set without
// blocking and reports whether something is ready (or failed).
func (w *waiter) poll(fd uintptr) bool {
	w.n, w.err = unix.EpollWait(int(fd), w.events[:], 0)
	if w.err == unix.EINTR {
		w.n, w.err = 0, nil
	}
	return w.n > 0 || w.err != nil
}

// wait blocks in the network poller until one of the set's descriptors
// is ready. It returns whether a receiving socket is readable, after
// draining the error queues that have something. Precondition: t.fdMu
// read-locked.
func (t *Transport) waitPoller() (bool, error) {
	w := t.wait
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.raw.Read(w.check); err != nil {
		return false, err
	}
	if w.err != nil {
		return false, w.err
	}
	ready := false
	for _, ev := range w.events[:w.n] {
		fd := int(ev.Fd)
		switch {
		case fd == t.evfd:
		case t.isHomeFD(fd):
			if ev.Events&unix.EPOLLERR != 0 && ev.Events&unix.EPOLLIN == 0 {
				t.drainErrors(fd)
				continue
			}
			ready = true
		case ev.Events&unix.EPOLLERR != 0:
			t.drainErrors(fd)
		}
	}
	return ready, nil
}
