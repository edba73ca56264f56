//go:build clib

/*
 * ibv_create_cq_ex and the polling API of its CQs (ibv_start_poll,
 * ibv_next_poll, ibv_end_poll, ibv_wc_read_*), as rxe provides them: the
 * same completion fields rxe offers (byte_len, imm_data, qp_num, src_qp,
 * slid, sl, dlid_path_bits, besides status, wr_id, opcode, vendor_err
 * and wc_flags, which every CQ has), and the CQ locked from a start_poll
 * that found a completion to the end_poll, as rxe's spin lock does.
 *
 * A start_poll or next_poll that finds the CQ's batch used up takes up to
 * SRD_CQX_BATCH completions from Go in one crossing, so that a program
 * that walks many completions crosses once per batch, not per completion.
 * What an end_poll leaves in the batch stays there, oldest first, for the
 * next start_poll or ibv_poll_cq of the CQ.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>

#include "ibverbs.h"
#include "srderrno.h"

#define SRD_CQX_WC_FLAGS                                                                           \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

static struct srd_cq *cq_of(struct ibv_cq_ex *cqx)
{
	return SRD_CONTAINER(cqx, struct srd_cq, cqx);
}

/* cur_of is the completion the walk is at; a read with none (after a
 * poll that returned ENOENT, a program's mistake) reads zeros, never past
 * the batch. */
static const struct ibv_wc *cur_of(struct ibv_cq_ex *cqx)
{
	static const struct ibv_wc none;
	struct srd_cqx *x = cq_of(cqx)->x;

	return x->cur ? &x->buf[x->head] : &none;
}

/* refill takes the next batch from Go when the current one is used up;
 * it returns the completions now waiting in the batch, or a negative
 * errno. Precondition: x->mu held. */
static int refill(struct srd_cq *q)
{
	struct srd_cqx *x = q->x;
	int got;

	if (x->head < x->n)
		return x->n - x->head;
	got = srd_cq_poll(q, SRD_CQX_BATCH, x->buf);
	x->head = 0;
	x->n = got > 0 ? got : 0;
	return got;
}

/* at makes the batch's head the current completion. */
static void at(struct srd_cq *q)
{
	struct srd_cqx *x = q->x;

	x->cur = 1;
	q->cqx.status = x->buf[x->head].status;
	q->cqx.wr_id = x->buf[x->head].wr_id;
}

static int start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	struct srd_cq *q = cq_of(cqx);
	int got;

	if (!attr || attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&q->x->mu);
	got = refill(q);
	if (got <= 0) {
		pthread_mutex_unlock(&q->x->mu);
		return got < 0 ? -got : ENOENT;
	}
	at(q);
	return 0;
}

static int next_poll(struct ibv_cq_ex *cqx)
{
	struct srd_cq *q = cq_of(cqx);
	struct srd_cqx *x = q->x;
	int got;

	if (x->cur) {
		x->head++;
		x->cur = 0;
	}
	got = refill(q);
	if (got <= 0)
		return got < 0 ? -got : ENOENT;
	at(q);
	return 0;
}

/* end_poll consumes the current completion, as rxe's does, and unlocks. */
static void end_poll(struct ibv_cq_ex *cqx)
{
	struct srd_cqx *x = cq_of(cqx)->x;

	if (x->cur) {
		x->head++;
		x->cur = 0;
	}
	pthread_mutex_unlock(&x->mu);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cqx) { return cur_of(cqx)->opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *cqx) { return cur_of(cqx)->vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *cqx) { return cur_of(cqx)->byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex *cqx) { return cur_of(cqx)->imm_data; }
static uint32_t read_qp_num(struct ibv_cq_ex *cqx) { return cur_of(cqx)->qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *cqx) { return cur_of(cqx)->src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *cqx) { return cur_of(cqx)->wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *cqx) { return cur_of(cqx)->slid; }
static uint8_t read_sl(struct ibv_cq_ex *cqx) { return cur_of(cqx)->sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *cqx) { return cur_of(cqx)->dlid_path_bits; }

struct ibv_cq_ex *srd_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct srd_cqx *x;
	struct srd_cq *q;

	if (!ctx || !attr)
		return srd_fail_ptr(EINVAL);
	/* rdma-core's ibv_cmd_create_cq_ex: bits it does not know are EINVAL. */
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return srd_fail_ptr(EINVAL);
	/* No parent domains (ibv_alloc_parent_domain), and of the flags only
	 * the single-threaded hint: rxe refuses IGNORE_OVERRUN too. */
	if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD)
		return srd_fail_ptr(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		return srd_fail_ptr(EOPNOTSUPP);
	/* rxe's set; completion timestamps, CVLAN, flow tags and tag matching
	 * are a NIC's. */
	if (attr->wc_flags & ~(uint64_t)SRD_CQX_WC_FLAGS)
		return srd_fail_ptr(EOPNOTSUPP);
	x = calloc(1, sizeof(*x));
	if (!x)
		return srd_fail_ptr(ENOMEM);
	pthread_mutex_init(&x->mu, NULL);
	q = srd_cq_create(ctx, (int)attr->cqe, attr->cq_context, attr->channel, (int)attr->comp_vector, x);
	if (!q) {
		int err = errno;

		pthread_mutex_destroy(&x->mu);
		free(x);
		return srd_fail_ptr(err);
	}
	q->cqx.start_poll = start_poll;
	q->cqx.next_poll = next_poll;
	q->cqx.end_poll = end_poll;
	q->cqx.read_opcode = read_opcode;
	q->cqx.read_vendor_err = read_vendor_err;
	q->cqx.read_wc_flags = read_wc_flags;
	/* Set whether asked for or not: a read the program did not ask for
	 * returns the field rather than calling through NULL. */
	q->cqx.read_byte_len = read_byte_len;
	q->cqx.read_imm_data = read_imm_data;
	q->cqx.read_qp_num = read_qp_num;
	q->cqx.read_src_qp = read_src_qp;
	q->cqx.read_slid = read_slid;
	q->cqx.read_sl = read_sl;
	q->cqx.read_dlid_path_bits = read_dlid_path_bits;
	return &q->cqx;
}

/* srd_cqx_poll is ibv_poll_cq on a CQ of ibv_create_cq_ex: what its
 * batch holds, oldest first; Go's only when the batch is empty. */
int srd_cqx_poll(struct srd_cq *q, int n, struct ibv_wc *wc)
{
	struct srd_cqx *x = q->x;
	int got = 0;

	pthread_mutex_lock(&x->mu);
	while (got < n && x->head < x->n)
		wc[got++] = x->buf[x->head++];
	if (got == 0 && n > 0)
		got = srd_cq_poll(q, n, wc);
	pthread_mutex_unlock(&x->mu);
	return got;
}

/* srd_cqx_clean drops the completions of QP qpn that wait in q's batch:
 * a QP moved to RESET has its completions removed from its CQs (Go
 * removes those it still holds), and the batch holds some it took. A
 * walk under way ends first (the lock). */
void srd_cqx_clean(struct srd_cq *q, uint32_t qpn)
{
	struct srd_cqx *x = q ? q->x : NULL;
	int i, kept;

	if (!x)
		return;
	pthread_mutex_lock(&x->mu);
	kept = x->head;
	for (i = x->head; i < x->n; i++)
		if (x->buf[i].qp_num != qpn)
			x->buf[kept++] = x->buf[i];
	x->n = kept;
	pthread_mutex_unlock(&x->mu);
}

void srd_cqx_free(struct srd_cq *q)
{
	if (!q->x)
		return;
	pthread_mutex_destroy(&q->x->mu);
	free(q->x);
	q->x = NULL;
}
