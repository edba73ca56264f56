package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Key message sizes (perftest's KEY_MSG_SIZE and KEY_MSG_SIZE_GID), NUL
// included.
const (
	KeyMsgSize    = 59
	KeyMsgSizeGID = 108
)

// ErrMalformed is returned (wrapped) when a peer's message cannot be parsed.
var ErrMalformed = errors.New("perftest: malformed message")

// Dest is one queue pair's key as perftest exchanges it (struct
// pingpong_dest minus its local-only gid_index). The zero value is valid.
type Dest struct {
	LID uint16 // port LID; 0 on RoCE
	// OutReads is the number of outstanding RDMA READ/atomic requests the
	// QP allows: the device's max_qp_rd_atom (or -o) for read and atomic
	// tests, 1 otherwise. rxe says 128.
	OutReads int
	QPN      uint32   // 24 bits
	PSN      uint32   // 24 bits; perftest draws lrand48() & 0xffffff
	RKey     uint32   // the MR's rkey (0 from rxe when the MR has no remote access)
	VAddr    uint64   // the buffer address the peer should target
	GID      [16]byte // port GID, network byte order
	SRQN     uint32   // XRC/DC SRQ number, else 0
}

// MarshalDest returns the key message for d: KeyMsgSizeGID bytes in the GID
// format (used whenever a GID index is set, which perftest always does on
// RoCE), or KeyMsgSize bytes without the GID. Fields wider than the format
// (OutReads beyond 16 bits, QPN and PSN beyond 24) are masked so the message
// keeps its fixed size.
func MarshalDest(d Dest, withGID bool) []byte {
	n := KeyMsgSize
	if withGID {
		n = KeyMsgSizeGID
	}
	return AppendDest(make([]byte, 0, n), d, withGID)
}

// AppendDest appends the key message for d to b (see MarshalDest).
func AppendDest(b []byte, d Dest, withGID bool) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.OutReads)&0xffff, 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.RKey), 8)
	b = append(b, ':')
	b = appendHex(b, d.VAddr, 16)
	b = append(b, ':')
	if withGID {
		for _, g := range d.GID {
			b = appendHex(b, uint64(g), 2)
			b = append(b, ':')
		}
		b = appendHex(b, uint64(d.SRQN), 8)
		b = append(b, ':')
	} else {
		b = appendHex(b, uint64(d.SRQN), 8)
	}
	return append(b, 0)
}

func appendHex(b []byte, v uint64, width int) []byte {
	var tmp [16]byte
	s := strconv.AppendUint(tmp[:0], v, 16)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// ParseDest decodes a key message in the given format. Fields are hex
// numbers of any width separated by colons, the text ending at the first
// NUL; a GID-format message has 16 one-byte GID fields between the address
// and the SRQN, and may end with a colon.
func ParseDest(b []byte, withGID bool) (Dest, error) {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	fields := strings.Split(string(b), ":")
	want := 7
	if withGID {
		want = 23
		if len(fields) == want+1 && fields[want] == "" {
			fields = fields[:want]
		}
	}
	if len(fields) != want {
		return Dest{}, fmt.Errorf("%w: key %q has %d fields, want %d", ErrMalformed, b, len(fields), want)
	}
	var vals [23]uint64
	bits := [...]int{16, 16, 32, 32, 32, 64}
	for i, f := range fields {
		size := 32 // SRQN
		switch {
		case i < len(bits):
			size = bits[i]
		case withGID && i < 22:
			size = 8
		}
		v, err := strconv.ParseUint(f, 16, size)
		if err != nil {
			return Dest{}, fmt.Errorf("%w: key %q: field %d %q", ErrMalformed, b, i, f)
		}
		vals[i] = v
	}
	d := Dest{
		LID:      uint16(vals[0]),
		OutReads: int(vals[1]),
		QPN:      uint32(vals[2]),
		PSN:      uint32(vals[3]),
		RKey:     uint32(vals[4]),
		VAddr:    vals[5],
		SRQN:     uint32(vals[len(fields)-1]),
	}
	if withGID {
		for i := range d.GID {
			d.GID[i] = byte(vals[6+i])
		}
	}
	return d, nil
}

// GIDCompatible reports whether perftest's ctx_check_gid_compatibility
// accepts the pair: both GIDs IPv4-based (::ffff:a.b.c.d or the IPv4-encoded
// multicast ff0e::ffff:a.b.c.d) or neither. perftest aborts with "Found
// Incompatibility issue with GID types" otherwise.
func GIDCompatible(a, b [16]byte) bool {
	return gidIsV4(a) == gidIsV4(b)
}

func gidIsV4(g [16]byte) bool {
	// ipv6_addr_v4mapped: ::ffff:0:0/96, or ff0e::ffff:0:0/96.
	tail := [8]byte(g[4:12]) == [8]byte{6: 0xff, 7: 0xff}
	head := [4]byte(g[:4])
	return tail && (head == [4]byte{} || head == [4]byte{0xff, 0x0e, 0, 0})
}

// DestBinarySize is sizeof(struct pingpong_dest) on 64-bit Linux: the key
// message of the rdma_cm exchange (-R) and the size of the one receive
// perftest keeps posted there.
const DestBinarySize = 56

// MarshalDestBinary returns d as perftest's rdma_write_keys sends it over
// rdma_cm: struct pingpong_dest with every integer big-endian (htobe32,
// htobe64):
//
//	 0  lid         int32
//	 4  out_reads   int32
//	 8  qpn         int32
//	12  psn         int32
//	16  rkey        uint32
//	20  (padding)
//	24  vaddr       uint64
//	32  gid         16 bytes
//	48  srqn        uint32
//	52  gid_index   int32 (local only: sent as 0)
func MarshalDestBinary(d Dest) []byte {
	b := make([]byte, DestBinarySize)
	binary.BigEndian.PutUint32(b[0:], uint32(d.LID))
	binary.BigEndian.PutUint32(b[4:], uint32(d.OutReads))
	binary.BigEndian.PutUint32(b[8:], d.QPN)
	binary.BigEndian.PutUint32(b[12:], d.PSN)
	binary.BigEndian.PutUint32(b[16:], d.RKey)
	binary.BigEndian.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	binary.BigEndian.PutUint32(b[48:], d.SRQN)
	return b
}

// ParseDestBinary decodes a key sent by MarshalDestBinary or by perftest's
// rdma_write_keys. perftest's reader ignores srqn; it is decoded here all
// the same. Values that do not fit Dest's fields (a LID above 16 bits, a
// negative out_reads) are malformed.
func ParseDestBinary(b []byte) (Dest, error) {
	if len(b) != DestBinarySize {
		return Dest{}, fmt.Errorf("%w: binary key of %d bytes, want %d", ErrMalformed, len(b), DestBinarySize)
	}
	lid := binary.BigEndian.Uint32(b[0:])
	outReads := binary.BigEndian.Uint32(b[4:])
	if lid > 0xffff || outReads > 1<<24 {
		return Dest{}, fmt.Errorf("%w: binary key with LID %#x and out_reads %d", ErrMalformed, lid, int32(outReads))
	}
	d := Dest{
		LID:      uint16(lid),
		OutReads: int(outReads),
		QPN:      binary.BigEndian.Uint32(b[8:]),
		PSN:      binary.BigEndian.Uint32(b[12:]),
		RKey:     binary.BigEndian.Uint32(b[16:]),
		VAddr:    binary.BigEndian.Uint64(b[24:]),
		SRQN:     binary.BigEndian.Uint32(b[48:]),
	}
	copy(d.GID[:], b[32:48])
	return d, nil
}
