package nvmeof

// A target queue: one RC connection, one submission/completion queue pair.
//
//	host SEND (capsule) ──► recv slot i ──► command(i)
//	                                          │ needs host data?
//	                         in-capsule ◄─────┤──────► keyed SGL: RDMA READ into a data buffer
//	                              │           │                     │ READ completes
//	                              └──► execute(i) ◄──────────────────┘
//	                                          │ has data for the host? RDMA WRITE it
//	                                          └──► repost recv i, SEND (or SEND_WITH_INV) the completion
//	                                               SEND completes ──► response and data buffers free
//
// One goroutine owns everything here: it polls the queue's one CQ, and
// the buffers are indexed by slot, so the data path allocates nothing.

import (
	"context"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

func putUint64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

// Work request IDs: the kind in the top byte, then two 24-bit fields.
const (
	wrRecv = 1 << 56 // a: recv slot
	wrRead = 2 << 56 // a: recv slot, b: data slot
	wrResp = 3 << 56 // a: response slot, b: data slot + 1 (0: none)
)

func wrid(kind uint64, a, b int) uint64 { return kind | uint64(a)<<24 | uint64(b) }

type cmdState struct {
	data     int    // data slot, -1 none
	inCap    []byte // in-capsule data
	dataLen  int    // bytes of host data (in) or for the host (out)
	status   Status
	result   uint64
	inv      uint32 // rkey to invalidate with the response
	doInv    bool
	write    bool // dataLen bytes go to the host by RDMA WRITE first
	sglAddr  uint64
	sglKey   uint32
	deferred bool
}

type queue struct {
	t     *Target
	qid   uint16
	size  int
	pd    verbs.PD
	cq    verbs.CQ
	qp    verbs.QP
	conn  *cm.Conn
	local netip.AddrPort
	ctrl  *controller

	capsule  int
	maxXfer  int
	recvMR   verbs.MR
	respMR   verbs.MR
	dataMR   verbs.MR
	cmds     []cmdState
	freeResp []int
	freeData []int
	waitData []int // recv slots waiting for a data buffer
	waitResp []int // recv slots waiting for a response buffer
	sqhd     uint16

	ctx    context.Context
	cancel context.CancelFunc

	wr   [2]verbs.SendWR
	sge  [2]verbs.SGE
	rwr  verbs.RecvWR
	rsge [1]verbs.SGE // rwr's list: a slice literal here would allocate per post
}

func (t *Target) newQueue(vctx verbs.Context, qid uint16, size int) (q *queue, err error) {
	pd, err := t.pdFor(vctx)
	if err != nil {
		return nil, err
	}
	q = &queue{t: t, qid: qid, size: size, pd: pd, maxXfer: t.cfg.MaxTransferSize,
		capsule: CommandSize + t.cfg.InCapsuleDataSize}
	defer func() {
		if err != nil {
			q.release()
		}
	}()
	nresp := 2 * size
	sendWR := size + 2*nresp + 4
	if q.cq, err = vctx.CreateCQ(size+sendWR, nil); err != nil {
		return nil, err
	}
	if q.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: q.cq, RecvCQ: q.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: uint32(sendWR), MaxRecvWR: uint32(size), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if q.recvMR, err = pd.AllocMR(size*q.capsule, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.respMR, err = pd.AllocMR(nresp*CompletionSize, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.dataMR, err = pd.AllocMR(size*q.maxXfer, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	q.cmds = make([]cmdState, size)
	for i := range nresp {
		q.freeResp = append(q.freeResp, i)
	}
	for i := range size {
		q.freeData = append(q.freeData, i)
	}
	// The receives go up before the REP, so the host's first command
	// never meets an empty receive queue.
	if err = cm.Init(q.qp, nil); err != nil {
		return nil, err
	}
	for i := range size {
		if err = q.postRecv(i); err != nil {
			return nil, err
		}
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	return q, nil
}

func (q *queue) postRecv(slot int) error {
	q.rsge[0] = q.recvMR.SGE(slot*q.capsule, q.capsule)
	q.rwr = verbs.RecvWR{WRID: wrid(wrRecv, slot, 0), SGList: q.rsge[:]}
	return q.qp.PostRecv(&q.rwr)
}

// release destroys the queue's verbs objects (the PD is the target's).
func (q *queue) release() {
	if q.qp != nil {
		q.qp.Destroy()
	}
	for _, mr := range []verbs.MR{q.recvMR, q.respMR, q.dataMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if q.cq != nil {
		q.cq.Destroy()
	}
}

// shutdown asks the queue's goroutine to disconnect and end.
func (q *queue) shutdown() {
	if q.cancel != nil {
		q.cancel()
	}
}

// run serves the queue until the host disconnects, the QP fails, the
// controller goes away or the target closes.
func (q *queue) run() {
	go func() {
		select {
		case <-q.conn.Done():
		case <-q.ctx.Done():
		}
		q.cancel()
	}()
	wcs := make([]verbs.WC, 32)
	for q.ctx.Err() == nil {
		n, err := q.cq.Poll(wcs)
		if err != nil {
			q.t.cfg.Logf("nvmeof: queue %d: poll: %v", q.qid, err)
			break
		}
		if n == 0 {
			q.cq.Wait(q.ctx)
			continue
		}
		for i := range wcs[:n] {
			if !q.complete(&wcs[i]) {
				q.cancel()
				break
			}
		}
	}
	q.conn.Close()
	if c := q.ctrl; c != nil {
		c.mu.Lock()
		if c.queues[q.qid] == q {
			delete(c.queues, q.qid)
		}
		c.mu.Unlock()
		if q.qid == 0 {
			c.destroy()
		}
	}
	// Drain what the QP still reports so that no buffer is in use when
	// it is released.
	q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	q.release()
}

// complete handles one work completion; false ends the queue.
func (q *queue) complete(wc *verbs.WC) bool {
	kind, a, b := wc.WRID&(0xff<<56), int(wc.WRID>>24&0xffffff), int(wc.WRID&0xffffff)
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			q.t.cfg.Logf("nvmeof: queue %d: %v completion: %v", q.qid, wc.Opcode, wc.Status)
		}
		return false
	}
	switch kind {
	case wrRecv:
		return q.command(a, int(wc.ByteLen))
	case wrRead:
		q.execute(a, q.dataBuf(b)[:q.cmds[a].dataLen])
	case wrResp:
		q.freeResp = append(q.freeResp, a)
		if b != 0 {
			q.releaseData(b - 1)
		}
		for len(q.waitResp) > 0 && len(q.freeResp) > 0 {
			slot := q.waitResp[0]
			q.waitResp = q.waitResp[1:]
			q.sendResponse(slot)
		}
	}
	return true
}

func (q *queue) dataBuf(d int) []byte { return q.dataMR.Bytes()[d*q.maxXfer:][:q.maxXfer] }

func (q *queue) releaseData(d int) {
	q.freeData = append(q.freeData, d)
	for len(q.waitData) > 0 && len(q.freeData) > 0 {
		slot := q.waitData[0]
		q.waitData = q.waitData[1:]
		q.dispatch(slot)
	}
}

// command takes the capsule that arrived in recv slot.
func (q *queue) command(slot, n int) bool {
	if n < CommandSize {
		q.t.Stats.BadCapsules.Add(1)
		q.t.cfg.Logf("nvmeof: queue %d: a %d-byte capsule; disconnecting", q.qid, n)
		return false
	}
	q.t.Stats.Commands.Add(1)
	q.sqhd++
	if int(q.sqhd) == q.size {
		q.sqhd = 0
	}
	capsule := q.recvMR.Bytes()[slot*q.capsule:][:n]
	s := &q.cmds[slot]
	*s = cmdState{data: -1, inCap: capsule[CommandSize:]}
	if q.ctrl != nil {
		q.ctrl.touch()
	}
	q.dispatch(slot)
	return true
}

func (q *queue) cmd(slot int) Command {
	return Command(q.recvMR.Bytes()[slot*q.capsule:][:CommandSize])
}

// dispatch starts a command: it decides what data the command moves and
// either executes it or starts the RDMA READ of its data.
func (q *queue) dispatch(slot int) {
	c := q.cmd(slot)
	in, out, st := q.dataNeeds(c)
	if st != StatusSuccess {
		q.respond(slot, st, 0)
		return
	}
	s := &q.cmds[slot]
	if in == 0 && out == 0 {
		q.execute(slot, nil)
		return
	}
	sgl := c.SGL()
	length := int(sgl.Length())
	switch {
	case sgl.Type() == sglTypeDataBlock && sgl.Sub() == sglSubtypeOffset:
		// In-capsule data: only for data to the target.
		off := sgl.Addr()
		if out > 0 || off > uint64(len(s.inCap)) || uint64(length) > uint64(len(s.inCap))-off {
			q.t.Stats.BadCapsules.Add(1)
			q.respond(slot, StatusSGLInvalidOffset|StatusDNR, 0)
			return
		}
		if length != in {
			q.respond(slot, StatusSGLInvalidData|StatusDNR, 0)
			return
		}
		q.execute(slot, s.inCap[off:][:length])
		return
	case sgl.Type() == sglTypeKeyedDataBlock && (sgl.Sub() == sglSubtypeAddress || sgl.Sub() == sglSubtypeInvalidate):
	default:
		q.t.Stats.BadCapsules.Add(1)
		q.respond(slot, StatusSGLInvalidType|StatusDNR, 0)
		return
	}
	if in > 0 && length != in || out > 0 && (length < 1 || q.qid != 0 && length != out) {
		q.respond(slot, StatusSGLInvalidData|StatusDNR, 0)
		return
	}
	if sgl.Sub() == sglSubtypeInvalidate {
		s.doInv, s.inv = true, sgl.Key()
	}
	s.sglAddr, s.sglKey = sgl.Addr(), sgl.Key()
	if len(q.freeData) == 0 {
		q.waitData = append(q.waitData, slot)
		return
	}
	d := q.freeData[len(q.freeData)-1]
	q.freeData = q.freeData[:len(q.freeData)-1]
	s.data = d
	if out > 0 {
		s.dataLen = min(length, out)
		q.execute(slot, nil)
		return
	}
	s.dataLen = in
	q.sge[0] = q.dataMR.SGE(d*q.maxXfer, in)
	q.wr[0] = verbs.SendWR{WRID: wrid(wrRead, slot, d), Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: q.sge[:1], RemoteAddr: s.sglAddr, RKey: s.sglKey}
	if err := q.qp.PostSend(&q.wr[0]); err != nil {
		q.t.cfg.Logf("nvmeof: queue %d: post READ: %v", q.qid, err)
		q.releaseData(d)
		s.data = -1
		q.respond(slot, StatusDataXferError, 0)
	}
}

// dataNeeds says how many bytes a command takes from the host (in) or
// gives it (out), or a status that fails it before any data moves.
func (q *queue) dataNeeds(c Command) (in, out int, st Status) {
	if c.Flags()&0xc0 == 0 && c.SGL().Length() != 0 {
		return 0, 0, StatusInvalidField | StatusDNR // PRPs: fabrics commands use SGLs
	}
	if c.Opcode() == OpcodeFabrics {
		if c.FCType() == fabricsConnect {
			return connectDataLen, 0, StatusSuccess
		}
		return 0, 0, StatusSuccess
	}
	if q.ctrl == nil {
		return 0, 0, StatusCmdSeqError | StatusDNR
	}
	if q.qid == 0 {
		switch c.Opcode() {
		case AdminIdentify:
			return 0, identifyDataBytes, StatusSuccess
		case AdminGetLogPage:
			n := (int(c.CDW(11)&0xffff)<<16 | int(c.CDW(10)>>16)) + 1
			if n*4 > q.maxXfer {
				return 0, 0, StatusInvalidField | StatusDNR
			}
			return 0, n * 4, StatusSuccess
		}
		return 0, 0, StatusSuccess
	}
	switch c.Opcode() {
	case IORead, IOWrite:
		ns := q.ctrl.sub.namespace(c.NSID())
		if ns == nil {
			return 0, 0, StatusInvalidNamespace | StatusDNR
		}
		n := (int(c.NLB()) + 1) * ns.BlockSize
		if n > q.maxXfer {
			return 0, 0, StatusInvalidField | StatusDNR
		}
		if c.Opcode() == IORead {
			return 0, n, StatusSuccess
		}
		return n, 0, StatusSuccess
	case IODSM:
		return (int(c.CDW(10)&0xff) + 1) * 16, 0, StatusSuccess
	}
	return 0, 0, StatusSuccess
}

// execute runs a command whose host data (if any) is in data, and
// responds.
func (q *queue) execute(slot int, data []byte) {
	c := q.cmd(slot)
	s := &q.cmds[slot]
	var out []byte
	if s.data >= 0 && s.dataLen > 0 && data == nil {
		out = q.dataBuf(s.data)[:s.dataLen]
	}
	var st Status
	var result uint64
	switch {
	case c.Opcode() == OpcodeFabrics:
		st, result = q.fabrics(c, data)
	case q.qid == 0:
		st, result = q.admin(slot, c, out)
	default:
		st = q.io(c, data, out)
	}
	if st == statusNoResponse {
		q.repost(slot)
		return
	}
	if out != nil && st == StatusSuccess {
		s.write = true
	}
	q.respond(slot, st, result)
}

// statusNoResponse: the command stays outstanding (an Asynchronous Event
// Request); its receive buffer is free again.
const statusNoResponse Status = 0xffff

func (q *queue) repost(slot int) {
	s := &q.cmds[slot]
	if s.data >= 0 {
		q.releaseData(s.data)
		s.data = -1
	}
	if err := q.postRecv(slot); err != nil {
		q.t.cfg.Logf("nvmeof: queue %d: post recv: %v", q.qid, err)
		q.cancel()
	}
}

// respond completes the command in slot: the data for the host first (RDMA
// WRITE), then the completion by SEND, after the slot's receive is posted
// again (the host may send its next command as soon as it sees this one's
// completion).
func (q *queue) respond(slot int, st Status, result uint64) {
	s := &q.cmds[slot]
	s.status, s.result = st, result
	if st != StatusSuccess {
		q.t.Stats.Errors.Add(1)
		s.write = false
	}
	if len(q.freeResp) == 0 {
		q.waitResp = append(q.waitResp, slot)
		return
	}
	q.sendResponse(slot)
}

func (q *queue) sendResponse(slot int) {
	s := &q.cmds[slot]
	c := q.cmd(slot)
	cid := c.CID()
	r := q.freeResp[len(q.freeResp)-1]
	q.freeResp = q.freeResp[:len(q.freeResp)-1]
	Completion(q.respMR.Bytes()[r*CompletionSize:][:CompletionSize]).set(s.result, q.sqhd, q.qid, cid, s.status)
	data := s.data
	s.data = -1
	write, dataLen, addr, key, doInv, inv := s.write, s.dataLen, s.sglAddr, s.sglKey, s.doInv, s.inv
	// The capsule (and s) may be overwritten by the next command once the
	// receive is posted: everything needed is copied out above.
	if err := q.postRecv(slot); err != nil {
		q.t.cfg.Logf("nvmeof: queue %d: post recv: %v", q.qid, err)
		q.cancel()
		return
	}
	send := &q.wr[1]
	q.sge[1] = q.respMR.SGE(r*CompletionSize, CompletionSize)
	*send = verbs.SendWR{WRID: wrid(wrResp, r, data+1), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: q.sge[1:2]}
	if doInv {
		send.Opcode, send.InvalidateRKey = verbs.WRSendWithInv, inv
	}
	first := send
	if write {
		q.sge[0] = q.dataMR.SGE(data*q.maxXfer, dataLen)
		q.wr[0] = verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: q.sge[:1], RemoteAddr: addr, RKey: key, Next: send}
		first = &q.wr[0]
	}
	if err := q.qp.PostSend(first); err != nil {
		q.t.cfg.Logf("nvmeof: queue %d: post response: %v", q.qid, err)
		q.cancel()
	}
}

// fabrics serves Connect, Property Get/Set and Disconnect.
func (q *queue) fabrics(c Command, data []byte) (Status, uint64) {
	switch c.FCType() {
	case fabricsConnect:
		return q.connect(c, data)
	case fabricsPropertyGet, fabricsPropertySet:
		if q.ctrl == nil || q.qid != 0 {
			return StatusCmdSeqError | StatusDNR, 0
		}
		if c.FCType() == fabricsPropertyGet {
			return q.ctrl.propertyGet(c[40]&1 != 0, binary.LittleEndian.Uint32(c[44:]))
		}
		return q.ctrl.propertySet(binary.LittleEndian.Uint32(c[44:]), binary.LittleEndian.Uint64(c[48:])), 0
	case fabricsDisconnect:
		return StatusSuccess, 0
	}
	return StatusInvalidOpcode | StatusDNR, 0
}

// Connect's invalid-parameter results: IATTR (bit 16: in the data, else
// in the command) and the offset of the bad field (NVMe-oF 1.1, figure 21).
func ipoCommand(off int) uint64 { return uint64(off) }
func ipoData(off int) uint64    { return 1<<16 | uint64(off) }

func (q *queue) connect(c Command, data []byte) (Status, uint64) {
	if q.ctrl != nil {
		return StatusCmdSeqError | StatusDNR, 0
	}
	recfmt, qid, sqsize := binary.LittleEndian.Uint16(c[40:]), binary.LittleEndian.Uint16(c[42:]), binary.LittleEndian.Uint16(c[44:])
	kato := time.Duration(binary.LittleEndian.Uint32(c[48:])) * time.Millisecond
	if recfmt != 0 {
		return StatusConnectFormat | StatusDNR, 0
	}
	if qid != q.qid {
		return StatusConnectInvalidParm | StatusDNR, ipoCommand(42)
	}
	if sqsize == 0 || int(sqsize) >= q.size+1 {
		return StatusConnectInvalidParm | StatusDNR, ipoCommand(44)
	}
	var d connectData
	d.decode(data)
	t := q.t
	var sub *Subsystem
	if d.SubNQN != DiscoveryNQN {
		sub = t.subs[d.SubNQN]
		if sub == nil {
			return StatusConnectInvalidParm | StatusDNR, ipoData(256)
		}
		if !sub.allows(d.HostNQN) {
			return StatusConnectInvalidHost | StatusDNR, 0
		}
	}
	if qid == 0 {
		if d.CNTLID != 0xffff {
			return StatusConnectInvalidParm | StatusDNR, ipoData(16)
		}
		ctrl, st := t.newController(sub, &d, kato)
		if st != StatusSuccess {
			return st, 0
		}
		ctrl.mu.Lock()
		ctrl.queues[0] = q
		ctrl.mu.Unlock()
		q.ctrl = ctrl
		t.cfg.Logf("nvmeof: controller %d: %s for %s (keep-alive %v)", ctrl.id, d.SubNQN, d.HostNQN, kato)
		return StatusSuccess, uint64(ctrl.id)
	}
	t.mu.Lock()
	ctrl := t.ctrls[d.CNTLID]
	t.mu.Unlock()
	if ctrl == nil || ctrl.sub == nil || ctrl.sub != sub || ctrl.hostNQN != d.HostNQN {
		return StatusConnectInvalidParm | StatusDNR, ipoData(16)
	}
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	switch {
	case ctrl.destroyed || ctrl.csts&1 == 0:
		return StatusCmdSeqError | StatusDNR, 0
	case int(qid) > ctrl.ioQueues:
		return StatusConnectInvalidParm | StatusDNR, ipoCommand(42)
	case ctrl.queues[qid] != nil:
		return StatusConnectCtrlBusy | StatusDNR, 0
	}
	ctrl.queues[qid] = q
	q.ctrl = ctrl
	return StatusSuccess, uint64(ctrl.id)
}
