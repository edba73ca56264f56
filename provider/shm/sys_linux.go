package shm

// Memory and wake-up primitives: sealed memfds that a peer can map
// without being able to shrink them under us (a shrunk file would turn
// our next access into SIGBUS), and futexes on shared words.

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FUTEX_WAIT and FUTEX_WAKE, shared (not FUTEX_PRIVATE_FLAG).
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newMemfd creates a sealed memfd of size bytes and maps it read-write.
func newMemfd(name string, size int) (fd int, mem []byte, err error) {
	return newMemfdSeals(name, size, 0)
}

// newMemfdSeals creates a memfd of size bytes, mode 0600 (a peer of
// another uid cannot reopen an fd it was sent through /proc with more
// access than the fd has), maps it read-write, then seals it with seals
// and extra. With extra F_SEAL_FUTURE_WRITE nobody, whatever fd it holds,
// can map the file writable again: only this mapping writes it.
func newMemfdSeals(name string, size int, extra int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, err
	}
	err = unix.Fchmod(fd, 0o600)
	if err == nil {
		err = unix.Ftruncate(fd, int64(size))
	}
	if err == nil {
		mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err == nil {
		if err = sealMemfd(fd, extra); err != nil {
			unix.Munmap(mem)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, mem, nil
}

// sealMemfd seals fd with seals and extra.
func sealMemfd(fd int, extra int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals|extra)
	if err == unix.EINVAL && extra != 0 {
		// A kernel before 5.1 has no F_SEAL_FUTURE_WRITE: the read-only
		// fds still hold (mode 0600 and O_RDONLY).
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
	}
	return err
}

// mapPeerFd maps size bytes of a memfd a peer sent, after checking that
// it is sealed against shrinking and at least size bytes long. It closes
// fd either way.
func mapPeerFd(fd int, size int, writable bool) ([]byte, error) {
	defer unix.Close(fd)
	if size <= 0 {
		return nil, ringError("empty region")
	}
	s, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || s&unix.F_SEAL_SHRINK == 0 {
		return nil, ringError("peer memory is not sealed against shrinking")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < int64(size) {
		return nil, ringError("peer memory smaller than announced")
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	return unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
}

// futexWait sleeps while *addr == val, at most d (d ≤ 0: no limit). The
// word may be shared with other processes (no FUTEX_PRIVATE_FLAG).
func futexWait(addr *uint32, val uint32, d time.Duration) {
	var ts *unix.Timespec
	if d > 0 {
		t := unix.NsecToTimespec(int64(d))
		ts = &t
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}

func futexWake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}

// A doorbell is one page each device shares with its peers, read-only
// to them (sealed F_SEAL_FUTURE_WRITE: no fd maps it writable): the
// device sets bellSleeping while its progress goroutine sleeps on the
// futex word bellSeq, which only the device itself changes. A peer that
// changed a ring this device reads, and sees the flag set, rings the
// bell (conn.ring): FUTEX_WAKE on bellSeq, which needs only read access,
// and a WAKE message on its own connection, after which the device's
// reader for that connection bumps bellSeq and wakes the futex (so a
// FUTEX_WAKE that came before the device's wait is not lost). One peer
// can therefore neither clear the flag nor absorb the wake-ups other
// peers send. In busy-poll mode nobody sleeps and
// ringing costs one atomic load.
const (
	bellSeq      = 0  // uint32 futex word
	bellSleeping = 64 // uint32: 1 while the progress goroutine sleeps
	bellBytes    = 4096
)

type doorbell []byte

func (b doorbell) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// recvmsg reads one message and its control data from the connection's
// socket without the sender's address: net.UnixConn.ReadMsgUnix builds a
// Sockaddr for every message, two allocations per WAKE, and a device
// whose peer sleeps between messages gets a WAKE per message. Close-on-
// exec is set on received fds, as the net package does.
func recvmsg(fd int, p, oob []byte) (n, oobn int, err error) {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	msg.Iov, msg.Iovlen = &iov, 1
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_CMSG_CLOEXEC)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}
