package wire

import "encoding/binary"

// RETH is a view of the RDMA Extended Transport Header (IBTA 9.3.3): the
// remote address, key and length of an RDMA WRITE or READ. Accessors need
// len(r) >= RETHLen.
type RETH []byte

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// SetVA sets the remote virtual address.
func (r RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(r[0:], va) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// SetRKey sets the remote key.
func (r RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// DMALen returns the length of the whole RDMA operation in bytes.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// SetDMALen sets the length of the whole RDMA operation.
func (r RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(r[12:], n) }

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// Encode writes all 16 bytes of the RETH.
func (r RETH) Encode(f *RETHFields) {
	_ = r[RETHLen-1]
	r.SetVA(f.VA)
	r.SetRKey(f.RKey)
	r.SetDMALen(f.DMALen)
}

// Fields returns the RETH's fields.
func (r RETH) Fields() RETHFields {
	return RETHFields{VA: r.VA(), RKey: r.RKey(), DMALen: r.DMALen()}
}

// AETH is a view of the ACK Extended Transport Header (IBTA 9.3.5): the
// syndrome (ACK, RNR NAK or NAK, see SyndromeType) and the responder's
// 24-bit message sequence number. Accessors need len(a) >= AETHLen.
type AETH []byte

// Syndrome returns the syndrome byte (IBTA 9.7.5.2, table 42).
func (a AETH) Syndrome() uint8 { return a[0] }

// SetSyndrome sets the syndrome byte.
func (a AETH) SetSyndrome(s uint8) { a[0] = s }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return get24(a[1:]) }

// SetMSN sets the message sequence number; msn is masked to 24 bits.
func (a AETH) SetMSN(msn uint32) { put24(a[1:], msn) }

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome uint8
	MSN      uint32 // 24 bits
}

// Encode writes all 4 bytes of the AETH.
func (a AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(a, uint32(f.Syndrome)<<24|f.MSN&0xFFFFFF)
}

// Fields returns the AETH's fields.
func (a AETH) Fields() AETHFields { return AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()} }

// AtomicETH is a view of the Atomic Extended Transport Header (IBTA
// 9.3.4): the target of a CmpSwap or FetchAdd and its operands. Accessors
// need len(a) >= AtomicETHLen.
type AtomicETH []byte

// VA returns the remote virtual address (8-byte aligned).
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// SetVA sets the remote virtual address.
func (a AtomicETH) SetVA(va uint64) { binary.BigEndian.PutUint64(a[0:], va) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SetRKey sets the remote key.
func (a AtomicETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(a[8:], k) }

// SwapAdd returns the swap value (CmpSwap) or the addend (FetchAdd).
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// SetSwapAdd sets the swap or add operand.
func (a AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(a[12:], v) }

// Compare returns the compare operand (CmpSwap; ignored by FetchAdd).
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// SetCompare sets the compare operand.
func (a AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(a[20:], v) }

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// Encode writes all 28 bytes of the AtomicETH.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	_ = a[AtomicETHLen-1]
	a.SetVA(f.VA)
	a.SetRKey(f.RKey)
	a.SetSwapAdd(f.SwapAdd)
	a.SetCompare(f.Compare)
}

// Fields returns the AtomicETH's fields.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
}

// AtomicAckETH is a view of the Atomic Acknowledge Extended Transport
// Header (IBTA 9.3.6): the value the target held before the atomic.
// Accessors need len(a) >= AtomicAckETHLen.
type AtomicAckETH []byte

// OrigData returns the original remote data.
func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a) }

// SetOrigData sets the original remote data.
func (a AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(a, v) }

// ImmDt is a view of the Immediate Data header (IBTA 9.3.7). Accessors need
// len(i) >= ImmDtLen.
type ImmDt []byte

// Imm returns the immediate data: the 4 bytes read big-endian. (libibverbs
// hands imm_data to applications in network byte order; converting is the
// verbs layer's business.)
func (i ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(i) }

// SetImm writes v big-endian.
func (i ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH is a view of the Invalidate Extended Transport Header (IBTA 9.3.8):
// the rkey a SEND with Invalidate invalidates. Accessors need
// len(i) >= IETHLen.
type IETH []byte

// RKey returns the rkey to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey sets the rkey to invalidate.
func (i IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(i, k) }

// DETH is a view of the Datagram Extended Transport Header (IBTA 9.3.2),
// carried by UD packets: the Q_Key and the 24-bit source QP. Accessors need
// len(d) >= DETHLen.
type DETH []byte

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d[0:]) }

// SetQKey sets the queue key.
func (d DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(d[0:], k) }

// SrcQP returns the 24-bit source QP number.
func (d DETH) SrcQP() uint32 { return get24(d[5:]) }

// SetSrcQP sets the source QP number; qpn is masked to 24 bits.
func (d DETH) SetSrcQP(qpn uint32) { put24(d[5:], qpn) }

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// Encode writes all 8 bytes of the DETH; the reserved byte 4 is zero.
func (d DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(d[0:], f.QKey)
	binary.BigEndian.PutUint32(d[4:], f.SrcQP&0xFFFFFF)
}

// Fields returns the DETH's fields.
func (d DETH) Fields() DETHFields { return DETHFields{QKey: d.QKey(), SrcQP: d.SrcQP()} }
