package udp

// Control messages of the batched system calls. Send attaches at most two
// to a message — UDP_SEGMENT for a GSO run and IP_TOS / IPV6_TCLASS for a
// traffic class other than the socket's — and receive reads UDP_GRO and
// the datagram's IP_TOS / IPV6_TCLASS. Both work in place in the message's
// slot of the batch's control buffer: nothing is allocated per message.

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// putSendCtrl writes message's control messages into ctrl (ctrlSlot
// bytes): UDP_SEGMENT if the message carries k > 1 segments of seg bytes,
// and the traffic class if tclass is not the socket's (sockTClass). It
// returns the control length, 0 for none.
func putSendCtrl(ctrl []byte, k, seg int, tclass, sockTClass uint8, v6 bool) int {
	n := 0
	if k > 1 {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafe.Pointer(&ctrl[unix.CmsgLen(0)])) = uint16(seg)
		n = unix.CmsgSpace(2)
	}
	if tclass != sockTClass {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[n]))
		cm.Level, cm.Type = unix.IPPROTO_IP, unix.IP_TOS
		if v6 {
			cm.Level, cm.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
		}
		cm.SetLen(unix.CmsgLen(4))
		*(*int32)(unsafe.Pointer(&ctrl[n+unix.CmsgLen(0)])) = int32(tclass)
		n += unix.CmsgSpace(4)
	}
	return n
}

// parseRecvCtrl reads the control messages of one received message: the
// GRO segment size (0: one packet) and the traffic class byte (0 if
// absent). ctrl is what the kernel wrote (the message's control length);
// anything it does not know, or that does not fit, it skips.
func parseRecvCtrl(ctrl []byte) (gro int, tclass uint8) {
	hdr := unix.CmsgLen(0)
	for len(ctrl) >= hdr {
		// The kernel aligns every header (the caller's buffer is
		// word-aligned, and CmsgSpace keeps the alignment).
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		l, level, typ := int(cm.Len), cm.Level, cm.Type
		if l < hdr || l > len(ctrl) {
			return gro, tclass
		}
		data := ctrl[hdr:l]
		switch {
		case level == unix.SOL_UDP && typ == unix.UDP_GRO && len(data) >= 4:
			gro = int(int32(binary.NativeEndian.Uint32(data)))
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS && len(data) >= 1:
			tclass = data[0] // IPv4: one byte
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			tclass = uint8(binary.NativeEndian.Uint32(data)) // IPv6: an int
		}
		next := unix.CmsgSpace(l - hdr)
		if next > len(ctrl) {
			return gro, tclass
		}
		ctrl = ctrl[next:]
	}
	return gro, tclass
}
