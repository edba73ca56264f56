package cm

// One-sided operations on a connection: post a work request, wait for its
// completion, turn a failed completion into an error.
//
//	Read/Write/CompareAndSwap/FetchAndAdd/Send ──▶ an Op of the connection's (spare list)
//	PostRead/... (caller's Op) ──────────────────▶ slot + WRID, QP.PostSend
//	Op.Wait ──▶ holds the poll token? ── yes ──▶ SendCQ.Poll, hand each completion to its Op
//	          │                                  (by WRID), CQ.Wait when empty; token back
//	          └──── no ──▶ waits for its Op's signal, the token, ctx or the connection's end
//
// Whichever waiter holds the token polls for everyone, so any number of
// goroutines may have operations in flight on one connection. Nothing on
// this path allocates once the connection's Ops and slots exist.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
)

// CompletionError is an operation that completed with an error status.
// It unwraps to the status, a verbs.WCStatus: errors.Is(err,
// verbs.WCRemAccessErr) tells a remote access error.
type CompletionError struct {
	Op        verbs.WROpcode
	Status    verbs.WCStatus
	VendorErr uint32
}

func (e *CompletionError) Error() string {
	s := fmt.Sprintf("cm: %v completed with %v", e.Op, e.Status)
	switch e.Status {
	case verbs.WCRemAccessErr:
		s += ": the peer's memory region does not allow it (rkey, range or access flags)"
	case verbs.WCRemInvReqErr:
		s += ": the peer refused the request (longer than its buffer, or an operation its QP does not allow)"
	case verbs.WCRetryExcErr:
		s += ": the peer did not answer; it is gone or unreachable"
	case verbs.WCRNRRetryExcErr:
		s += ": the peer had no receive posted for the SEND"
	case verbs.WCWRFlushErr:
		s += ": the connection was closed or failed before it ran"
	case verbs.WCLocProtErr, verbs.WCLocLenErr:
		s += ": the local buffer is not inside a registered memory region of the connection's PD"
	}
	return s
}

func (e *CompletionError) Unwrap() error { return e.Status }

// ErrOpInFlight: an Op was posted again before its previous operation
// completed.
var ErrOpInFlight = errors.New("cm: the Op is still in flight: Wait for it before posting it again")

// maxOps bounds the operations in flight on one connection (the send
// queue bounds them first: PostSend fails with verbs.ErrQueueFull).
const maxOps = 512

// Op is one operation in flight, for the asynchronous calls (PostRead,
// PostWrite, PostCompareAndSwap, PostFetchAndAdd, PostSend): post it, do
// other work, then Wait. The zero value is ready to use; an Op may be
// posted again once its Wait returned the operation's result (not ctx's
// or the connection's end). An Op is used by one goroutine at a time.
type Op struct {
	e     *opEngine
	wr    verbs.SendWR
	sge   [1]verbs.SGE
	sig   chan struct{} // a completion was handed over
	state atomic.Uint32 // opIdle, opPending, opDone
	// Set by the poller before the signal:
	status    verbs.WCStatus
	vendorErr uint32
	value     uint64
	spare     bool // the connection's own (blocking calls)
	abandoned bool // under e.mu: its waiter left; the poller recycles it
}

const (
	opIdle uint32 = iota
	opPending
	opDone
)

// Value returns the original value of the remote word after an atomic
// operation completed (what it held before the compare-and-swap or the
// add).
func (op *Op) Value() uint64 { return op.value }

// Wait waits until the operation completes and returns nil or a
// *CompletionError; or ctx's error, or the connection's (Conn.Err), if
// either ends first: the operation is then still in flight and the Op
// and the local buffer are not to be reused until a later Wait returns
// its result.
func (op *Op) Wait(ctx context.Context) error {
	e := op.e
	if e == nil || op.state.Load() == opIdle {
		return errors.New("cm: Wait on an Op that was not posted")
	}
	for {
		if op.state.Load() == opDone {
			return op.result()
		}
		select {
		case <-op.sig:
			return op.result()
		case <-e.token:
			err := e.poll(ctx, op)
			if op.state.Load() == opDone {
				return op.result()
			}
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-e.c.done:
			if op.state.Load() == opDone {
				return op.result()
			}
			return fmt.Errorf("cm: the connection ended with %v in flight: %w", op.wr.Opcode, e.c.Err())
		}
	}
}

// result takes the completed operation's outcome and makes the Op idle.
func (op *Op) result() error {
	select {
	case <-op.sig:
	default:
	}
	op.state.Store(opIdle)
	if op.status != verbs.WCSuccess {
		return &CompletionError{Op: op.wr.Opcode, Status: op.status, VendorErr: op.vendorErr}
	}
	return nil
}

// opEngine is a connection's one-sided state.
type opEngine struct {
	c     *Conn
	token chan struct{} // holds a token while no waiter polls

	mu      sync.Mutex
	slots   []*Op    // in flight, by the WRID's low 32 bits
	gens    []uint32 // each slot's generation: the WRID's high 32 bits
	free    []uint32 // free slot indices
	spare   []*Op    // the connection's idle Ops, for the blocking calls
	scratch verbs.MR // 8 bytes per slot for atomics' original values

	wc [16]verbs.WC // the token holder's
}

// engine returns c's one-sided state, made on first use.
func (c *Conn) engine() (*opEngine, error) {
	if e := c.ops.Load(); e != nil {
		return e, nil
	}
	if c.QP == nil || c.SendCQ == nil || c.QP.Type() == verbs.QPTypeUD {
		return nil, errors.New("cm: one-sided calls need an RC connection with its send CQ")
	}
	e := &opEngine{c: c, token: make(chan struct{}, 1)}
	e.token <- struct{}{}
	if !c.ops.CompareAndSwap(nil, e) {
		return c.ops.Load(), nil
	}
	return e, nil
}

// scratchLocked returns the MR atomics write their results to, made on
// first use and released when the connection closes. Precondition: e.mu
// held.
func (e *opEngine) scratchLocked() (verbs.MR, error) {
	if e.scratch != nil {
		return e.scratch, nil
	}
	c := e.c
	mr, err := c.PD.AllocMR(maxOps*8, verbs.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		mr.Dereg()
		return nil, ErrClosed
	}
	// Close runs owned last to first: the MR goes before the PD.
	c.owned = append(c.owned, mr.Dereg)
	e.scratch = mr
	return mr, nil
}

// post gives op a slot and posts wr (op.wr, filled by the caller except
// for WRID, flags and SGList).
func (e *opEngine) post(op *Op) error {
	if !op.state.CompareAndSwap(opIdle, opPending) {
		return ErrOpInFlight
	}
	op.e = e
	if op.sig == nil {
		op.sig = make(chan struct{}, 1)
	}
	e.mu.Lock()
	var idx uint32
	if n := len(e.free); n > 0 {
		idx = e.free[n-1]
		e.free = e.free[:n-1]
	} else if len(e.slots) < maxOps {
		idx = uint32(len(e.slots))
		e.slots = append(e.slots, nil)
		e.gens = append(e.gens, 0)
	} else {
		e.mu.Unlock()
		op.state.Store(opIdle)
		return fmt.Errorf("cm: %d operations in flight on the connection: Wait for some first", maxOps)
	}
	if op.wr.Opcode == verbs.WRAtomicCmpAndSwp || op.wr.Opcode == verbs.WRAtomicFetchAndAdd {
		mr, err := e.scratchLocked()
		if err != nil {
			e.free = append(e.free, idx)
			e.mu.Unlock()
			op.state.Store(opIdle)
			return err
		}
		op.sge[0] = mr.SGE(int(idx)*8, 8)
	}
	e.gens[idx]++
	e.slots[idx] = op
	op.abandoned = false
	op.wr.WRID = uint64(e.gens[idx])<<32 | uint64(idx)
	e.mu.Unlock()
	op.wr.SendFlags = verbs.SendSignaled
	op.wr.SGList = op.sge[:1]
	if err := e.c.QP.PostSend(&op.wr); err != nil {
		e.mu.Lock()
		e.slots[idx] = nil
		e.free = append(e.free, idx)
		e.mu.Unlock()
		op.state.Store(opIdle)
		return fmt.Errorf("cm: posting %v: %w", op.wr.Opcode, err)
	}
	return nil
}

// poll polls the send CQ for everyone until op completes, the CQ is
// empty and ctx ends, or the CQ fails; then it hands the token back.
func (e *opEngine) poll(ctx context.Context, op *Op) error {
	defer func() { e.token <- struct{}{} }()
	cq := e.c.SendCQ
	for {
		n, err := cq.Poll(e.wc[:])
		for i := range n {
			e.complete(&e.wc[i])
		}
		if op.state.Load() == opDone {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			if err := cq.Wait(ctx); err != nil {
				return err
			}
		}
	}
}

// complete hands one completion to its Op. Completions of work requests
// the application posted itself on the QP are not the engine's: they are
// dropped (the one-sided calls own the send CQ while they are used).
func (e *opEngine) complete(wc *verbs.WC) {
	idx, gen := uint32(wc.WRID), uint32(wc.WRID>>32)
	e.mu.Lock()
	if int(idx) >= len(e.slots) || e.gens[idx] != gen || e.slots[idx] == nil {
		e.mu.Unlock()
		return
	}
	op := e.slots[idx]
	e.slots[idx] = nil
	e.free = append(e.free, idx)
	op.status, op.vendorErr = wc.Status, wc.VendorErr
	if (op.wr.Opcode == verbs.WRAtomicCmpAndSwp || op.wr.Opcode == verbs.WRAtomicFetchAndAdd) && e.scratch != nil {
		op.value = binary.LittleEndian.Uint64(e.scratch.Bytes()[idx*8:])
	}
	if op.abandoned {
		op.abandoned = false
		op.state.Store(opIdle)
		e.spare = append(e.spare, op)
		e.mu.Unlock()
		return
	}
	op.state.Store(opDone) // under mu: putSpare sees it done or leaves it abandoned
	e.mu.Unlock()
	select {
	case op.sig <- struct{}{}:
	default:
	}
}

// getSpare returns an idle Op of the connection's.
func (e *opEngine) getSpare() *Op {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.spare); n > 0 {
		op := e.spare[n-1]
		e.spare = e.spare[:n-1]
		return op
	}
	return &Op{e: e, spare: true, sig: make(chan struct{}, 1)}
}

// putSpare takes a spare Op back once its blocking call returned: at once
// if it is idle, else when its completion comes (the waiter left early).
func (e *opEngine) putSpare(op *Op) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if op.state.Load() == opPending {
		op.abandoned = true
		return
	}
	// Its completion may have come after its waiter left: drop the
	// signal, so the Op's next Wait does not take it for its own.
	select {
	case <-op.sig:
	default:
	}
	op.state.Store(opIdle)
	e.spare = append(e.spare, op)
}

// do posts a spare Op filled by fill, waits for it and returns its value.
func (c *Conn) do(ctx context.Context, a *opArgs) (uint64, error) {
	e, err := c.engine()
	if err != nil {
		return 0, err
	}
	op := e.getSpare()
	if err := a.fill(op); err != nil {
		e.putSpare(op)
		return 0, err
	}
	if err := e.post(op); err != nil {
		e.putSpare(op)
		return 0, err
	}
	err = op.Wait(ctx)
	v := op.value
	e.putSpare(op)
	return v, err
}

func (c *Conn) postOp(op *Op, a *opArgs) error {
	e, err := c.engine()
	if err != nil {
		return err
	}
	if op.state.Load() != opIdle {
		return ErrOpInFlight
	}
	if err := a.fill(op); err != nil {
		return err
	}
	return e.post(op)
}

// The fills check the arguments and set the work request.

func (op *Op) rdma(opcode verbs.WROpcode, local verbs.SGE, remote RemoteBuffer) error {
	if uint64(local.Length) > remote.Length {
		return fmt.Errorf("cm: %v of %d bytes into a %d-byte remote buffer: use a shorter local buffer or remote.Slice", opcode, local.Length, remote.Length)
	}
	op.wr = verbs.SendWR{Opcode: opcode, RemoteAddr: remote.Addr, RKey: remote.RKey}
	op.sge[0] = local
	return nil
}

func (op *Op) atomic(opcode verbs.WROpcode, remote RemoteBuffer, compareAdd, swap uint64) error {
	if remote.Length < 8 || remote.Addr%8 != 0 {
		return fmt.Errorf("cm: %v needs an 8-byte aligned remote word; %v is not one (remote.Slice)", opcode, remote)
	}
	op.wr = verbs.SendWR{Opcode: opcode, RemoteAddr: remote.Addr, RKey: remote.RKey, CompareAdd: compareAdd, Swap: swap}
	return nil
}

func (op *Op) send(local verbs.SGE) error {
	op.wr = verbs.SendWR{Opcode: verbs.WRSend}
	op.sge[0] = local
	return nil
}

// opArgs are a call's arguments (a struct, not a closure: nothing
// escapes, nothing allocates).
type opArgs struct {
	opcode     verbs.WROpcode
	local      verbs.SGE
	remote     RemoteBuffer
	compareAdd uint64
	swap       uint64
	isAtomic   bool
	isSend     bool
}

func (a *opArgs) fill(op *Op) error {
	switch {
	case a.isSend:
		return op.send(a.local)
	case a.isAtomic:
		return op.atomic(a.opcode, a.remote, a.compareAdd, a.swap)
	}
	return op.rdma(a.opcode, a.local, a.remote)
}

// Write RDMA WRITEs local (an SGE of a memory region of the connection's
// PD, MR.SGE) to the start of remote and waits for its completion: the
// data is in the peer's memory when it returns nil. It fails at once if
// local is longer than remote; a failed completion is a
// *CompletionError. Safe for concurrent use.
func (c *Conn) Write(ctx context.Context, local verbs.SGE, remote RemoteBuffer) error {
	a := opArgs{opcode: verbs.WRRDMAWrite, local: local, remote: remote}
	_, err := c.do(ctx, &a)
	return err
}

// Read RDMA READs len(local) bytes from the start of remote into local
// and waits for them. As Write otherwise.
func (c *Conn) Read(ctx context.Context, local verbs.SGE, remote RemoteBuffer) error {
	a := opArgs{opcode: verbs.WRRDMARead, local: local, remote: remote}
	_, err := c.do(ctx, &a)
	return err
}

// CompareAndSwap atomically replaces the 8-byte word at the start of
// remote (8-byte aligned) with swap if it equals compare, and returns
// what it held before: the swap happened if old == compare. The word is
// in the peer's byte order (little-endian on every softrdma device).
func (c *Conn) CompareAndSwap(ctx context.Context, remote RemoteBuffer, compare, swap uint64) (old uint64, err error) {
	a := opArgs{opcode: verbs.WRAtomicCmpAndSwp, remote: remote, compareAdd: compare, swap: swap, isAtomic: true}
	return c.do(ctx, &a)
}

// FetchAndAdd atomically adds add to the 8-byte word at the start of
// remote (8-byte aligned) and returns what it held before.
func (c *Conn) FetchAndAdd(ctx context.Context, remote RemoteBuffer, add uint64) (old uint64, err error) {
	a := opArgs{opcode: verbs.WRAtomicFetchAndAdd, remote: remote, compareAdd: add, isAtomic: true}
	return c.do(ctx, &a)
}

// Send SENDs local to the peer, which must have a receive posted (on
// the connection's QP, RecvCQ for its completion), and waits until the
// peer acknowledged it.
func (c *Conn) Send(ctx context.Context, local verbs.SGE) error {
	a := opArgs{local: local, isSend: true}
	_, err := c.do(ctx, &a)
	return err
}

// PostWrite posts an RDMA WRITE as Write does and returns at once;
// op.Wait waits for it. The local buffer must stay untouched until then.
func (c *Conn) PostWrite(op *Op, local verbs.SGE, remote RemoteBuffer) error {
	a := opArgs{opcode: verbs.WRRDMAWrite, local: local, remote: remote}
	return c.postOp(op, &a)
}

// PostRead posts an RDMA READ as Read does; op.Wait waits for it.
func (c *Conn) PostRead(op *Op, local verbs.SGE, remote RemoteBuffer) error {
	a := opArgs{opcode: verbs.WRRDMARead, local: local, remote: remote}
	return c.postOp(op, &a)
}

// PostCompareAndSwap posts a compare-and-swap as CompareAndSwap does;
// after op.Wait, op.Value is the word's original value.
func (c *Conn) PostCompareAndSwap(op *Op, remote RemoteBuffer, compare, swap uint64) error {
	a := opArgs{opcode: verbs.WRAtomicCmpAndSwp, remote: remote, compareAdd: compare, swap: swap, isAtomic: true}
	return c.postOp(op, &a)
}

// PostFetchAndAdd posts a fetch-and-add as FetchAndAdd does; after
// op.Wait, op.Value is the word's original value.
func (c *Conn) PostFetchAndAdd(op *Op, remote RemoteBuffer, add uint64) error {
	a := opArgs{opcode: verbs.WRAtomicFetchAndAdd, remote: remote, compareAdd: add, isAtomic: true}
	return c.postOp(op, &a)
}

// PostSend posts a SEND as Send does; op.Wait waits for it.
func (c *Conn) PostSend(op *Op, local verbs.SGE) error {
	a := opArgs{local: local, isSend: true}
	return c.postOp(op, &a)
}
