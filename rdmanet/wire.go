package rdmanet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// rsocket's wire format, as librdmacm's rsocket.c defines it.
//
// A stream rsocket moves every message as an RDMA WRITE WITH IMMEDIATE;
// the 32-bit immediate (big-endian on the wire, as every immediate is)
// says what the message is: bits 31..29 the operation, bits 28..0 its
// argument.
//
//	RS_OP_DATA  (0)  payload of <arg> bytes was written at the next free
//	                 place of the receiver's ring
//	RS_OP_SGL   (4)  credit update: the sender may now send messages up
//	                 to sequence number <arg> (16 bits used); when the
//	                 WRITE carries 16 bytes they are an rs_sge naming a
//	                 fresh half of the ring, written into the target SGL
//	RS_OP_IOMAP_SGL (6) an iomap entry changed (riomap; ignored here)
//	RS_OP_CTRL  (7)  <arg> = RS_CTRL_DISCONNECT (0), KEEPALIVE (1),
//	                 SHUTDOWN (2)
//
// The connection data (struct rs_conn_data, 40 bytes) rides in the CM
// REQ's and REP's private data right after rdma_cm's header.
const (
	opData     = 0
	opWrite    = 2 // RS_OP_WRITE: never on the wire
	opSGL      = 4
	opIOMapSGL = 6
	opCtrl     = 7

	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2

	connDataLen = 40 // sizeof(struct rs_conn_data)
	sgeLen      = 16 // sizeof(struct rs_sge): addr u64, key u32, length u32
	sglSize     = 2  // RS_SGL_SIZE: entries in the target SGL
	iomapLen    = 24 // sizeof(struct rs_iomap): offset u64, then an rs_sge

	connFlagNet   = 1 << 0 // RS_CONN_FLAG_NET: the sender is big-endian
	connFlagIOMap = 1 << 1 // RS_CONN_FLAG_IOMAP

	// rsocket's defaults (def_sqsize, def_rqsize, def_inline) and limits.
	// The buffers are 4 times rsocket's def_mem and def_wmem (128 KiB):
	// the ring is granted in halves, and with 64 KiB halves a stream of
	// 64 KiB writes waited for every half's credit (a round trip per
	// write); 512 KiB took a third off the CPU per byte on loopback.
	defaultRecvBuffer = 1 << 19
	defaultSendBuffer = 1 << 19
	defaultQueueDepth = 384
	defaultInline     = 64
	qpCtrlSize        = 4     // RS_QP_CTRL_SIZE: control messages in flight
	sndLowat          = 2048  // RS_SNDLOWAT
	olapStartSize     = 2048  // RS_OLAP_START_SIZE (IOWrite)
	maxTransfer       = 65536 // RS_MAX_TRANSFER
	minQueueDepth     = 16    // RS_QP_MIN_SIZE
	maxMsgData        = 1<<29 - 1
)

func msgSet(op, data uint32) uint32 { return op<<29 | data&maxMsgData }
func msgOp(imm uint32) uint32       { return imm >> 29 }
func msgData(imm uint32) uint32     { return imm & maxMsgData }

// sge is struct rs_sge.
type sge struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// encode writes s in the byte order order (the receiver's host order,
// which rsocket writes SGL entries in).
func (s sge) encode(b []byte, order binary.ByteOrder) {
	order.PutUint64(b[0:], s.Addr)
	order.PutUint32(b[8:], s.Key)
	order.PutUint32(b[12:], s.Length)
}

func decodeSGE(b []byte, order binary.ByteOrder) sge {
	return sge{Addr: order.Uint64(b[0:]), Key: order.Uint32(b[8:]), Length: order.Uint32(b[12:])}
}

// connData is struct rs_conn_data. Its multi-byte fields are big-endian
// on the wire (htobe16/32/64 in rs_format_conn_data).
type connData struct {
	Version        uint8
	Flags          uint8
	Credits        uint16
	TargetIOMapExp uint8 // target_iomap_size, as rs_value_to_scale(size, 8)
	TargetSGL      sge   // where the peer's target SGL lives (Length: entries)
	DataBuf        sge   // the first half of the peer's receive ring
}

func (c *connData) encode(b []byte) {
	b[0], b[1] = c.Version, c.Flags
	binary.BigEndian.PutUint16(b[2:], c.Credits)
	b[4], b[5], b[6] = 0, 0, 0
	b[7] = c.TargetIOMapExp
	c.TargetSGL.encode(b[8:], binary.BigEndian)
	c.DataBuf.encode(b[24:], binary.BigEndian)
}

var errConnData = errors.New("rdmanet: the peer's private data is not rsocket connection data")

func decodeConnData(b []byte) (connData, error) {
	if len(b) < connDataLen {
		return connData{}, fmt.Errorf("%w: %d bytes, want %d", errConnData, len(b), connDataLen)
	}
	c := connData{Version: b[0], Flags: b[1], Credits: binary.BigEndian.Uint16(b[2:]), TargetIOMapExp: b[7],
		TargetSGL: decodeSGE(b[8:], binary.BigEndian), DataBuf: decodeSGE(b[24:], binary.BigEndian)}
	switch {
	case c.Version != 1:
		return c, fmt.Errorf("%w: version %d, want 1", errConnData, c.Version)
	case c.Credits == 0:
		return c, fmt.Errorf("%w: no credits", errConnData)
	case c.TargetSGL.Length == 0 || c.TargetSGL.Length > 1<<16:
		return c, fmt.Errorf("%w: target SGL of %d entries", errConnData, c.TargetSGL.Length)
	case c.DataBuf.Length == 0 || c.DataBuf.Length > maxMsgData:
		return c, fmt.Errorf("%w: data buffer of %d bytes", errConnData, c.DataBuf.Length)
	}
	return c, nil
}

// valueToScale and scaleToValue are rsocket's compact encoding of the
// iomap size in rs_conn_data (rs_value_to_scale, rs_scale_to_value).
func valueToScale(v, bits int) int {
	if v <= 1<<(bits-1) {
		return v
	}
	return 1<<(bits-1) | v>>bits
}

func scaleToValue(v, bits int) int {
	if v <= 1<<(bits-1) {
		return v
	}
	return (v &^ (1 << (bits - 1))) << bits
}

// iomap is struct rs_iomap: a peer's buffer mapped at an offset.
type iomap struct {
	Offset uint64
	SGE    sge
}

func (m iomap) encode(b []byte, order binary.ByteOrder) {
	order.PutUint64(b, m.Offset)
	m.SGE.encode(b[8:], order)
}

func decodeIOMap(b []byte, order binary.ByteOrder) iomap {
	return iomap{Offset: order.Uint64(b), SGE: decodeSGE(b[8:], order)}
}
