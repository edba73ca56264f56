//go:build clib

/*
 * Shared declarations of softrdma's libibverbs.so.1: the C wrappers around
 * rdma-core's public structs (allocated by the C side, laid out by
 * rdma-core's own verbs.h) and the handles of the Go objects behind them.
 */
#ifndef SOFTRDMA_IBVERBS_H
#define SOFTRDMA_IBVERBS_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>

#define SRD_CONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct srd_device {
	struct ibv_device dev;
	int index;
	uint64_t guid; /* host order */
};

struct srd_ctx {
	struct verbs_context vctx; /* ibv_context is its last member */
	uintptr_t h;
	int async_wfd;
};

struct srd_pd { struct ibv_pd pd; uintptr_t h; };
struct srd_mr { struct ibv_mr mr; uintptr_t h; unsigned int access; };
struct srd_ah { struct ibv_ah ah; uintptr_t h; };
struct srd_srq { struct ibv_srq srq; uintptr_t h; };
struct srd_mw { struct ibv_mw mw; uintptr_t h; };

struct srd_channel {
	struct ibv_comp_channel ch;
	uintptr_t h;
	int wfd;
	/* Records in the pipe that no thread has claimed: the provider
	 * adds once it has written one, ibv_get_cq_event takes one before
	 * it reads (srd_event_claim). */
	uint32_t pending;
	/* How long ibv_get_cq_event receives for the device before it
	 * blocks, at least; 0: it blocks at once (a device it cannot
	 * drive). */
	int64_t spin_ns;
	/* The channel's waits, a moving average (ns): the spin stretches
	 * to cover waits of up to SRD_SPIN_MAX (srd_spin_limit). */
	int64_t wait_ns;
	/* The hand-off: a thread spinning in ibv_get_cq_event offers to
	 * take the next event straight from the provider (SRD_HAND_OPEN),
	 * which then stores the ibv_cq in hand_cq (BUSY, then FULL) instead
	 * of writing the pipe: a write and a read saved per event. */
	uint32_t hand;
	uint64_t hand_cq;
};

#define SRD_HAND_IDLE 0
#define SRD_HAND_OPEN 1
#define SRD_HAND_BUSY 2
#define SRD_HAND_FULL 3

/*
 * The polling state of a CQ made by ibv_create_cq_ex (ibverbs_cqex.c):
 * completions taken from Go a batch at a time, not yet consumed. buf[head]
 * is the one ibv_start_poll/ibv_next_poll is at while cur is set; they
 * are older than any completion still in Go, so every poll of the CQ,
 * ibv_poll_cq included, takes them first.
 */
#define SRD_CQX_BATCH 16

struct srd_cqx {
	pthread_mutex_t mu; /* held from a start_poll that found one to end_poll, as rxe's lock */
	int head, n, cur;
	struct ibv_wc buf[SRD_CQX_BATCH];
};

struct srd_cq {
	union { /* first: Go finds fed from the ibv_cq */
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* begins as struct ibv_cq does (ibv_cq_ex_to_cq) */
	};
	uintptr_t h;
	/* fed: set (release) after a post queued requests in the send ring
	 * of a QP that completes here; the next ibv_poll_cq clears it and
	 * takes those rings, and polls with it clear look at no ring. */
	uint32_t fed;
	struct srd_cqx *x; /* ibv_create_cq_ex's; NULL: ibv_create_cq's */
};

struct srd_cq *srd_cq_create(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector, struct srd_cqx *x);
struct ibv_cq_ex *srd_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
int srd_cqx_poll(struct srd_cq *q, int n, struct ibv_wc *wc);
void srd_cqx_free(struct srd_cq *q);
void srd_cqx_clean(struct srd_cq *q, uint32_t qpn);
struct pollfd;
int srd_wait_readable(struct pollfd *p);
int srd_cq_poll(struct srd_cq *q, int n, struct ibv_wc *wc);

/* The work requests one ibv_wr_start..ibv_wr_complete batch builds. */
#define SRD_WR_BATCH 64
#define SRD_WR_SGE 16
#define SRD_INLINE_BYTES 8192

/*
 * The send ring of an RC QP (ibverbs_sring.c, sring.go): ibv_post_send
 * queues a request here, without entering Go, while the QP is armed, that
 * is while it has requests outstanding and so will come back by itself
 * (their acknowledgement, a timeout, an error) and take what waits here
 * (roce.SendFeed). Otherwise, and for any request the ring does not carry,
 * ibv_post_send calls Go, which takes the ring first, so order holds.
 */
#define SRD_SRING_SLOTS 256  /* at most; fewer for a shallower send queue */
#define SRD_SRING_SGE 4      /* requests with more SGEs go through Go */
#define SRD_SRING_INLINE 128 /* inline data the ring copies; more goes through Go */

struct srd_sslot {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t imm;        /* ibv_send_wr's imm_data / invalidate_rkey, as posted */
	uint32_t rkey;
	uint32_t num_sge;    /* in sge[]; 0 for inline data, which is in data[] */
	uint32_t inline_len; /* bytes in data[] */
	struct ibv_sge sge[SRD_SRING_SGE];
	unsigned char data[SRD_SRING_INLINE];
};

/* What the send and the receive ring share: the producer's and the QP's
 * words (ibverbs_sring.c, sring.go). */
struct srd_ring {
	/* the producer's (ibv_post_send, ibv_post_recv), under mu */
	pthread_mutex_t mu;
	uint32_t tail;   /* atomic: the next slot to fill */
	uint32_t posted; /* requests the post accepted, ever (ring and Go) */
	char pad[64];    /* the QP's words below on a cache line of their own */
	/* the QP's (Go, under the QP's lock) */
	uint32_t head;    /* atomic: the next slot to take */
	uint32_t armed;   /* atomic: the producer may queue */
	uint32_t retired; /* atomic: requests that left the QP's queue, ever */
	/* fixed at creation */
	uint32_t mask; /* slots - 1 */
	uint32_t max_wr, max_sge;
};

struct srd_sring {
	struct srd_ring r;
	uint32_t max_inline;
	struct srd_sslot *slots;
};

/*
 * The receive ring of a QP without an SRQ: ibv_post_recv queues here
 * without entering Go while the QP is armed (INIT to SQE); the QP takes
 * the ring when a message finds its receive queue empty, when a post goes
 * through Go, and when it goes to ERR (flushed) or RESET (discarded)
 * (roce.RecvFeed).
 */
#define SRD_RRING_SLOTS 512
#define SRD_RRING_SGE 4

struct srd_rslot {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct ibv_sge sge[SRD_RRING_SGE];
};

struct srd_rring {
	struct srd_ring r;
	struct srd_rslot *slots;
};

struct srd_qp {
	struct ibv_qp_ex qpx; /* qpx.qp_base is the ibv_qp the program sees */
	uintptr_t h;
	struct srd_sring *sring; /* RC QPs; NULL: every post goes through Go */
	struct srd_rring *rring; /* QPs without an SRQ; NULL: every post goes through Go */
	int ex; /* created with send_ops_flags: ibv_qp_to_qp_ex returns qpx */
	/* ibv_wr_* builder state, used by one thread at a time as rdma-core requires */
	int nwr;
	int err;
	size_t inl_used;
	struct ibv_send_wr wr[SRD_WR_BATCH];
	struct ibv_sge sge[SRD_WR_BATCH][SRD_WR_SGE];
	unsigned char inl[SRD_INLINE_BYTES];
};

void srd_sring_init(struct srd_qp *q, const struct ibv_qp_cap *cap);
void srd_sring_free(struct srd_qp *q);
int srd_qp_post_send(struct srd_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
void srd_rring_init(struct srd_qp *q, const struct ibv_qp_cap *cap, int srq);
void srd_rring_free(struct srd_qp *q);
int srd_qp_post_recv(struct srd_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

static inline struct srd_ctx *srd_ctx_of(struct ibv_context *c)
{
	return SRD_CONTAINER(c, struct srd_ctx, vctx.context);
}

#endif
