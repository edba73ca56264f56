//go:build cgo && clib

package main

// rdma_cm for a QP the program creates and moves itself (rping -q): no
// rdma_create_qp, the QP number in the connection parameters.
//
//	active:  rdma_connect(qp_num) ─▶ cm.DialOwnQP ─▶ CONNECT_RESPONSE
//	         rdma_init_qp_attr(INIT, RTR, RTS) ─▶ Response.QPAttr; the program calls ibv_modify_qp
//	         rdma_establish ─▶ Response.Establish (the RTU); no event, as with the kernel
//	passive: CONNECT_REQUEST ─▶ rdma_init_qp_attr ─▶ ConnRequest.QPAttr; ibv_modify_qp
//	         rdma_accept(qp_num) ─▶ ConnRequest.AcceptOwnQP (REP, RTU) ─▶ ESTABLISHED
//
// Before a connection, rdma_init_qp_attr gives what the kernel's rdma_cm
// gives then: the INIT attributes of the id's port (and, for UD, the
// steps librdmacm itself takes to RTS).

/*
#define SRD_CM_GO 1
#include "ibverbs.h"
#include "rdmacm.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// attrSource gives the attributes of a QP the program moves itself: a
// cm.ConnRequest (passive) or a cm.Response (active).
type attrSource interface {
	QPAttr(verbs.QPState) (*verbs.QPAttr, verbs.QPAttrMask, error)
}

// logf says on stderr, with SOFTRDMA_LOG=1, why a call failed.
func logf(format string, args ...any) {
	if logErrors {
		fmt.Fprintf(os.Stderr, "softrdma: "+format+"\n", args...)
	}
}

// ownQPN is the QP number of rdma_connect's or rdma_accept's parameters
// for a QP the program created itself (0: none given).
func ownQPN(p *C.struct_rdma_conn_param) uint32 {
	if p == nil {
		return 0
	}
	return uint32(p.qp_num)
}

// connectOwn is rdma_connect for the QP numbered in p: the REQ goes out
// with its number, and the REP comes back as CONNECT_RESPONSE.
func (id *cmID) connectOwn(d *cmDev, remote netip.AddrPort, p *C.struct_rdma_conn_param) C.int {
	qpn := ownQPN(p)
	if qpn == 0 {
		logf("rdma_connect: the id has no QP and the connection parameters name none: create the QP with rdma_create_qp, or give its number in conn_param->qp_num")
		return C.EINVAL
	}
	if id.qpType == verbs.QPTypeUD {
		logf("rdma_connect: a UD QP the program moves itself is not supported: create it with rdma_create_qp")
		return C.EOPNOTSUPP
	}
	o := id.options(d, p)
	id.background(func(ctx context.Context) {
		resp, err := dialGrace(ctx, func() (*cm.Response, error) {
			return cm.DialOwnQP(ctx, "rdma", remote.String(), qpn, o)
		})
		id.mu.Lock()
		id.cancel = nil
		gone := id.destroyed
		if err == nil && !gone {
			id.resp, id.attrs = resp, resp
		}
		id.mu.Unlock()
		switch {
		case gone && resp != nil:
			resp.Reject(nil)
		case gone:
		case err != nil:
			logf("rdma_connect: %v", err)
			id.post(connError(err))
		default:
			rq, _, _ := resp.QPAttr(verbs.QPStateRTR)
			id.post(&cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_RESPONSE, pdata: resp.PeerPrivateData,
				respRes: resp.ResponderResources, initDepth: resp.InitiatorDepth, qpn: rq.DestQPNum})
		}
	})
	return 0
}

// acceptOwn is rdma_accept for the QP numbered in p, which the program
// moved to RTS with rdma_init_qp_attr's attributes: the REP goes out with
// its number; the RTU comes back as ESTABLISHED.
func (id *cmID) acceptOwn(req *cm.ConnRequest, d *cmDev, p *C.struct_rdma_conn_param) C.int {
	qpn := ownQPN(p)
	if qpn == 0 || req.QPType != verbs.QPTypeRC {
		req.Reject(nil)
		if req.QPType != verbs.QPTypeRC {
			logf("rdma_accept: a UD QP the program moves itself is not supported: create it with rdma_create_qp")
			return C.EOPNOTSUPP
		}
		logf("rdma_accept: the id has no QP and the connection parameters name none: create the QP with rdma_create_qp, or give its number in conn_param->qp_num")
		return C.EINVAL
	}
	o := id.acceptOptions(d, p)
	id.background(func(ctx context.Context) {
		c, err := req.AcceptOwnQP(ctx, qpn, o)
		id.finish("rdma_accept", c, err, false)
	})
	return 0
}

//export srdgo_cm_establish
func srdgo_cm_establish(h C.uintptr_t) (ret C.int) {
	defer guard("rdma_establish", &ret)
	id := idOf(h)
	id.mu.Lock()
	resp := id.resp
	id.resp = nil
	id.mu.Unlock()
	if resp == nil {
		logf("rdma_establish: no connect response to answer: call it after RDMA_CM_EVENT_CONNECT_RESPONSE, on an id without a QP")
		return C.EINVAL
	}
	c, err := resp.Establish()
	if err != nil {
		return errnoOf("rdma_establish", err)
	}
	id.mu.Lock()
	gone := id.destroyed
	if !gone {
		id.conn = c
	}
	id.mu.Unlock()
	if gone {
		c.Close()
		return C.EINVAL
	}
	// The kernel's rdma_cm reports nothing more to the active side: the
	// passive side gets ESTABLISHED, this one DISCONNECTED at the end.
	id.watch(c)
	return 0
}

//export srdgo_cm_init_qp_attr
func srdgo_cm_init_qp_attr(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask *C.int) (ret C.int) {
	defer guard("rdma_init_qp_attr", &ret)
	id := idOf(h)
	state := verbs.QPState(a.qp_state)
	id.mu.Lock()
	src, d, qpType, conn, ackTO := id.attrs, id.dev, id.qpType, id.conn, id.ackTimeout
	id.mu.Unlock()
	var attr *verbs.QPAttr
	var m verbs.QPAttrMask
	var err error
	switch {
	case src != nil:
		// The traffic class is in the connection's path already (the
		// REQ carries it); an ACK timeout set on a passive id applies
		// to its own QP.
		attr, m, err = src.QPAttr(state)
		if err == nil && ackTO != 0 && m&verbs.QPAttrTimeout != 0 {
			attr.Timeout = ackTO
		}
	case conn != nil:
		logf("rdma_init_qp_attr: the id's QP is the one rdma_cm moved (rdma_create_qp); its attributes are set")
		return C.EINVAL
	case d == nil:
		logf("rdma_init_qp_attr: the id has no device yet: bind it or resolve an address first")
		return C.EINVAL
	default:
		// No connection yet: the port's INIT attributes, as the kernel
		// gives them (no remote access before the peer's depths are
		// known); a UD QP's steps to RTS need nothing from a peer.
		p := cm.Params{Port: 1, QKey: cm.RDMAUDPQKey}
		if state != verbs.QPStateInit && qpType != verbs.QPTypeUD {
			logf("rdma_init_qp_attr: no connection yet: %v attributes come with the connect request or response (INIT is available now)", state)
			return C.EINVAL
		}
		attr, m, err = cm.StepAttr(state, qpType, cm.Endpoint{}, cm.Endpoint{}, &p)
	}
	if err != nil {
		return errnoOf("rdma_init_qp_attr", err)
	}
	qpAttrToC(a, attr)
	*mask = C.int(m)
	return 0
}

//export srdgo_cm_set_option
func srdgo_cm_set_option(h C.uintptr_t, name C.int, value C.uint8_t) (ret C.int) {
	defer guard("rdma_set_option", &ret)
	id := idOf(h)
	id.mu.Lock()
	defer id.mu.Unlock()
	switch name {
	case C.RDMA_OPTION_ID_TOS:
		id.tos = uint8(value)
	case C.RDMA_OPTION_ID_ACK_TIMEOUT:
		if value == 0 || value > 31 {
			logf("rdma_set_option: ACK timeout %d: softrdma takes codes 1 to 31 (4.096 µs × 2^code); 0, never time out, would leave a lost packet unanswered forever", value)
			return C.EINVAL
		}
		id.ackTimeout = uint8(value)
	default:
		return C.EINVAL
	}
	return 0
}
