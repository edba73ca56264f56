//go:build clib

/*
 * ibv_post_send without a crossing into Go: the send ring (ibverbs.h).
 *
 * A call from C into Go costs about 0.15 µs whatever the Go side does
 * (the runtime's exitsyscall, the wait for package init, reentersyscall):
 * 15-20 % of a 64-byte message's cost. While an RC QP has requests
 * outstanding it comes back by itself when their acknowledgement arrives,
 * and takes the requests queued here then (internal/roce: SendFeed); so a
 * program that keeps its send queue busy, as every bandwidth test does,
 * posts in C alone, and its requests leave in the batch the
 * acknowledgement sends.
 *
 * The ring carries what it can check here exactly as the QP would:
 * WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM, SEND_WITH_INV and READ, up
 * to SRD_SRING_SGE SGEs and the QP's max_send_sge, inline data up to
 * SRD_SRING_INLINE bytes and the QP's max_inline_data, with room in the
 * send queue. Anything else (atomics, longer lists, an unarmed QP, a full
 * queue) goes through Go, which takes the ring first and then answers
 * with the error libibverbs would.
 *
 * The arming is Dekker's handshake: the producer stores tail, then loads
 * armed; the QP stores armed, then loads tail. Both sequentially
 * consistent, so when the QP disarms as a request lands, one of them sees
 * the other: the QP takes the request, or ibv_post_send sees the QP
 * disarmed and asks Go to take it (srdgo_take_feed).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ibverbs.h"
#include "_cgo_export.h"
#include "forked.h"

/* ring_off reports whether the environment variable env turns a ring off;
 * *off caches the answer. */
static int ring_off(int *off, const char *env)
{
	if (*off < 0) {
		const char *e = getenv(env);

		*off = e && *e && strcmp(e, "0") != 0;
	}
	return *off;
}

/* ring_new allocates a ring of size bytes whose slots (of slot bytes, as
 * many as a queue of max_wr needs, at most most) it puts in *slots; NULL
 * if memory is short: the QP then posts through Go. */
static void *ring_new(size_t size, size_t slot, uint32_t max_wr, uint32_t max_sge, uint32_t most, void **slots)
{
	struct srd_ring *r;
	uint32_t n = 1;

	while (n < max_wr && n < most)
		n <<= 1;
	r = calloc(1, size);
	if (!r)
		return NULL;
	*slots = calloc(n, slot);
	if (!*slots) {
		free(r);
		return NULL;
	}
	pthread_mutex_init(&r->mu, NULL);
	r->mask = n - 1;
	r->max_wr = max_wr;
	r->max_sge = max_sge;
	return r;
}

static void ring_free(struct srd_ring *r, void *slots)
{
	pthread_mutex_destroy(&r->mu);
	free(slots);
	free(r);
}

/* ring_open reports whether r may take one more request now: armed, a
 * free slot, and room in the QP's queue by the producer's count (retired
 * may lag, so the count errs towards full, and a full queue goes through
 * Go, which knows). Precondition: r->mu held. */
static int ring_open(const struct srd_ring *r)
{
	return __atomic_load_n(&r->armed, __ATOMIC_SEQ_CST) &&
	       r->tail - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) <= r->mask &&
	       r->posted - __atomic_load_n(&r->retired, __ATOMIC_ACQUIRE) < r->max_wr;
}

/* ring_push publishes the slot at tail, filled by the caller; it reports
 * whether the QP disarmed meanwhile, and so may not have seen it: the
 * caller then asks Go to take the ring. Dekker's other half is in
 * roce's armFeedLocked. */
static int ring_push(struct srd_ring *r)
{
	__atomic_store_n(&r->tail, r->tail + 1, __ATOMIC_SEQ_CST);
	r->posted++;
	return !__atomic_load_n(&r->armed, __ATOMIC_SEQ_CST);
}

static int sring_off = -1; /* SOFTRDMA_NO_SEND_RING=1: every post goes through Go */

void srd_sring_init(struct srd_qp *q, const struct ibv_qp_cap *cap)
{
	struct srd_sring *r;
	void *slots;

	if (ring_off(&sring_off, "SOFTRDMA_NO_SEND_RING") || q->qpx.qp_base.qp_type != IBV_QPT_RC || cap->max_send_wr == 0)
		return;
	r = ring_new(sizeof(*r), sizeof(*r->slots), cap->max_send_wr, cap->max_send_sge, SRD_SRING_SLOTS, &slots);
	if (!r)
		return;
	r->slots = slots;
	r->max_inline = cap->max_inline_data;
	if (srdgo_qp_set_feed(q->h, r) != 0) {
		/* A QP of a device without feeds (shm0): posts go through Go. */
		ring_free(&r->r, r->slots);
		return;
	}
	q->sring = r;
}

/* srd_sring_free runs after srdgo_destroy_qp: the QP no longer reads it. */
void srd_sring_free(struct srd_qp *q)
{
	if (q->sring)
		ring_free(&q->sring->r, q->sring->slots);
	q->sring = NULL;
}

/* sring_carries reports whether the ring can carry w as the QP would take
 * it from ibv_post_send; *len is then its length. */
static int sring_carries(const struct srd_sring *r, const struct ibv_send_wr *w, uint64_t *len)
{
	uint64_t total = 0;
	int i;

	switch (w->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_READ:
		break;
	default:
		return 0;
	}
	if (w->num_sge < 0 || w->num_sge > SRD_SRING_SGE || (uint32_t)w->num_sge > r->r.max_sge ||
	    (w->num_sge > 0 && !w->sg_list))
		return 0;
	for (i = 0; i < w->num_sge; i++)
		total += w->sg_list[i].length;
	if ((w->send_flags & IBV_SEND_INLINE) && w->opcode != IBV_WR_RDMA_READ) {
		if (total > r->max_inline || total > SRD_SRING_INLINE)
			return 0;
	} else if (total > (1ull << 31)) {
		return 0;
	}
	*len = total;
	return 1;
}

static void sring_fill(struct srd_sslot *s, const struct ibv_send_wr *w, uint64_t len)
{
	int i;

	s->wr_id = w->wr_id;
	s->opcode = w->opcode;
	s->send_flags = w->send_flags;
	s->imm = w->imm_data; /* the union's word: imm_data or invalidate_rkey */
	s->remote_addr = w->wr.rdma.remote_addr;
	s->rkey = w->wr.rdma.rkey;
	if ((w->send_flags & IBV_SEND_INLINE) && w->opcode != IBV_WR_RDMA_READ) {
		/* The program may reuse its buffers once the call returns. */
		size_t off = 0;

		for (i = 0; i < w->num_sge; i++) {
			memcpy(s->data + off, (const void *)(uintptr_t)w->sg_list[i].addr, w->sg_list[i].length);
			off += w->sg_list[i].length;
		}
		s->num_sge = 0;
		s->inline_len = (uint32_t)len;
		return;
	}
	s->inline_len = 0;
	s->num_sge = (uint32_t)w->num_sge;
	if (w->num_sge > 0)
		memcpy(s->sge, w->sg_list, (size_t)w->num_sge * sizeof(s->sge[0]));
}

int srd_qp_post_send(struct srd_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct srd_sring *r = q->sring;
	struct ibv_send_wr *w;
	int err = 0, take = 0;

	if (srd_forked) { /* the ring needs the parent's Go side (forked.h) */
		*bad = wr;
		return ENODEV;
	}
	if (!r)
		return srdgo_post_send(q->h, wr, bad);
	pthread_mutex_lock(&r->r.mu);
	for (w = wr; w; w = w->next) {
		uint64_t len;

		if (!ring_open(&r->r) || !sring_carries(r, w, &len))
			break;
		sring_fill(&r->slots[r->r.tail & r->r.mask], w, len);
		take |= ring_push(&r->r);
	}
	if (w) {
		/* The rest through Go, which takes the ring first. */
		struct ibv_send_wr *b = NULL, *x;

		err = srdgo_post_send(q->h, w, &b);
		for (x = w; x && !(err && x == b); x = x->next)
			r->r.posted++;
		*bad = b;
	} else if (take) {
		srdgo_take_feed(q->h);
	}
	if (w != wr) /* queued some: the send CQ's next poll takes them */
		__atomic_store_n(&SRD_CONTAINER(q->qpx.qp_base.send_cq, struct srd_cq, cq)->fed, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&r->r.mu);
	return err;
}

/*
 * ibv_post_recv without a crossing into Go: the receive ring (ibverbs.h).
 * A receive request only waits for a message, so the QP need not come
 * back for it: it takes the ring when a message finds its receive queue
 * empty. The ring is armed from INIT to SQE; in RESET (EINVAL) and ERR
 * (flushed at once) every post goes through Go. A request with more SGEs
 * than the ring or the QP carries, or with the queue full by the ring's
 * own count, goes through Go too, which takes the ring first.
 */
static int rring_off = -1; /* SOFTRDMA_NO_RECV_RING=1 */

void srd_rring_init(struct srd_qp *q, const struct ibv_qp_cap *cap, int srq)
{
	struct srd_rring *r;
	void *slots;

	if (ring_off(&rring_off, "SOFTRDMA_NO_RECV_RING") || srq || cap->max_recv_wr == 0)
		return;
	r = ring_new(sizeof(*r), sizeof(*r->slots), cap->max_recv_wr, cap->max_recv_sge, SRD_RRING_SLOTS, &slots);
	if (!r)
		return;
	r->slots = slots;
	if (srdgo_qp_set_rfeed(q->h, r) != 0) {
		ring_free(&r->r, r->slots);
		return;
	}
	q->rring = r;
}

void srd_rring_free(struct srd_qp *q)
{
	if (q->rring)
		ring_free(&q->rring->r, q->rring->slots);
	q->rring = NULL;
}

int srd_qp_post_recv(struct srd_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct srd_rring *r = q->rring;
	struct ibv_recv_wr *w;
	int err = 0, take = 0;

	if (srd_forked) {
		*bad = wr;
		return ENODEV;
	}
	if (!r)
		return srdgo_post_recv(q->h, wr, bad);
	pthread_mutex_lock(&r->r.mu);
	for (w = wr; w; w = w->next) {
		struct srd_rslot *s;

		if (!ring_open(&r->r) || w->num_sge < 0 || w->num_sge > SRD_RRING_SGE ||
		    (uint32_t)w->num_sge > r->r.max_sge || (w->num_sge > 0 && !w->sg_list))
			break;
		s = &r->slots[r->r.tail & r->r.mask];
		s->wr_id = w->wr_id;
		s->num_sge = (uint32_t)w->num_sge;
		if (w->num_sge > 0)
			memcpy(s->sge, w->sg_list, (size_t)w->num_sge * sizeof(s->sge[0]));
		take |= ring_push(&r->r);
	}
	if (w) {
		struct ibv_recv_wr *b = NULL, *x;

		err = srdgo_post_recv(q->h, w, &b);
		for (x = w; x && !(err && x == b); x = x->next)
			r->r.posted++;
		*bad = b;
	} else if (take) {
		srdgo_take_rfeed(q->h);
	}
	pthread_mutex_unlock(&r->r.mu);
	return err;
}
