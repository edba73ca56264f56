package shm

import (
	"encoding/binary"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// TestLastMessagesOfPeerThatLeftWithUnread: a peer that sends its last
// messages and exits while messages from us wait unread in its socket
// (WAKEs we rang it with, say) makes the kernel report ECONNRESET to our
// reader before the messages the peer sent. They are still delivered:
// here the peer's UD ring, holding its last datagram, as udaddy's server
// sends its replies and exits. Everything happens before the reader
// starts, so the kernel's order is fixed.
func TestLastMessagesOfPeerThatLeftWithUnread(t *testing.T) {
	v := newSide(t, sideOpts{typ: verbs.QPTypeUD})
	defer v.close(t)
	p := cm.DefaultParams()
	p.QKey = 0x1234
	if err := cm.Connect(v.qp, v.endpoint(), cm.Endpoint{}, &p); err != nil {
		t.Fatal(err)
	}
	postRecv(t, v.qp, 7, v.mr.SGE(0, 40+64))

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	peer, ours := pair[0], pair[1]
	// A WAKE from us that the peer never reads.
	var wake [ctrlHdr]byte
	(&ctrl{typ: mWake}).encode(wake[:])
	if err := unix.Sendmsg(ours, wake[:], nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	// The peer's UD ring with one datagram in it, handed over, then the
	// peer exits.
	fd := sealedRingFd(t)
	mem, err := unix.Mmap(fd, 0, ringBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	r := newRing(mem)
	dst := r.payload()
	binary.LittleEndian.PutUint32(dst[udDestQPOff:], v.qp.QPNum())
	binary.LittleEndian.PutUint32(dst[udSrcQPOff:], 9)
	binary.LittleEndian.PutUint32(dst[udQKeyOff:], 0x1234)
	copy(dst[udHdrLen:], "last reply")
	r.publish(&slotHdr{op: opSend, flags: flagFirst | flagLast, length: udHdrLen + 10, msgLen: 10})
	unix.Munmap(mem)
	var ring [ctrlHdr]byte
	(&ctrl{typ: mUDRing}).encode(ring[:])
	if err := unix.Sendmsg(peer, ring[:], unix.UnixRights(fd), nil, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	unix.Close(peer)

	file := os.NewFile(uintptr(ours), "peer-that-left")
	fc, err := net.FileConn(file)
	file.Close()
	if err != nil {
		t.Fatal(err)
	}
	bellFd, bell, err := newMemfdBell() // the device unmaps it when the conn ends
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(bellFd)
	c, err := v.dev.addConn(fc.(*net.UnixConn), 0xF00D, uint32(os.Getuid()), bell, make([]byte, ctrlMax), make([]byte, unix.CmsgSpace(4*4)))
	if err != nil {
		t.Fatal(err)
	}
	<-c.done
	wc := poll(t, v.cq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 40+10 || string(v.mr.Bytes()[40:50]) != "last reply" {
		t.Fatalf("got %+v, %q; want the peer's last datagram", wc, v.mr.Bytes()[40:50])
	}
}
