// Package cm establishes connections between queue pairs over any
// provider, the way Linux's rdma_cm does and wire-compatible with it.
//
// [Listen], [Listener.Accept], [ConnRequest.Accept] and [Dial] speak the
// IB CM protocol (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP;
// IBTA vol 1 ch. 12) in MADs on QP1 through [verbs.GSI], with rdma_cm's
// service IDs and private-data header, so librdmacm programs (rping,
// ucmatose, udaddy, perftest -R) are peers. A CM agent per device port
// keeps each connection in the kernel cm.c's states and resends at its
// timeouts; it lives as long as the device: closing the device closes
// its connections and listeners ([ErrDeviceClosed]). Listening on the
// unspecified address listens on every device of the host. Over the
// shared-memory provider (a device with a [verbs.ServiceDirectory]) the
// same calls connect processes of one host: Listen binds its port on the
// host and Dial to a host address finds the process by the port.
//
// A [Conn] carries one-sided operations for Go programs: [Conn.Write],
// [Conn.Read], [Conn.CompareAndSwap], [Conn.FetchAndAdd] and [Conn.Send]
// post a work request and wait for its completion, the Post forms with
// an [Op] wait later; a [RemoteBuffer] is what a peer offers to them.
//
// [Connect] and the single steps [Init], [ReadyToReceive] and
// [ReadyToSend] remain for programs that exchange each side's [Endpoint]
// out of band (the pingpong line, perftest's key lines) and step a QP
// through RESET → INIT → RTR → RTS with the masks libibverbs requires;
// [StepAttr] gives each step's attributes to a program that calls Modify
// itself.
//
// [DialOwnQP] and [ConnRequest.AcceptOwnQP] connect a QP the caller moves
// itself (rdma_connect and rdma_accept on an id without a QP): cm agrees
// its QPN, PSNs and path with the peer, [Response.QPAttr] and
// [ConnRequest.QPAttr] give the attributes of each step
// (rdma_init_qp_attr), and [Response.Establish] sends the RTU
// (rdma_establish).
//
// cm imports verbs and wire (the MAD layouts) and the standard library.
// Connect and the steps keep no state; they are as safe for concurrent
// use as the QP's Modify is. Listeners, requests and connections are safe
// for concurrent use.
package cm

import (
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

// Endpoint is what one side of a connection tells the other: the address of
// its QP and the first PSN it will send.
type Endpoint struct {
	QPN uint32    // the queue pair number
	PSN uint32    // the first packet sequence number it sends (24 bits)
	GID verbs.GID // its port GID; zero means no GRH (InfiniBand by LID)
	LID uint16    // its port LID; 0 on RoCE
}

// Params are the rdma-style connection parameters that are not exchanged.
// Start from [DefaultParams] and change what differs; a nil *Params given
// to any function in this package means DefaultParams().
type Params struct {
	// Port is the local port number (1-based), for INIT and the AH.
	Port      uint8
	PKeyIndex uint16
	// Access is what the remote side may do to this QP's memory (RC, UC).
	Access verbs.Access
	// QKey is the UD Q_Key set at INIT.
	QKey uint32
	// PathMTU must not exceed the port's ActiveMTU.
	PathMTU verbs.MTU
	// SGIDIndex, HopLimit, SL and TrafficClass go into the address
	// vector (the traffic class is the IP header's DSCP and ECN bits on
	// RoCEv2).
	SGIDIndex    uint8
	HopLimit     uint8
	SL           uint8
	TrafficClass uint8
	// AlwaysGRH sets a GRH even when the remote GID is zero (perftest
	// does); by default the GRH is used exactly when the remote GID is set.
	AlwaysGRH bool
	// Timeout is the local ACK timeout code: 4.096 µs × 2^Timeout (RC).
	Timeout uint8
	// RetryCnt and RNRRetry count retransmissions after a timeout and
	// after an RNR NAK; 7 means infinite for RNRRetry (RC).
	RetryCnt, RNRRetry uint8
	// MinRNRTimer is the RNR NAK timer code this side sends (RC).
	MinRNRTimer uint8
	// MaxRdAtomic is how many READ/atomic requests this side keeps
	// outstanding (the initiator depth); MaxDestRdAtomic how many incoming
	// ones it has resources for (the responder resources) (RC).
	MaxRdAtomic, MaxDestRdAtomic uint8
}

// DefaultParams returns the parameters most RDMA programs use: port 1,
// P_Key index 0, local write and remote read and write access, path MTU
// 1024 (what rxe derives from a 1500-byte Ethernet MTU), SGID index 0, hop
// limit 64, SL 0, timeout 14 (about 67 ms), 7 retries, 7 RNR retries
// (infinite), RNR timer 12 (0.64 ms), and one outstanding READ/atomic
// each way.
func DefaultParams() Params {
	return Params{
		Port:            1,
		Access:          verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		PathMTU:         verbs.MTU1024,
		HopLimit:        64,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
		MinRNRTimer:     12,
		MaxRdAtomic:     1,
		MaxDestRdAtomic: 1,
	}
}

// StepError reports which transition of which QP failed. It unwraps to the
// provider's error (for example a *verbs.Error naming the bad attribute).
type StepError struct {
	QPN      uint32
	From, To verbs.QPState
	Err      error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("cm: QP %#x %v → %v: %v", e.QPN, e.From, e.To, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

func params(p *Params) *Params {
	if p == nil {
		d := DefaultParams()
		return &d
	}
	return p
}

func modify(qp verbs.QP, from verbs.QPState, attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if err := qp.Modify(attr, mask); err != nil {
		return &StepError{QPN: qp.QPNum(), From: from, To: attr.QPState, Err: err}
	}
	return nil
}

// Init moves qp from RESET to INIT: port, P_Key index, and the access flags
// (RC, UC) or the Q_Key (UD). Receives may be posted from INIT on.
func Init(qp verbs.QP, p *Params) error {
	attr, mask := initAttr(qp.Type(), params(p))
	return modify(qp, verbs.QPStateReset, attr, mask)
}

// ReadyToReceive moves qp from INIT to RTR towards remote. An RC or UC QP
// gets the address vector, path MTU, remote QPN and the PSN it expects
// first; an RC QP also its responder resources and RNR timer. A UD QP
// takes no attributes here (remote is unused).
func ReadyToReceive(qp verbs.QP, remote Endpoint, p *Params) error {
	attr, mask := rtrAttr(qp.Type(), remote, params(p))
	return modify(qp, verbs.QPStateInit, attr, mask)
}

// ReadyToSend moves qp from RTR to RTS, sending from local.PSN. An RC QP
// also gets its ACK timeout, retry counts and initiator depth.
func ReadyToSend(qp verbs.QP, local Endpoint, p *Params) error {
	attr, mask := rtsAttr(qp.Type(), local, params(p))
	return modify(qp, verbs.QPStateRTR, attr, mask)
}

// StepAttr returns the attributes and mask that [Init], [ReadyToReceive]
// or [ReadyToSend] pass to Modify to move a QP of type t to state (INIT,
// RTR or RTS), for a program that calls Modify itself (as C programs
// call ibv_modify_qp with what rdma_init_qp_attr returns). local and
// remote are as for [Connect]; a nil p means DefaultParams.
func StepAttr(state verbs.QPState, t verbs.QPType, local, remote Endpoint, p *Params) (*verbs.QPAttr, verbs.QPAttrMask, error) {
	p = params(p)
	switch state {
	case verbs.QPStateInit:
		attr, mask := initAttr(t, p)
		return attr, mask, nil
	case verbs.QPStateRTR:
		attr, mask := rtrAttr(t, remote, p)
		return attr, mask, nil
	case verbs.QPStateRTS:
		attr, mask := rtsAttr(t, local, p)
		return attr, mask, nil
	}
	return nil, 0, verbs.Errorf("cm", verbs.ErrInvalidArgument, "no connection attributes for state %v: ask for INIT, RTR or RTS", state)
}

func initAttr(t verbs.QPType, p *Params) (*verbs.QPAttr, verbs.QPAttrMask) {
	attr := &verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: p.PKeyIndex, PortNum: p.Port}
	mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
	if t == verbs.QPTypeUD {
		attr.QKey = p.QKey
		mask |= verbs.QPAttrQKey
	} else {
		attr.QPAccessFlags = p.Access
		mask |= verbs.QPAttrAccessFlags
	}
	return attr, mask
}

func rtrAttr(t verbs.QPType, remote Endpoint, p *Params) (*verbs.QPAttr, verbs.QPAttrMask) {
	attr := &verbs.QPAttr{QPState: verbs.QPStateRTR}
	mask := verbs.QPAttrState
	if t == verbs.QPTypeRC || t == verbs.QPTypeUC {
		attr.PathMTU, attr.DestQPNum, attr.RQPSN = p.PathMTU, remote.QPN, remote.PSN
		attr.MaxDestRdAtomic, attr.MinRNRTimer = p.MaxDestRdAtomic, p.MinRNRTimer
		attr.AHAttr = verbs.AHAttr{
			IsGlobal: p.AlwaysGRH || !remote.GID.IsZero(),
			DLID:     remote.LID, SL: p.SL, PortNum: p.Port,
			GRH: verbs.GlobalRoute{DGID: remote.GID, SGIDIndex: p.SGIDIndex, HopLimit: p.HopLimit, TrafficClass: p.TrafficClass},
		}
		mask |= verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if t == verbs.QPTypeRC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
	}
	return attr, mask
}

func rtsAttr(t verbs.QPType, local Endpoint, p *Params) (*verbs.QPAttr, verbs.QPAttrMask) {
	attr := &verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: local.PSN, Timeout: p.Timeout,
		RetryCnt: p.RetryCnt, RNRRetry: p.RNRRetry, MaxRdAtomic: p.MaxRdAtomic}
	mask := verbs.QPAttrState | verbs.QPAttrSQPSN
	if t == verbs.QPTypeRC {
		mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	return attr, mask
}

// Connect brings qp to RTS towards remote: [Init] if qp is in RESET, then
// [ReadyToReceive] and [ReadyToSend]. local is qp's own endpoint (its PSN
// is the first one sent). It works for RC, UC and UD QPs; the error is a
// *StepError naming the transition that failed.
func Connect(qp verbs.QP, local, remote Endpoint, p *Params) error {
	p = params(p)
	if qp.State() == verbs.QPStateReset {
		if err := Init(qp, p); err != nil {
			return err
		}
	}
	if err := ReadyToReceive(qp, remote, p); err != nil {
		return err
	}
	return ReadyToSend(qp, local, p)
}
