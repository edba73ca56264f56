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
struct srd_mr { struct ibv_mr mr; uintptr_t h; };
struct srd_ah { struct ibv_ah ah; uintptr_t h; };
struct srd_srq { struct ibv_srq srq; uintptr_t h; };

struct srd_channel {
	struct ibv_comp_channel ch;
	uintptr_t h;
	int wfd;
};

struct srd_cq {
	struct ibv_cq cq;
	uintptr_t h;
};

/* The work requests one ibv_wr_start..ibv_wr_complete batch builds. */
#define SRD_WR_BATCH 64
#define SRD_WR_SGE 16
#define SRD_INLINE_BYTES 8192

struct srd_qp {
	struct ibv_qp_ex qpx; /* qpx.qp_base is the ibv_qp the program sees */
	uintptr_t h;
	int ex; /* created with send_ops_flags: ibv_qp_to_qp_ex returns qpx */
	/* ibv_wr_* builder state, used by one thread at a time as rdma-core requires */
	int nwr;
	int err;
	size_t inl_used;
	struct ibv_send_wr wr[SRD_WR_BATCH];
	struct ibv_sge sge[SRD_WR_BATCH][SRD_WR_SGE];
	unsigned char inl[SRD_INLINE_BYTES];
};

static inline struct srd_ctx *srd_ctx_of(struct ibv_context *c)
{
	return SRD_CONTAINER(c, struct srd_ctx, vctx.context);
}

#endif
