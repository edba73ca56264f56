//go:build ibverbs && cgo && linux

package ibverbs

// The C side of the provider: thin wrappers around libibverbs' inline
// functions and macros (cgo calls only real functions), and the two batch
// calls of the data path. sr_post_send turns a whole chain of requests,
// written by Go into C memory the QP owns, into an ibv_send_wr chain and
// posts it with one ibv_post_send; sr_poll_cq is one ibv_poll_cq into the
// CQ's array. Neither allocates. Their handles and arrays are C memory,
// passed as uintptr_t: cgo checks every argument whose type holds
// pointers for Go pointers (cgocheck), a cost per call the data path
// need not pay for memory Go never allocated.

/*
#cgo LDFLAGS: -libverbs
#cgo noescape sr_post_send
#cgo nocallback sr_post_send
#cgo noescape sr_post_recv
#cgo nocallback sr_post_recv
#cgo noescape sr_post_srq_recv
#cgo nocallback sr_post_srq_recv
#cgo noescape sr_poll_cq
#cgo nocallback sr_poll_cq
#include "sr.h"
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


// sr_post_send builds the ibv_send_wr chain for n requests of in, whose
// SGEs are at sge + i*maxsge, in wr (room for n), and posts it. On
// failure *bad is the index of the first request not posted.
int sr_post_send(uintptr_t qph, uintptr_t inh, int n,
		uintptr_t wrh, struct ibv_sge *sge, int maxsge, int *bad) {
	struct ibv_qp *qp = (struct ibv_qp *)qph;
	struct sr_wr *in = (struct sr_wr *)inh;
	struct ibv_send_wr *wr = (struct ibv_send_wr *)wrh;
	int ud = qp->qp_type == IBV_QPT_UD;
	for (int i = 0; i < n; i++) {
		struct sr_wr *g = &in[i];
		struct ibv_send_wr *w = &wr[i];
		w->wr_id = g->wr_id;
		w->next = i + 1 < n ? &wr[i + 1] : NULL;
		w->sg_list = sge + (size_t)i * maxsge;
		w->num_sge = g->num_sge;
		w->opcode = g->opcode;
		w->send_flags = g->flags;
		w->imm_data = 0;
		switch (g->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			w->wr.rdma.remote_addr = g->remote_addr;
			w->wr.rdma.rkey = g->rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w->wr.atomic.remote_addr = g->remote_addr;
			w->wr.atomic.compare_add = g->compare_add;
			w->wr.atomic.swap = g->swap;
			w->wr.atomic.rkey = g->rkey;
			break;
		case IBV_WR_BIND_MW:
			w->bind_mw.mw = g->mw;
			w->bind_mw.rkey = g->rkey;
			w->bind_mw.bind_info.mr = g->bind_mr;
			w->bind_mw.bind_info.addr = g->remote_addr;
			w->bind_mw.bind_info.length = g->bind_len;
			w->bind_mw.bind_info.mw_access_flags = g->bind_access;
			break;
		default:
			if (ud) {
				w->wr.ud.ah = g->ah;
				w->wr.ud.remote_qpn = g->remote_qpn;
				w->wr.ud.remote_qkey = g->remote_qkey;
			}
		}
		if (g->opcode == IBV_WR_SEND_WITH_IMM || g->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			w->imm_data = htonl(g->imm);
		else if (g->opcode == IBV_WR_SEND_WITH_INV || g->opcode == IBV_WR_LOCAL_INV)
			w->invalidate_rkey = g->inv_rkey;
	}
	struct ibv_send_wr *badwr = NULL;
	int r = ibv_post_send(qp, wr, &badwr);
	*bad = (r && badwr) ? (int)(badwr - wr) : 0;
	return r;
}

// sr_post_recv posts the chain Go built in wr (linked already).
int sr_post_recv(uintptr_t qph, uintptr_t wrh, int n, int *bad) {
	struct ibv_qp *qp = (struct ibv_qp *)qph;
	struct ibv_recv_wr *wr = (struct ibv_recv_wr *)wrh;
	struct ibv_recv_wr *badwr = NULL;
	wr[n - 1].next = NULL;
	int r = ibv_post_recv(qp, wr, &badwr);
	*bad = (r && badwr) ? (int)(badwr - wr) : 0;
	return r;
}

int sr_post_srq_recv(uintptr_t srqh, uintptr_t wrh, int n, int *bad) {
	struct ibv_srq *srq = (struct ibv_srq *)srqh;
	struct ibv_recv_wr *wr = (struct ibv_recv_wr *)wrh;
	struct ibv_recv_wr *badwr = NULL;
	wr[n - 1].next = NULL;
	int r = ibv_post_srq_recv(srq, wr, &badwr);
	*bad = (r && badwr) ? (int)(badwr - wr) : 0;
	return r;
}


// sr_poll_cq polls up to n completions into wc and flattens them into out.
int sr_poll_cq(uintptr_t cq, int n, struct ibv_wc *wc, struct sr_wc *out) {
	int r = ibv_poll_cq((struct ibv_cq *)cq, n, wc);
	for (int i = 0; i < r; i++) {
		struct ibv_wc *w = &wc[i];
		struct sr_wc *o = &out[i];
		o->wr_id = w->wr_id;
		o->status = w->status;
		o->opcode = w->opcode;
		o->vendor_err = w->vendor_err;
		o->byte_len = w->byte_len;
		if (w->wc_flags & IBV_WC_WITH_IMM)
			o->imm = ntohl(w->imm_data);
		else if (w->wc_flags & IBV_WC_WITH_INV)
			o->imm = w->invalidated_rkey;
		else
			o->imm = 0;
		o->qp_num = w->qp_num;
		o->src_qp = w->src_qp;
		o->wc_flags = w->wc_flags;
		o->pkey_index = w->pkey_index;
		o->slid = w->slid;
		o->sl = w->sl;
		o->dlid_path_bits = w->dlid_path_bits;
	}
	return r;
}

int sr_req_notify_cq(struct ibv_cq *cq, int solicited) {
	return ibv_req_notify_cq(cq, solicited);
}

int sr_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}

int sr_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e) {
	return ibv_query_gid_ex(ctx, port, index, e, 0);
}

struct ibv_mr *sr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access) {
	return ibv_reg_mr_iova2(pd, addr, len, (uint64_t)(uintptr_t)addr, access);
}

// The memory-window verbs are inline in verbs.h, so cgo cannot call
// them.
struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, int type) {
	return ibv_alloc_mw(pd, (enum ibv_mw_type)type);
}

int sr_dealloc_mw(struct ibv_mw *mw) {
	return ibv_dealloc_mw(mw);
}

// sr_bind_mw binds a type 1 window with ibv_bind_mw, which moves
// mw->rkey on; *rkey is the new one.
int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, unsigned int flags, struct ibv_mr *mr,
	       uint64_t addr, uint64_t len, unsigned int access, uint32_t *rkey) {
	struct ibv_mw_bind b = {.wr_id = wr_id, .send_flags = flags,
		.bind_info = {.mr = mr, .addr = addr, .length = len, .mw_access_flags = access}};
	int r = ibv_bind_mw(qp, mw, &b);
	*rkey = mw->rkey;
	return r;
}

// sr_nonblock makes fd non-blocking and returns a duplicate of it for
// Go's netpoller (the original stays libibverbs', which closes it).
int sr_nonblock_dup(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

// sr_get_cq_events takes up to max events off a non-blocking channel,
// storing each one's CQ in cqs, without acking them (Go acks in
// batches): how many, 0 if none (EAGAIN), -1 on an error before any.
// *drained says whether it stopped at EAGAIN (an error after some events
// is the next call's to report).
int sr_get_cq_events(struct ibv_comp_channel *ch, uintptr_t *cqs, int max, int *drained) {
	int n = 0;
	*drained = 0;
	while (n < max) {
		struct ibv_cq *cq;
		void *cqctx;
		if (ibv_get_cq_event(ch, &cq, &cqctx) < 0) {
			if (errno == EAGAIN) {
				*drained = 1;
				break;
			}
			if (n > 0)
				break;
			return -1;
		}
		cqs[n++] = (uintptr_t)cq;
	}
	return n;
}

// sr_ack_cq_events acks n events of cq, a handle sr_get_cq_events gave.
void sr_ack_cq_events(uintptr_t cq, unsigned int n) {
	ibv_ack_cq_events((struct ibv_cq *)cq, n);
}


// sr_get_async_event takes one event off the non-blocking async fd and
// acks it: 1 if there was one, 0 if none, -1 on error. Acking before Go
// looks the object up is safe: Go forgets an object before destroying it.
int sr_get_async_event(struct ibv_context *ctx, struct sr_async *out) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev) < 0)
		return errno == EAGAIN ? 0 : -1;
	out->type = ev.event_type;
	out->elem = NULL;
	out->port = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		out->elem = ev.element.cq;
		break;
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->elem = ev.element.qp;
		break;
	case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED:
		out->elem = ev.element.srq;
		break;
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE: case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 1;
}

*/
import "C"
