package shm

// What a peer may make this device hold, and who a peer is.
//
// A RING message hands this device a peer QP's request ring (a 512 KiB
// memfd), which the device maps at once and keeps until its QP connected
// to that peer QP takes it. Each mapping is an entry in the process's
// memory-map table (vm.max_map_count, 65530 by default), so a peer could
// exhaust it with RINGs naming made-up QPNs: the device maps a RING only
// for an RC QP of its own, holds at most maxRingsPerPeer unclaimed rings
// per connection and maxRings in all, and refuses (counts, ring_refused)
// the rest. A RING replacing one for the same QP pair unmaps the old one.
//
// A peer's device id comes in its HELLO. The dialer knows whom it
// reached: the kernel gives a socket name to one listener, and the name
// is the id. The accepting side verifies the claim: it connects to the
// socket the claimed id names and requires that the process listening
// there (SO_PEERCRED) is the process that dialed. Another process, even
// of the same user, cannot then pose as a connected device: its RINGs,
// datagrams and disconnection act only on what its own devices created.

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// Limits on the rings peers may park at a device before its QPs claim
// them: a QP claims its peer's ring as soon as it reaches RTR, so only
// QPs being connected have one waiting.
const (
	maxRingsPerPeer = 64
	maxRings        = 1024
)

// takeRing maps a peer's request ring and parks it for our QP m.b, if
// the limits allow. It closes fd. It returns false to drop the
// connection (a ring that cannot be mapped: not sealed, too small).
func (c *conn) takeRing(m *ctrl, fd int) bool {
	d := c.dev
	d.mu.Lock()
	qp := d.qpByNum[m.b]
	k := inboxKey{peer: c.peerID, local: m.b, remot: m.a}
	old := d.inboxes[k]
	ok := qp != nil && qp.typ == verbs.QPTypeRC && (old != nil || (c.rings < maxRingsPerPeer && len(d.inboxes) < maxRings))
	d.mu.Unlock()
	if !ok {
		unix.Close(fd)
		d.ctr.ringRefused.Add(1)
		return true
	}
	mem, err := mapPeerFd(fd, ringBytes, true)
	if err != nil {
		return false
	}
	d.mu.Lock()
	old = d.inboxes[k]
	if old == nil && (c.rings >= maxRingsPerPeer || len(d.inboxes) >= maxRings || d.closed) {
		// Another reader of the same peer filled the room meanwhile.
		d.mu.Unlock()
		unix.Munmap(mem)
		d.ctr.ringRefused.Add(1)
		return true
	}
	if old != nil {
		d.dropInboxLocked(k, old)
	}
	d.inboxes[k] = &mapping{mem: mem, from: c}
	c.rings++
	d.mu.Unlock()
	d.kick()
	return true
}

// dropInboxLocked forgets a parked ring and unmaps it. Precondition:
// d.mu held.
func (d *Device) dropInboxLocked(k inboxKey, m *mapping) {
	delete(d.inboxes, k)
	m.from.rings--
	m.unmap()
}

// claimInboxLocked hands a parked ring to the QP that consumes it.
// Precondition: d.mu held.
func (d *Device) claimInboxLocked(k inboxKey) []byte {
	m := d.inboxes[k]
	if m == nil {
		return nil
	}
	delete(d.inboxes, k)
	m.from.rings--
	return m.mem
}

// verifyPeerID checks that the process that dialed us (pid) listens for
// device id: that it is the device it says it is.
func (d *Device) verifyPeerID(id uint64, pid int32) bool {
	if pid <= 0 || id == 0 {
		return false // a process in a PID namespace we cannot see
	}
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: d.sockName(id), Net: "unixpacket"})
	if err != nil {
		return false
	}
	defer uc.Close()
	cred, err := peerCred(uc)
	return err == nil && cred.Pid == pid
}
