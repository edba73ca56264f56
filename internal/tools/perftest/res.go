package perftest

// The verbs resources of a perftest-compatible benchmark, laid out as
// perftest 4.5 lays them out (alloc_ctx, create_single_mr, ctx_init,
// set_up_connection, ctx_connect), so that the addresses and keys a peer
// receives mean what perftest means by them:
//
//	one MR of 2·N·INC(BUFF_SIZE) bytes, N = number of QPs:
//	  [ send 0 | send 1 | … | send N−1 | recv 0 | recv 1 | … | recv N−1 ]
//	  send region i at i·BUFF_SIZE: what QP i writes, reads into, sends
//	  recv region i at (N+i)·BUFF_SIZE: the VAddr QP i advertises, which the
//	  peer writes to, reads from or targets with atomics
//
// BUFF_SIZE is the larger of the message size (8 MiB with -a) and the
// "cycle buffer" (the page size). Messages of at most half a cycle buffer
// step through it in cache-line-aligned slots, in lockstep on both ends.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// ptMinRNRTimer is perftest's MIN_RNR_TIMER.
const ptMinRNRTimer = 12

// perftest's UD constants: DEF_QKEY, and UD_ADDITION, the 40-byte GRH area
// in front of every UD receive.
const (
	ptQKey       = 0x11111111
	ptUDAddition = 40
)

// ptResources are one test's PD, MR, CQs and QPs (struct pingpong_context).
type ptResources struct {
	ctx    verbs.Context
	pd     verbs.PD
	mr     verbs.MR
	buf    []byte
	sendCQ verbs.CQ
	recvCQ verbs.CQ // SEND tests; the send CQ otherwise
	// events is -e's completion channel, of both CQs (nil without -e).
	events *verbs.CompChannel
	qps    []verbs.QP
	conn   perftest.Connection
	ahs    []verbs.AH // UD: one per QP on a sending end (connectUD)
	// qpMRs are --mr_per_qp's MRs, one per QP (QP 0's is mr): each
	// [ send | recv ] of INC(BUFF_SIZE) bytes apiece, receives posted at
	// its start as perftest posts them.
	qpMRs []verbs.MR

	base      uint64 // the MR's address
	buffSize  uint64 // BUFF_SIZE(size, cycle buffer)
	qpBuff    uint64 // INC(BUFF_SIZE, cache line): send_qp_buff_size
	cycle     uint64 // the cycle buffer (page size, negotiated)
	cacheLine uint64
}

// ptInc is perftest's INC (bench.Inc).
func ptInc(size, cacheLine uint64) uint64 { return bench.Inc(size, cacheLine) }

// ptAccess is the MR and QP access perftest gives each verb.
func ptAccess(v perftest.Verb) (mr, qp verbs.Access) {
	switch v {
	case perftest.Write:
		return verbs.AccessLocalWrite | verbs.AccessRemoteWrite, verbs.AccessRemoteWrite
	case perftest.Read:
		return verbs.AccessLocalWrite | verbs.AccessRemoteRead, verbs.AccessRemoteRead
	case perftest.Atomic:
		return verbs.AccessLocalWrite | verbs.AccessRemoteAtomic, verbs.AccessRemoteAtomic
	}
	return verbs.AccessLocalWrite, verbs.AccessRemoteWrite | verbs.AccessLocalWrite
}

// newPTResources creates the resources of a test whose largest message is
// o.size (8 MiB with -a). The buffer is zero for ib_write_lat, which polls
// its last byte, and otherwise filled with this side's pattern (seed).
func newPTResources(ctx verbs.Context, o *ptOptions, cycle, cacheLine uint64, inline int, seed uint64) (*ptResources, error) {
	r := &ptResources{ctx: ctx, cycle: cycle, cacheLine: cacheLine, conn: o.conn}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	l := bench.NewLayout(o.numQPs, o.size, cycle, cacheLine)
	r.buffSize, r.qpBuff = l.BuffSize, l.QPBuff
	total := l.Bytes()
	if o.conn == perftest.UD {
		total += cacheLine // alloc_ctx: room for the GRH area before the last receive
	}
	if total > 1<<40 {
		return nil, fmt.Errorf("Couldn't allocate work buf: %d bytes", total)
	}
	var err error
	if r.pd, err = ctx.AllocPD(); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	mrAccess, qpAccess := ptAccess(o.test.verb)
	if r.mr, err = r.pd.AllocMR(int(total), mrAccess); err != nil {
		return nil, fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	r.buf = r.mr.Bytes()
	r.base = r.mr.Addr()
	if !(o.test.verb == perftest.Write && o.test.kind == perftest.Lat) {
		ptFill(r.buf, r.base, seed)
	}
	if o.mrPerQP && o.test.kind == perftest.BW {
		// create_mr with mr_per_qp: QP i gets an MR of its own, of
		// 2·INC(BUFF_SIZE) bytes (plus UD's GRH room).
		r.qpMRs = append(r.qpMRs, r.mr)
		per := 2 * l.QPBuff
		if o.conn == perftest.UD {
			per += cacheLine
		}
		for i := 1; i < o.numQPs; i++ {
			mr, err := r.pd.AllocMR(int(per), mrAccess)
			if err != nil {
				return nil, fmt.Errorf("failed to create mr: %w", err)
			}
			r.qpMRs = append(r.qpMRs, mr)
			ptFill(mr.Bytes(), mr.Addr(), seed)
		}
	}
	if o.events {
		// One channel for both CQs, as perftest's ctx->channel.
		r.events = verbs.NewCompChannel(2)
	}
	if r.sendCQ, err = ctx.CreateCQ(o.txDepth*o.numQPs, r.events); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	r.recvCQ = r.sendCQ
	if o.test.verb == perftest.Send {
		if r.recvCQ, err = ctx.CreateCQ(o.rxDepth*o.numQPs, r.events); err != nil {
			return nil, fmt.Errorf("Couldn't create a receiver CQ: %w", err)
		}
	}
	if o.events {
		// perftest arms them before the run (send_lat.c, read_bw.c, ...);
		// the loops arm each again after its event.
		if err := r.sendCQ.ReqNotify(false); err != nil {
			return nil, fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
		if r.recvCQ != r.sendCQ {
			if err := r.recvCQ.ReqNotify(false); err != nil {
				return nil, fmt.Errorf("Couldn't request RCQ notification: %w", err)
			}
		}
	}
	for i := 0; i < o.numQPs; i++ {
		qp, err := r.pd.CreateQP(&verbs.QPInitAttr{
			SendCQ: r.sendCQ, RecvCQ: r.recvCQ, QPType: ptQPType(o.conn),
			Cap: verbs.QPCap{MaxSendWR: uint32(o.txDepth), MaxRecvWR: uint32(o.rxDepth),
				MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: uint32(inline)},
		})
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP: %w", err)
		}
		r.qps = append(r.qps, qp)
		p := cm.DefaultParams()
		p.Port, p.Access, p.QKey = uint8(o.ibPort), qpAccess, ptQKey
		if o.rdmaCM {
			// rdma_cm gives its UD QPs its own Q_Key (cma_init_ud_qp).
			p.QKey = cm.RDMAUDPQKey
		}
		if err := cm.Init(qp, &p); err != nil {
			return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
	}
	ok = true
	return r, nil
}

// ptQPType is the QP type of a connection type.
func ptQPType(c perftest.Connection) verbs.QPType {
	switch c {
	case perftest.UC:
		return verbs.QPTypeUC
	case perftest.UD:
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// close destroys whatever was created, AHs and QPs first.
func (r *ptResources) close() {
	for _, ah := range r.ahs {
		if ah != nil {
			ah.Destroy()
		}
	}
	for _, qp := range r.qps {
		qp.Destroy()
	}
	if r.recvCQ != nil && r.recvCQ != r.sendCQ {
		r.recvCQ.Destroy()
	}
	if r.sendCQ != nil {
		r.sendCQ.Destroy()
	}
	for _, mr := range r.qpMRs[min(1, len(r.qpMRs)):] {
		mr.Dereg()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
}

// layout is the resources' buffer layout (bench.Layout), which the engine
// and the methods below follow.
func (r *ptResources) layout() bench.Layout {
	return bench.Layout{NumQPs: len(r.qps), BuffSize: r.buffSize, QPBuff: r.qpBuff, Cycle: r.cycle, CacheLine: r.cacheLine}
}

// sendOff is the buffer offset of QP i's send region (ctx->buf[i]).
func (r *ptResources) sendOff(i int) uint64 { return r.layout().SendOff(i) }

// vaddrOff is the offset of QP i's advertised region (my_dest.vaddr).
func (r *ptResources) vaddrOff(i int) uint64 { return r.layout().VAddrOff(i) }

// recvOff is the offset of QP i's receive WQEs (ctx_set_recv_wqes).
func (r *ptResources) recvOff(i int) uint64 { return r.layout().RecvOff(i) }

// recvShift and recvExtra place UD receives as perftest does: a receive
// starts cache line − 40 bytes into its slot and is 40 bytes longer than
// the message, so the payload after the GRH area is cache-line aligned.
func (r *ptResources) recvShift() uint64 {
	if r.conn == perftest.UD {
		return r.cacheLine - ptUDAddition
	}
	return 0
}

func (r *ptResources) recvExtra() uint32 {
	if r.conn == perftest.UD {
		return ptUDAddition
	}
	return 0
}

// recvDataOff is where the payload of QP i's first receive lands.
func (r *ptResources) recvDataOff(i int) uint64 {
	return r.recvOff(i) + r.recvShift() + uint64(r.recvExtra())
}

// slots returns the slot stride and count of size-byte messages
// (bench.Layout.Slots).
func (r *ptResources) slots(size uint64) (stride, n uint64) { return r.layout().Slots(size) }

// localDests returns this side's keys (set_up_connection).
func (r *ptResources) localDests(lid uint16, outReads int, gid verbs.GID, psns []uint32) []perftest.Dest {
	d := make([]perftest.Dest, len(r.qps))
	for i, qp := range r.qps {
		d[i] = perftest.Dest{LID: lid, OutReads: outReads, QPN: qp.QPNum(), PSN: psns[i], RKey: r.mr.RKey(),
			VAddr: r.base + r.vaddrOff(i), GID: [16]byte(gid)}
		if r.qpMRs != nil {
			// set_up_connection: buf[i] + BUFF_SIZE, QP i's own key.
			d[i].RKey, d[i].VAddr = r.qpMRs[i].RKey(), r.qpMRs[i].Addr()+r.buffSize
		}
	}
	return d
}

// connect moves QP i to RTR towards rem and, if rts, on to RTS, with
// perftest's attributes (ctx_modify_qp_to_rtr/rts).
func (r *ptResources) connect(i int, o *ptOptions, my, rem perftest.Dest, mtu perftest.MTU, gidIndex int, maxRdAtom int, rts bool) error {
	qp := r.qps[i]
	if r.conn == perftest.UD {
		return r.connectUD(i, o, my, rem, gidIndex, rts)
	}
	p := cm.Params{
		Port: uint8(o.ibPort), PathMTU: mtu, SGIDIndex: uint8(gidIndex), HopLimit: 0xFF, SL: uint8(o.sl),
		AlwaysGRH: true, Timeout: uint8(o.timeout), RetryCnt: 7, RNRRetry: 7, MinRNRTimer: ptMinRNRTimer,
		MaxRdAtomic:     uint8(min(max(rem.OutReads, 1), maxRdAtom)),
		MaxDestRdAtomic: uint8(min(max(my.OutReads, 1), maxRdAtom)),
	}
	if err := cm.ReadyToReceive(qp, cm.Endpoint{QPN: rem.QPN, PSN: rem.PSN, GID: verbs.GID(rem.GID), LID: rem.LID}, &p); err != nil {
		return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPNum(), err)
	}
	if !rts {
		return nil
	}
	if err := cm.ReadyToSend(qp, cm.Endpoint{QPN: my.QPN, PSN: my.PSN}, &p); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// connectUD moves UD QP i to RTR and RTS and, on an end that sends
// (rts: latency, client or duplex), creates the address handle towards
// rem that its SENDs carry, as ctx_connect does: the QP's own attributes
// carry no address on UD.
func (r *ptResources) connectUD(i int, o *ptOptions, my, rem perftest.Dest, gidIndex int, rts bool) error {
	qp := r.qps[i]
	p := cm.Params{Port: uint8(o.ibPort)}
	if err := cm.ReadyToReceive(qp, cm.Endpoint{}, &p); err != nil {
		return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPNum(), err)
	}
	if !rts {
		return nil
	}
	if err := cm.ReadyToSend(qp, cm.Endpoint{PSN: my.PSN}, &p); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	ah, err := r.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, DLID: rem.LID, SL: uint8(o.sl), PortNum: uint8(o.ibPort),
		GRH: verbs.GlobalRoute{DGID: verbs.GID(rem.GID), SGIDIndex: uint8(gidIndex), HopLimit: 0xFF}})
	if err != nil {
		return fmt.Errorf("Failed to create AH: %w", err)
	}
	if r.ahs == nil {
		r.ahs = make([]verbs.AH, len(r.qps))
	}
	r.ahs[i] = ah
	return nil
}

// ptRandPSN draws a 24-bit PSN, as perftest's lrand48() & 0xffffff.
func ptRandPSN() uint32 { return rand.Uint32() & 0xFFFFFF }

// The buffer pattern: softrdma fills its buffers with bytes that depend on
// a seed (the PSN of the side's first QP, which the peer learns in the key
// exchange) and on each byte's virtual address. A peer that reads or
// receives data can thus tell whether it came from a softrdma peer (the
// first bytes match) and, if so, check every byte. Real perftest fills its
// buffers with rand() bytes, which never match, so checks are skipped
// against it.

// ptPatternWord is the pattern of the 8-byte word at address 8·word.
func ptPatternWord(seed, word uint64) uint64 {
	z := seed*0x9E3779B97F4A7C15 ^ word ^ 0x736f667472646d61 // "softrdma"
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// ptFill fills b, which starts at virtual address addr, with the pattern.
func ptFill(b []byte, addr, seed uint64) {
	for i := 0; i < len(b); {
		a := addr + uint64(i)
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], ptPatternWord(seed, a/8))
		i += copy(b[i:], w[a%8:])
	}
}

// ptPatternByte is the pattern byte at address a.
func ptPatternByte(seed, a uint64) byte {
	return byte(ptPatternWord(seed, a/8) >> (8 * (a % 8)))
}

// ptMatch compares b with the pattern of seed at address addr. ours is
// false when the first bytes (up to 16) differ: the data did not come from
// a softrdma peer with this seed. Otherwise bad is the offset of the first
// differing byte, or -1.
func ptMatch(b []byte, addr, seed uint64) (ours bool, bad int) {
	head := min(len(b), 16)
	for i := 0; i < head; i++ {
		if b[i] != ptPatternByte(seed, addr+uint64(i)) {
			return false, i
		}
	}
	for i := head; i < len(b); i++ {
		if b[i] != ptPatternByte(seed, addr+uint64(i)) {
			return true, i
		}
	}
	return true, -1
}

// ptSeed is the pattern seed of a side whose first QP has the given PSN.
func ptSeed(psn uint32) uint64 { return uint64(psn) | 0x5eed<<32 }

// verifySlots checks, for QP i, that the first nSlots slots of size bytes
// at local offset localOff hold the peer's pattern as it is at peerAddr
// (the peer's address of slot 0), slot for slot. It returns nil when the
// data is not from a softrdma peer.
func (r *ptResources) verifySlots(what string, i int, localOff, peerAddr, peerSeed, size, nSlots uint64) error {
	stride, _ := r.slots(size)
	for s := uint64(0); s < nSlots; s++ {
		off := localOff + s*stride
		b := r.buf[off : off+size]
		ours, bad := ptMatch(b, peerAddr+s*stride, peerSeed)
		if !ours {
			if s == 0 {
				return nil // not a softrdma peer (or slot 0's first bytes corrupt)
			}
			bad = 0
		}
		if bad >= 0 {
			return fmt.Errorf("data check failed: %s of QP %d, message size %d, slot %d: byte %d is 0x%02x, want 0x%02x",
				what, i, size, s, bad, b[bad], ptPatternByte(peerSeed, peerAddr+s*stride+uint64(bad)))
		}
	}
	return nil
}

// ptNativeUint64 reads b as the CPU stores a uint64, as the responder's
// atomics see memory.
func ptNativeUint64(b [8]byte) uint64 { return binary.NativeEndian.Uint64(b[:]) }
