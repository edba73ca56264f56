package nvmeof

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// errQueueGone: the queue's connection ended with the command in flight;
// the controller retries it on the next connection.
var errQueueGone = errors.New("nvmeof: queue disconnected")

var queueGen atomic.Uint64

// hostQueue is one host queue: an RC connection, a command buffer and a
// data buffer per command ID, a receive buffer per completion. One
// goroutine polls the CQ and hands each completion to the caller waiting
// on its command ID.
type hostQueue struct {
	qid    uint16
	size   int
	conn   *cm.Conn
	cq     verbs.CQ
	qp     verbs.QP
	cmdMR  verbs.MR // size × 64
	rspMR  verbs.MR // size × 16
	dataMR verbs.MR // size × maxXfer, the target's to READ and WRITE
	xfer   int
	cntlid uint16
	gen    uint64

	rwr  verbs.RecvWR // the poller's (and setup's) receive WR
	rsge [1]verbs.SGE

	mu    sync.Mutex
	free  []uint16
	slots []hostSlot
	freed chan struct{} // signalled when a command ID frees
	dead  chan struct{}
	err   error
	once  sync.Once
	done  sync.WaitGroup
}

type hostSlot struct {
	wr        verbs.SendWR // the command's SEND, reused: posting allocates nothing
	sge       [1]verbs.SGE // its list
	ch        chan hostResult
	abandoned bool // its caller gave up: the completion frees the slot
}

type hostResult struct {
	res uint64
	st  Status
	err error
}

// dialQueue connects queue qid of size entries and sends its Connect.
func (c *Controller) dialQueue(ctx context.Context, qid uint16, size int, cntlid uint16) (_ *hostQueue, err error) {
	o := cm.Options{}
	if c.cfg.CM != nil {
		o = *c.cfg.CM
	}
	xfer := 1 << 20
	if c.maxXfer != 0 {
		xfer = c.maxXfer
	}
	if qid == 0 {
		xfer = 8192 // admin data: identify, log pages (read in pieces)
	}
	q := &hostQueue{qid: qid, size: size, xfer: xfer, dead: make(chan struct{}), freed: make(chan struct{}, 1), gen: queueGen.Add(1)}
	var req CMRequest
	req.QID, req.HRQSize, req.HSQSize, req.CNTLID = qid, uint16(size), uint16(size-1), cntlid
	o.PrivateData, _ = req.AppendBinary(nil)
	o.Cap = verbs.QPCap{MaxSendWR: uint32(size) + 1, MaxRecvWR: uint32(size) + 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	o.CQE = 2*size + 4
	o.QP = nil
	conn, err := cm.Dial(ctx, "rdma", c.address, &o)
	if err != nil {
		var rej *cm.RejectError
		if errors.As(err, &rej) && len(rej.PrivateData) >= cmRejLen {
			return nil, fmt.Errorf("%w (%w)", &CMRejectError{Status: binary.LittleEndian.Uint16(rej.PrivateData[2:])}, err)
		}
		return nil, err
	}
	q.conn, q.qp = conn, conn.QP
	defer func() {
		if err != nil {
			q.close()
		}
	}()
	// One CQ would do; cm made two, so poll both from one goroutine: the
	// receive CQ carries the completions, the send CQ only SEND results.
	q.cq = conn.RecvCQ
	pd := conn.PD
	if q.cmdMR, err = pd.AllocMR(size*CommandSize, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.rspMR, err = pd.AllocMR((size+1)*CompletionSize, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.dataMR, err = pd.AllocMR(size*xfer, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	q.slots = make([]hostSlot, size)
	for i := range size {
		q.free = append(q.free, uint16(i))
		q.slots[i].ch = make(chan hostResult, 1)
	}
	for i := range size + 1 {
		if err := q.postRecv(i); err != nil {
			return nil, err
		}
	}
	q.done.Add(1)
	go q.poll()
	// Connect: the queue's fabrics Connect, its data by keyed SGL.
	var d connectData
	d.HostID, d.CNTLID, d.SubNQN, d.HostNQN = c.cfg.HostID, cntlid, c.subNQN, c.cfg.HostNQN
	data := make([]byte, connectDataLen)
	d.encode(data)
	kato := uint32(0)
	if qid == 0 && c.cfg.KeepAlive > 0 {
		kato = uint32(c.cfg.KeepAlive.Milliseconds())
	}
	res, err := q.exec(ctx, func(cmd Command) {
		cmd.setHeader(OpcodeFabrics, 0, 0)
		cmd[4] = fabricsConnect
		binary.LittleEndian.PutUint16(cmd[42:], qid)
		binary.LittleEndian.PutUint16(cmd[44:], uint16(size-1))
		binary.LittleEndian.PutUint32(cmd[48:], kato)
	}, data, nil)
	if err != nil {
		return nil, fmt.Errorf("nvmeof: connect queue %d to %s: %w", qid, c.subNQN, err)
	}
	q.cntlid = uint16(res)
	return q, nil
}

// postRecv posts receive buffer i. Only the poll goroutine calls it,
// after setup.
func (q *hostQueue) postRecv(i int) error {
	q.rsge[0] = q.rspMR.SGE(i*CompletionSize, CompletionSize)
	q.rwr = verbs.RecvWR{WRID: uint64(i), SGList: q.rsge[:]}
	return q.qp.PostRecv(&q.rwr)
}

// poll delivers completions until the connection ends.
func (q *hostQueue) poll() {
	defer q.done.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-q.conn.Done():
		case <-q.dead:
		}
		cancel()
	}()
	wcs := make([]verbs.WC, 16)
	scq := q.conn.SendCQ
	for ctx.Err() == nil {
		// SEND completions only say the command left; drain them so the
		// send CQ never overruns.
		for {
			n, err := scq.Poll(wcs)
			if err != nil || n == 0 {
				break
			}
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					q.fail(fmt.Errorf("%w: send %v", errQueueGone, wc.Status))
					return
				}
			}
		}
		n, err := q.cq.Poll(wcs)
		if err != nil {
			q.fail(fmt.Errorf("%w: %v", errQueueGone, err))
			return
		}
		if n == 0 {
			q.cq.Wait(ctx)
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				q.fail(fmt.Errorf("%w: receive %v", errQueueGone, wc.Status))
				return
			}
			i := int(wc.WRID)
			cqe := Completion(q.rspMR.Bytes()[i*CompletionSize:][:CompletionSize])
			cid, st, res := cqe.CID(), cqe.Status(), cqe.Result()
			if wc.WCFlags&verbs.WCWithInv != 0 {
				// The target invalidated the rkey of our data buffer; it
				// is shared by every command, so a target that did so
				// broke the protocol (we never ask for it).
				q.fail(fmt.Errorf("%w: the target invalidated rkey %#x unasked", errQueueGone, wc.ImmData))
				return
			}
			if err := q.postRecv(i); err != nil {
				q.fail(fmt.Errorf("%w: %v", errQueueGone, err))
				return
			}
			if int(cid) >= q.size || wc.ByteLen < CompletionSize {
				q.fail(fmt.Errorf("%w: a completion for command ID %d of %d bytes", errQueueGone, cid, wc.ByteLen))
				return
			}
			q.mu.Lock()
			if q.slots[cid].abandoned {
				q.slots[cid].abandoned = false
				q.free = append(q.free, cid)
				q.mu.Unlock()
				q.signalFreed()
				continue
			}
			select {
			case q.slots[cid].ch <- hostResult{res: res, st: st}:
			default: // a completion for a command not in flight: ignore it
			}
			q.mu.Unlock()
		}
	}
	q.fail(errQueueGone)
}

func (q *hostQueue) fail(err error) {
	q.once.Do(func() {
		q.mu.Lock()
		q.err = err
		q.mu.Unlock()
		close(q.dead)
	})
}

// exec sends a command and waits for its completion: in goes to the
// target (it READs it), out is filled from what it WRITEs.
func (q *hostQueue) exec(ctx context.Context, build func(Command), in, out []byte) (uint64, error) {
	if len(in) > q.xfer || len(out) > q.xfer {
		return 0, fmt.Errorf("nvmeof: %d bytes in one command; this queue moves at most %d", max(len(in), len(out)), q.xfer)
	}
	var cid uint16
	for {
		q.mu.Lock()
		if q.err != nil {
			err := q.err
			q.mu.Unlock()
			return 0, err
		}
		if len(q.free) > 0 {
			cid = q.free[len(q.free)-1]
			q.free = q.free[:len(q.free)-1]
			q.mu.Unlock()
			break
		}
		q.mu.Unlock()
		select {
		case <-q.freed:
		case <-q.dead:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	abandoned := false
	defer func() {
		q.mu.Lock()
		if abandoned {
			// The completion may still come and the target may still
			// move data: the slot is freed when it does.
			select {
			case <-q.slots[cid].ch:
			default:
				q.slots[cid].abandoned = true
				q.mu.Unlock()
				return
			}
		}
		q.free = append(q.free, cid)
		q.mu.Unlock()
		q.signalFreed()
	}()
	cmd := Command(q.cmdMR.Bytes()[int(cid)*CommandSize:][:CommandSize])
	build(cmd)
	binary.LittleEndian.PutUint16(cmd[2:], cid)
	cmd[1] = cmd[1]&^0xc0 | 0x40
	data := q.dataMR.Bytes()[int(cid)*q.xfer:][:q.xfer]
	n := max(len(in), len(out))
	if in != nil {
		copy(data, in)
	}
	if n > 0 {
		cmd.SGL().SetKeyed(q.dataMR.Addr()+uint64(int(cid)*q.xfer), uint32(n), q.dataMR.RKey(), false)
	} else {
		// No data: a keyed descriptor of length 0, as Linux's host sends
		// (its target refuses a zeroed one as an invalid SGL subtype).
		cmd.SGL().SetKeyed(0, 0, 0, false)
	}
	slot := &q.slots[cid]
	slot.sge[0] = q.cmdMR.SGE(int(cid)*CommandSize, CommandSize)
	slot.wr = verbs.SendWR{WRID: uint64(cid), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: slot.sge[:]}
	if err := q.qp.PostSend(&slot.wr); err != nil {
		q.fail(fmt.Errorf("%w: %v", errQueueGone, err))
		return 0, errQueueGone
	}
	select {
	case r := <-q.slots[cid].ch:
		if r.st.Code() != StatusSuccess {
			return r.res, r.st
		}
		if out != nil {
			copy(out, data)
		}
		return r.res, nil
	case <-q.dead:
		return 0, errQueueGone
	case <-ctx.Done():
		abandoned = true
		return 0, ctx.Err()
	}
}

func (q *hostQueue) signalFreed() {
	select {
	case q.freed <- struct{}{}:
	default:
	}
}

// property reads (get) or writes a controller property on the admin queue.
func (q *hostQueue) property(ctx context.Context, get bool, off uint32, v uint64) (uint64, error) {
	return q.exec(ctx, func(cmd Command) {
		cmd.setHeader(OpcodeFabrics, 0, 0)
		if get {
			cmd[4] = fabricsPropertyGet
		} else {
			cmd[4] = fabricsPropertySet
			binary.LittleEndian.PutUint64(cmd[48:], v)
		}
		if off == propCAP {
			cmd[40] = 1
		}
		binary.LittleEndian.PutUint32(cmd[44:], off)
	}, nil, nil)
}

// close disconnects the queue and frees its buffers once its goroutine
// has stopped.
func (q *hostQueue) close() {
	q.fail(errQueueGone)
	q.done.Wait()
	// The MRs live in the PD cm made for the connection: they go first.
	q.conn.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	for _, mr := range []verbs.MR{q.cmdMR, q.rspMR, q.dataMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	q.conn.Close()
}
