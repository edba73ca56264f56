package shm

import (
	"encoding/binary"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// FuzzCtrlPeer speaks the control protocol to a device as a hostile
// peer would: the input is a stream of messages, each [flags, length
// (2 bytes, little-endian), bytes], written into a connection the
// device serves as one from a peer that passed the handshake (flags bit
// 0: attach a sealed ring-sized memfd; bit 1: an unsealed one; bit 2:
// two fds). The device must not panic, must keep within its limits on
// parked rings while the connection lives, and must hold nothing of the
// peer's once it goes.
func FuzzCtrlPeer(f *testing.F) {
	msg := func(flags byte, m ctrl, payload []byte) []byte {
		b := make([]byte, ctrlHdr+len(payload))
		m.encode(b)
		copy(b[ctrlHdr:], payload)
		return append([]byte{flags, byte(len(b)), byte(len(b) >> 8)}, b...)
	}
	const victimQP = 0 // replaced by the victim QP's number in the fuzz function
	f.Add(msg(1, ctrl{typ: mRing, a: 7, b: victimQP}, nil))
	f.Add(append(msg(1, ctrl{typ: mRing, a: 7, b: victimQP}, nil), msg(1, ctrl{typ: mRing, a: 7, b: victimQP}, nil)...))
	f.Add(msg(2, ctrl{typ: mRing, a: 8, b: victimQP}, nil))
	f.Add(msg(0, ctrl{typ: mGrantReq, reqID: 1, a: 7, b: victimQP, c: 3, d: uint32(verbs.AccessRemoteRead)}, nil))
	f.Add(msg(0, ctrl{typ: mCopyWrite, reqID: 2, a: 7, b: victimQP, c: 3, x: 4096, y: 8}, make([]byte, 8)))
	f.Add(msg(0, ctrl{typ: mRevoke, reqID: 3, c: 3}, nil))
	f.Add(msg(0, ctrl{typ: mUD, a: gsiQPN, b: gsiQPN, c: verbs.GSIQKey}, []byte("mad")))
	f.Add(msg(0, ctrl{typ: mWake}, nil))
	f.Add(msg(1, ctrl{typ: mGrantResp, reqID: 9}, nil))
	f.Add([]byte{0, 3, 0, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		v := newSide(t, sideOpts{})
		defer v.close(t)
		qpn := v.qp.QPNum()
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		peer := pair[0]
		defer unix.Close(peer)
		file := os.NewFile(uintptr(pair[1]), "fuzz-peer")
		fc, err := net.FileConn(file)
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
		bellFd, bell, err := newMemfdBell() // the device unmaps it at Close
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(bellFd)
		c, err := v.dev.addConn(fc.(*net.UnixConn), 0xF00D, uint32(os.Getuid()), bell, make([]byte, ctrlMax), make([]byte, unix.CmsgSpace(4*4)))
		if err != nil {
			t.Fatal(err)
		}
		// The device's answers are read (and their fds closed) as they
		// come, so that neither side waits for the other.
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			buf, oob := make([]byte, ctrlMax), make([]byte, unix.CmsgSpace(4*4))
			for {
				n, oobn, _, _, err := unix.Recvmsg(peer, buf, oob, 0)
				if err != nil || n == 0 {
					return
				}
				closeFds(parseFds(oob[:oobn]))
				if m, ok := decodeCtrl(buf[:n]); ok && m.typ == mGrantResp && m.reqID == 0xFFFFFFFF {
					return
				}
			}
		}()
		for len(data) >= 3 {
			flags := data[0]
			n := min(int(binary.LittleEndian.Uint16(data[1:3]))%(ctrlMax+1), len(data)-3)
			b := append([]byte(nil), data[3:3+n]...)
			data = data[3+n:]
			if len(b) >= 16 && b[0] == mRing && binary.LittleEndian.Uint32(b[12:]) == victimQP {
				binary.LittleEndian.PutUint32(b[12:], qpn)
			}
			var fds []int
			if flags&1 != 0 {
				fds = append(fds, sealedRingFd(t))
			}
			if flags&2 != 0 {
				fd, _ := unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC)
				unix.Ftruncate(fd, ringBytes)
				fds = append(fds, fd)
			}
			if flags&4 != 0 {
				fds = append(fds, sealedRingFd(t), sealedRingFd(t))
			}
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			err := unix.Sendmsg(peer, b, oob, nil, 0)
			closeFds(fds)
			if err != nil {
				break // the device dropped us
			}
		}
		// A request the device answers after everything before it.
		var probe [ctrlHdr]byte
		(&ctrl{typ: mGrantReq, reqID: 0xFFFFFFFF}).encode(probe[:])
		if unix.Sendmsg(peer, probe[:], nil, nil, 0) != nil {
			unix.Shutdown(peer, unix.SHUT_RDWR)
		}
		select {
		case <-probed:
		case <-time.After(10 * time.Second):
			t.Fatal("no answer to the probe")
		}
		if n := ringsFrom(v.dev, c); n > maxRingsPerPeer {
			t.Fatalf("%d rings parked from one peer", n)
		}
		if n := parkedRings(v.dev); n > maxRings {
			t.Fatalf("%d rings parked", n)
		}
		unix.Shutdown(peer, unix.SHUT_RDWR)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the device did not see the peer go")
		}
		// closeNow unparks the peer's rings just after done closes.
		for deadline := time.Now().Add(5 * time.Second); ringsFrom(v.dev, c) != 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%d rings of a peer that left are still parked", ringsFrom(v.dev, c))
			}
			time.Sleep(time.Millisecond)
		}
	})
}
