package verbs

import (
	"context"
	"fmt"
	"net/netip"
)

// KernelCM is implemented by a device whose connection management the
// operating system's kernel runs: a kernel RDMA device (provider/ibverbs),
// where the kernel owns QP1 and librdmacm is the way in. Package cm uses
// it for such a device instead of its own CM agent, so cm.Dial, cm.Listen
// and what is built on them (rdmanet, the tools) run unchanged there.
//
// The provider creates no QP of its own: it moves the caller's QP (in
// RESET, or in INIT with receives posted; created on any PD of the same
// device) through INIT, RTR and RTS with the attributes the kernel's CM
// computes for the connection (rdma_init_qp_attr), so cm's options (a
// caller's QP, PD, CQs) work as on softrdma's devices.
type KernelCM interface {
	// CMDial resolves p.Dst (from p.Src, if valid), connects p.QP to the
	// listener there (a REQ for RC, a SIDR_REQ for UD) and waits for the
	// connection or ctx. A REJ is a *CMRejectError.
	CMDial(ctx context.Context, p *CMParams) (CMConn, error)
	// CMListen listens on addr (bound as rdma_bind_addr binds it) for
	// qpType's port space: UD listens for SIDR requests, the others for
	// REQs.
	CMListen(addr netip.AddrPort, qpType QPType, backlog int) (CMListener, error)
}

// CMParams are what KernelCM's Dial and a request's Accept need.
type CMParams struct {
	Src, Dst netip.AddrPort // Dst: Dial only; Src's port is unused
	Port     uint8          // the device port (Dial resolves it; 0: any)
	QPType   QPType
	QP       QP     // the QP to connect, in RESET or INIT; on this device
	PD       PD     // UD: the PD the peer's AH is created on
	Access   Access // the QP's access flags at INIT (RC, UC)
	// PrivateData goes into the REQ, REP or SIDR_REQ after rdma_cm's
	// header.
	PrivateData                        []byte
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
}

// CMConnInfo is what one side learns when a connection is made.
type CMConnInfo struct {
	Local, Remote netip.AddrPort
	// PrivateData is the peer's, after rdma_cm's header.
	PrivateData                        []byte
	ResponderResources, InitiatorDepth uint8
	// UD: the peer's QPN and Q_Key and an AH to it (on CMParams.PD).
	RemoteQPN, RemoteQKey uint32
	AH                    AH
}

// CMConn is one connected rdma_cm ID.
type CMConn interface {
	Info() CMConnInfo
	// Done is closed when the peer disconnects or the ID fails.
	Done() <-chan struct{}
	// Close disconnects (a DREQ for RC) and releases the ID; it does
	// not touch the QP.
	Close() error
}

// CMListener is a listening rdma_cm ID.
type CMListener interface {
	Addr() netip.AddrPort
	// Accept waits for the next request, ctx, or Close (ErrClosed).
	Accept(ctx context.Context) (CMRequest, error)
	Close() error
}

// CMRequest is a connection request a CMListener received; answer it
// once, with Accept or Reject.
type CMRequest interface {
	Info() CMRequestInfo
	// Accept connects p.QP (in RESET or INIT) to the requester and, for RC,
	// waits for the RTU or ctx.
	Accept(ctx context.Context, p *CMParams) (CMConn, error)
	Reject(private []byte) error
}

// CMRequestInfo says who asks and with what.
type CMRequestInfo struct {
	Local, Remote                      netip.AddrPort
	QPType                             QPType
	PrivateData                        []byte
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	Port                               uint8
}

// CMRejectError is a peer's refusal as the kernel's CM reports it: a
// REJ's reason (RC) or a SIDR_REP's status (UD), with the private data.
type CMRejectError struct {
	Reason      uint16
	UD          bool
	PrivateData []byte
}

func (e *CMRejectError) Error() string {
	if e.UD {
		return fmt.Sprintf("rdma_cm: service ID resolution failed: SIDR_REP status %d", e.Reason)
	}
	return fmt.Sprintf("rdma_cm: connection rejected (REJ reason %d)", e.Reason)
}
