package cm

import (
	"encoding/binary"
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

// RemoteBufferLen is the length of a RemoteBuffer's binary form.
const RemoteBufferLen = 20

// RemoteBuffer describes memory a peer lets this side access with RDMA
// READ, WRITE and atomics: where it starts in the peer's address space,
// the key that grants access, and how long it is. A peer describes a
// memory region with RemoteBufferOf and sends the binary form
// (AppendBinary) in its private data or a message; this side parses it
// (UnmarshalBinary, ParseRemoteBuffer) and passes it to the one-sided
// calls of Conn. The zero value describes nothing (length 0).
type RemoteBuffer struct {
	Addr   uint64 // the first byte's address in the peer's MR (MR.Addr)
	RKey   uint32 // the MR's remote key (MR.RKey)
	Length uint64 // how many bytes from Addr may be accessed
}

// RemoteBufferOf describes all of mr for a peer.
func RemoteBufferOf(mr verbs.MR) RemoteBuffer {
	return RemoteBuffer{Addr: mr.Addr(), RKey: mr.RKey(), Length: uint64(mr.Len())}
}

// Slice describes the n bytes at offset off in b; it fails if they are
// not all inside b.
func (b RemoteBuffer) Slice(off, n uint64) (RemoteBuffer, error) {
	if off > b.Length || n > b.Length-off {
		return RemoteBuffer{}, fmt.Errorf("cm: %d bytes at offset %d are outside the %d-byte remote buffer", n, off, b.Length)
	}
	return RemoteBuffer{Addr: b.Addr + off, RKey: b.RKey, Length: n}, nil
}

func (b RemoteBuffer) String() string {
	return fmt.Sprintf("%#x+%d (rkey %#x)", b.Addr, b.Length, b.RKey)
}

// AppendBinary appends b's binary form to dst: RemoteBufferLen bytes,
// the address, the rkey and the length, big-endian (network order, as
// rping and perftest send theirs). It never fails and does not allocate
// when dst has room.
func (b RemoteBuffer) AppendBinary(dst []byte) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, b.Addr)
	dst = binary.BigEndian.AppendUint32(dst, b.RKey)
	return binary.BigEndian.AppendUint64(dst, b.Length), nil
}

// MarshalBinary returns b's binary form (AppendBinary).
func (b RemoteBuffer) MarshalBinary() ([]byte, error) {
	return b.AppendBinary(make([]byte, 0, RemoteBufferLen))
}

// UnmarshalBinary sets b from exactly RemoteBufferLen bytes of binary
// form. Bytes from a peer are untrusted: a buffer whose end would wrap
// around the address space is refused. Private data arrives padded to
// the CM message's size; ParseRemoteBuffer reads a buffer at its start.
func (b *RemoteBuffer) UnmarshalBinary(data []byte) error {
	if len(data) != RemoteBufferLen {
		return fmt.Errorf("cm: a remote buffer is %d bytes, not %d (ParseRemoteBuffer reads one at the start of longer data)", RemoteBufferLen, len(data))
	}
	v, _, err := ParseRemoteBuffer(data)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// ParseRemoteBuffer reads a RemoteBuffer's binary form at the start of
// data and returns it and the bytes after it.
func ParseRemoteBuffer(data []byte) (b RemoteBuffer, rest []byte, err error) {
	if len(data) < RemoteBufferLen {
		return RemoteBuffer{}, data, fmt.Errorf("cm: %d bytes hold no remote buffer (%d needed)", len(data), RemoteBufferLen)
	}
	b.Addr = binary.BigEndian.Uint64(data)
	b.RKey = binary.BigEndian.Uint32(data[8:])
	b.Length = binary.BigEndian.Uint64(data[12:])
	if b.Addr+b.Length < b.Addr {
		return RemoteBuffer{}, data, fmt.Errorf("cm: remote buffer %v wraps around the address space", b)
	}
	return b, data[RemoteBufferLen:], nil
}
