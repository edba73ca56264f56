// Package pingpong implements the out-of-band exchange and the report lines of
// rdma-core's example programs ibv_rc_pingpong, ibv_uc_pingpong,
// ibv_ud_pingpong and ibv_srq_pingpong (libibverbs/examples), so a softrdma
// tool can talk to them over TCP and print what they print.
//
// The exchange, checked against rdma-core 44 captures (port 18515):
//
//	client → server  52 bytes  "LLLL:QQQQQQ:PPPPPP:GGGG…GGGG\x00" (its Dest)
//	                           the server now moves its QP to RTR/RTS
//	server → client  52 bytes  the server's Dest, same format
//	client → server   5 bytes  "done\x00"
//
// then both sides close the connection. ibv_srq_pingpong sends SRQMaxQP (256)
// lines each way instead of one (unused entries are all zeros) before "done".
//
// The package depends only on the standard library; it knows nothing of the
// verbs API and moves plain values.
package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultPort is the TCP port the pingpong examples listen on and connect to.
const DefaultPort = 18515

// MsgSize is the size of one address message on the wire: the C programs
// declare char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"]
// and always write the whole array, so the text is followed by its NUL.
const MsgSize = len("0000:000000:000000:00000000000000000000000000000000") + 1

// doneMsg is what the client sends after reading the server's address:
// write(fd, "done", sizeof "done"), so five bytes including the NUL.
const doneMsg = "done\x00"

// SRQMaxQP is the number of address messages ibv_srq_pingpong exchanges in
// each direction, whatever its -q option says (MAX_QP in srq_pingpong.c).
const SRQMaxQP = 256

// ErrMalformed is returned (wrapped) when a peer's address message cannot be
// parsed.
var ErrMalformed = errors.New("pingpong: malformed address message")

// Dest is one queue pair's address as the pingpong examples exchange it.
// The zero value is a valid (all-zero) address.
type Dest struct {
	LID uint16   // port LID; 0 on RoCE
	QPN uint32   // queue pair number (24 bits)
	PSN uint32   // initial packet sequence number (24 bits)
	GID [16]byte // port GID in network byte order; zero when no -g was given
}

// Marshal returns the MsgSize-byte wire form of d: the text
// "%04x:%06x:%06x:%s" (LID, QPN, PSN, 32 hex digits of GID) and a NUL.
//
// The GID digits are the 16 GID bytes in order: rdma-core's gid_to_wire_gid
// prints htobe32 of each raw 32-bit word with %08x, which on any host is the
// word's bytes in memory order. QPN and PSN are masked to 24 bits so the
// message always fits.
func Marshal(d Dest) []byte {
	return Append(make([]byte, 0, MsgSize), d)
}

// Append appends the MsgSize-byte wire form of d to b (see Marshal).
func Append(b []byte, d Dest) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	b = hex.AppendEncode(b, d.GID[:])
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

// Parse decodes an address message. It accepts what the C programs' sscanf
// ("%x:%x:%x:%s") accepts from well-formed peers: three hexadecimal fields of
// any width separated by colons, then at least 32 hex digits of GID, the
// text ending at the first NUL (or at the end of b).
func Parse(b []byte) (Dest, error) {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	fields := strings.SplitN(string(b), ":", 4)
	if len(fields) != 4 {
		return Dest{}, fmt.Errorf("%w: %q: want LID:QPN:PSN:GID", ErrMalformed, b)
	}
	var d Dest
	lid, err := strconv.ParseUint(fields[0], 16, 16)
	if err != nil {
		return Dest{}, fmt.Errorf("%w: LID %q", ErrMalformed, fields[0])
	}
	qpn, err := strconv.ParseUint(fields[1], 16, 32)
	if err != nil {
		return Dest{}, fmt.Errorf("%w: QPN %q", ErrMalformed, fields[1])
	}
	psn, err := strconv.ParseUint(fields[2], 16, 32)
	if err != nil {
		return Dest{}, fmt.Errorf("%w: PSN %q", ErrMalformed, fields[2])
	}
	gid := strings.TrimRight(fields[3], " \t\r\n")
	if len(gid) < 32 {
		return Dest{}, fmt.Errorf("%w: GID %q: want 32 hex digits", ErrMalformed, gid)
	}
	if _, err := hex.Decode(d.GID[:], []byte(gid[:32])); err != nil {
		return Dest{}, fmt.Errorf("%w: GID %q", ErrMalformed, gid)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}
