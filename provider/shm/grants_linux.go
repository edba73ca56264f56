package shm

// What a peer holds of this device's memory, and what ends it.
//
// A grant hands a peer's device the memfd of an AllocMR region so that
// its QP maps the pages. The fd decides what the peer can do, whatever
// it asks mmap for: a grant whose QP and region together allow remote
// WRITE or atomics carries the region's read-write fd; any other grant
// carries a read-only fd of the same file, opened anew through
// /proc/self/fd (a file description opened read-only cannot be mapped
// writable, nor made writable by mprotect). Every memfd is mode 0600, so
// a peer of another uid cannot reopen its read-only fd for writing
// through /proc either; and a region without remote write or atomic
// access is sealed F_SEAL_FUTURE_WRITE once the owner has mapped it, so
// that no process can map it writable again, whatever fd it holds.
//
// The owner remembers, per QP, the rkeys it granted through it. When
// the QP leaves the states in which a responder executes requests (ERR,
// RESET, Destroy) or its access flags change, the owner sends REVOKE for
// each; Destroy waits for the answers (a peer that does not answer
// within 2 s loses its connection). DeregMR revokes the region from
// every peer and unmaps it; a closed connection ends every grant at
// both ends. Grant requests and COPY_* requests through a QP that is not
// connected and serving are refused.
//
// What REVOKE cannot do: the kernel does not let one process take back
// another's mapping of a shared file. A peer that runs this package
// unmaps when told; a hostile peer can keep the fd it was sent and the
// mapping it made, with the access the fd allows, until the owner
// deregisters the region: Dereg unmaps the owner's pages and closes its
// fd, after which the peer holds pages the owner never looks at again.
// docs/security.md says this for users.

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// qpGrants are the rkeys a QP's peer was granted through it, and over
// which connection (two devices that dialed each other at once have two,
// and a peer asks over the one it dialed).
type qpGrants struct {
	mu    sync.Mutex
	open  bool // the QP serves its peer: grants may be given
	given map[givenKey]bool
}

type givenKey struct {
	c    *conn
	rkey uint32
}

// grantsToRevoke are a QP's grants taken back: peer QP dest's mappings.
type grantsToRevoke struct {
	dest uint32
	keys []givenKey
}

// openGrantsLocked lets peers be granted access through the QP, once it
// is connected. Precondition: qp.mu held.
func (qp *QP) openGrantsLocked() {
	qp.given.mu.Lock()
	qp.given.open, qp.given.given = true, map[givenKey]bool{}
	qp.given.mu.Unlock()
}

// closeGrantsLocked stops granting through the QP and returns what must
// be revoked. Precondition: qp.mu held.
func (qp *QP) closeGrantsLocked() (r grantsToRevoke, wasOpen bool) {
	qp.given.mu.Lock()
	defer qp.given.mu.Unlock()
	if !qp.given.open {
		return r, false
	}
	qp.given.open = false
	for k := range qp.given.given {
		r.keys = append(r.keys, k)
	}
	qp.given.given = nil
	r.dest = qp.destQPN.Load()
	return r, true
}

// revokeGrantsLater closes the QP's grants and revokes them without
// waiting (the caller may be the progress goroutine). Precondition:
// qp.mu held.
func (qp *QP) revokeGrantsLater() {
	r, _ := qp.closeGrantsLocked()
	r.revokeLater(qp.dev)
}

// revokeLater runs revoke on a goroutine the device waits for at Close.
func (r grantsToRevoke) revokeLater(d *Device) {
	if len(r.keys) == 0 {
		return
	}
	d.connWG.Add(1)
	go func() {
		defer d.connWG.Done()
		r.revoke()
	}()
}

// revoke asks the peer to unmap each grant for its QP dest and waits for
// each answer; a peer that does not answer is cut off.
func (r grantsToRevoke) revoke() {
	for _, k := range r.keys {
		c := k.c
		if c.dead.Load() {
			continue
		}
		if _, err := c.call(&ctrl{typ: mRevoke, a: r.dest, c: k.rkey}, nil, 2*time.Second); err != nil {
			c.close()
			<-c.done
		}
	}
}

// noteGrant records that the peer is granted rkey over c through the QP,
// and reports false if the QP no longer grants anything.
func (qp *QP) noteGrant(c *conn, rkey uint32) bool {
	qp.given.mu.Lock()
	defer qp.given.mu.Unlock()
	if !qp.given.open {
		return false
	}
	qp.given.given[givenKey{c, rkey}] = true
	return true
}

// serving reports whether the QP executes its peer's one-sided requests.
func (qp *QP) serving() bool {
	qp.given.mu.Lock()
	defer qp.given.mu.Unlock()
	return qp.given.open
}

// readOnlyFd opens the file fd names again, read-only: an fd a peer
// cannot map writable.
func readOnlyFd(fd int) (int, error) {
	return unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// grantFd returns the fd to send with a grant of mr for access eff (the
// QP's and the region's together), and whether the caller must close it
// after sending. ok is false if no read-only fd could be made: the grant
// then goes through the owner's copies.
func grantFd(mr *MR, eff verbs.Access) (fd int, closeAfter, ok bool) {
	if eff&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
		return mr.fd, false, true
	}
	ro, err := readOnlyFd(mr.fd)
	if err != nil {
		return -1, false, false
	}
	return ro, true, true
}
