//go:build clib

/*
 * The extended post-send API (ibv_wr_start, ibv_wr_rdma_write,
 * ibv_wr_set_sge, ..., ibv_wr_complete) of a QP created with
 * send_ops_flags. Each ibv_wr_<opcode> call starts a new ibv_send_wr in
 * the QP's batch, the ibv_wr_set_* calls fill its data and address, and
 * ibv_wr_complete posts the batch through the same path as ibv_post_send.
 * Inline data is copied when it is set, as rdma-core's providers do, so
 * the caller may reuse its buffer at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "ibverbs.h"
#include "_cgo_export.h"
#include "forked.h"

static struct srd_qp *qp_of(struct ibv_qp_ex *qpx)
{
	return SRD_CONTAINER(qpx, struct srd_qp, qpx);
}

static struct ibv_send_wr *next_wr(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct srd_qp *q = qp_of(qpx);
	struct ibv_send_wr *wr;

	if (q->err)
		return NULL;
	if (q->nwr == SRD_WR_BATCH) {
		/* A full batch is posted now; a later failure is still reported
		 * by ibv_wr_complete. */
		struct ibv_send_wr *bad = NULL;

		q->wr[q->nwr - 1].next = NULL;
		q->err = srd_qp_post_send(q, &q->wr[0], &bad);
		q->nwr = 0;
		q->inl_used = 0;
		if (q->err)
			return NULL;
	}
	wr = &q->wr[q->nwr];
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = qpx->wr_id;
	wr->send_flags = qpx->wr_flags;
	wr->opcode = op;
	wr->sg_list = q->sge[q->nwr];
	if (q->nwr > 0)
		q->wr[q->nwr - 1].next = wr;
	q->nwr++;
	return wr;
}

static struct ibv_send_wr *cur_wr(struct ibv_qp_ex *qpx)
{
	struct srd_qp *q = qp_of(qpx);

	if (q->err || q->nwr == 0) {
		if (!q->err)
			q->err = EINVAL;
		return NULL;
	}
	return &q->wr[q->nwr - 1];
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct srd_qp *q = qp_of(qpx);

	q->nwr = 0;
	q->err = 0;
	q->inl_used = 0;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct srd_qp *q = qp_of(qpx);
	struct ibv_send_wr *bad = NULL;
	int err = q->err;

	if (!err && q->nwr > 0) {
		q->wr[q->nwr - 1].next = NULL;
		err = srd_qp_post_send(q, &q->wr[0], &bad);
	}
	q->nwr = 0;
	q->err = 0;
	q->inl_used = 0;
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct srd_qp *q = qp_of(qpx);

	q->nwr = 0;
	q->err = 0;
	q->inl_used = 0;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_RDMA_WRITE);

	if (wr) {
		wr->wr.rdma.rkey = rkey;
		wr->wr.rdma.remote_addr = addr;
	}
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);

	if (wr) {
		wr->wr.rdma.rkey = rkey;
		wr->wr.rdma.remote_addr = addr;
		wr->imm_data = imm;
	}
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_RDMA_READ);

	if (wr) {
		wr->wr.rdma.rkey = rkey;
		wr->wr.rdma.remote_addr = addr;
	}
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	next_wr(qpx, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_SEND_WITH_IMM);

	if (wr)
		wr->imm_data = imm;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_SEND_WITH_INV);

	if (wr)
		wr->invalidate_rkey = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_LOCAL_INV);

	if (wr)
		wr->invalidate_rkey = rkey;
}

/* As rxe's: the window's new rkey is the caller's, and ibv_mw's rkey is
 * left alone. */
static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_BIND_MW);

	if (!wr)
		return;
	if (!mw || !info) {
		qp_of(qpx)->err = EINVAL;
		return;
	}
	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *info;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);

	if (wr) {
		wr->wr.atomic.rkey = rkey;
		wr->wr.atomic.remote_addr = addr;
		wr->wr.atomic.compare_add = compare;
		wr->wr.atomic.swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct ibv_send_wr *wr = next_wr(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);

	if (wr) {
		wr->wr.atomic.rkey = rkey;
		wr->wr.atomic.remote_addr = addr;
		wr->wr.atomic.compare_add = add;
	}
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *wr = cur_wr(qpx);

	if (wr) {
		wr->wr.ud.ah = ah;
		wr->wr.ud.remote_qpn = qpn;
		wr->wr.ud.remote_qkey = qkey;
	}
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_send_wr *wr = cur_wr(qpx);

	if (wr) {
		wr->sg_list[0].lkey = lkey;
		wr->sg_list[0].addr = addr;
		wr->sg_list[0].length = length;
		wr->num_sge = 1;
	}
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sg)
{
	struct ibv_send_wr *wr = cur_wr(qpx);

	if (!wr)
		return;
	if (n > SRD_WR_SGE) {
		qp_of(qpx)->err = EINVAL;
		return;
	}
	memcpy(wr->sg_list, sg, n * sizeof(*sg));
	wr->num_sge = n;
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *bufs)
{
	struct srd_qp *q = qp_of(qpx);
	struct ibv_send_wr *wr = cur_wr(qpx);
	size_t i, total = 0;

	if (!wr)
		return;
	for (i = 0; i < n; i++)
		total += bufs[i].length;
	if (total > SRD_INLINE_BYTES - q->inl_used) {
		q->err = ENOMEM;
		return;
	}
	wr->sg_list[0].addr = (uintptr_t)&q->inl[q->inl_used];
	wr->sg_list[0].length = total;
	wr->sg_list[0].lkey = 0;
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_INLINE;
	for (i = 0; i < n; i++) {
		memcpy(&q->inl[q->inl_used], bufs[i].addr, bufs[i].length);
		q->inl_used += bufs[i].length;
	}
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf b = { .addr = addr, .length = length };

	wr_set_inline_data_list(qpx, 1, &b);
}

void srd_qp_ex_init(struct srd_qp *q, uint64_t ops)
{
	struct ibv_qp_ex *x = &q->qpx;

	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE)
		x->wr_rdma_write = wr_rdma_write;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		x->wr_rdma_write_imm = wr_rdma_write_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_READ)
		x->wr_rdma_read = wr_rdma_read;
	if (ops & IBV_QP_EX_WITH_SEND)
		x->wr_send = wr_send;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM)
		x->wr_send_imm = wr_send_imm;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_INV)
		x->wr_send_inv = wr_send_inv;
	if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
		x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
		x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	if (ops & IBV_QP_EX_WITH_LOCAL_INV)
		x->wr_local_inv = wr_local_inv;
	if (ops & IBV_QP_EX_WITH_BIND_MW)
		x->wr_bind_mw = wr_bind_mw;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
}
