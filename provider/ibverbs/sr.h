// The C side of package ibverbs: the flat structs Go fills and reads,
// and the wrappers cgo.go defines.
#ifndef SOFTRDMA_IBVERBS_SR_H
#define SOFTRDMA_IBVERBS_SR_H
#include <infiniband/verbs.h>
#include <stdint.h>

// sr_wr is a send work request as Go writes it: flat, without
// libibverbs' unions, so Go can fill it field by field.
struct sr_wr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	struct ibv_ah *ah;
	struct ibv_mw *mw;     // BIND_MW: the window (rkey is its new rkey,
	struct ibv_mr *bind_mr; // remote_addr and bind_len the range)
	uint64_t bind_len;
	uint32_t bind_access;
	uint32_t rkey;
	uint32_t imm;        // host order; sent in network order
	uint32_t opcode;     // enum ibv_wr_opcode
	uint32_t flags;      // enum ibv_send_flags
	uint32_t num_sge;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t inv_rkey;
};

// sr_wc is a work completion as Go reads it: flat, the immediate data
// in host order.
struct sr_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len;
	uint32_t imm, qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
};

// sr_async is one asynchronous event as Go reads it.
struct sr_async {
	int type;
	void *elem; // the QP, CQ or SRQ
	int port;
};

int sr_post_send(uintptr_t qp, uintptr_t in, int n, uintptr_t wr, struct ibv_sge *sge, int maxsge, int *bad);
int sr_post_recv(uintptr_t qp, uintptr_t wr, int n, int *bad);
int sr_post_srq_recv(uintptr_t srq, uintptr_t wr, int n, int *bad);
int sr_poll_cq(uintptr_t cq, int n, struct ibv_wc *wc, struct sr_wc *out);
int sr_req_notify_cq(struct ibv_cq *cq, int solicited);
int sr_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
int sr_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e);
struct ibv_mr *sr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access);
int sr_nonblock_dup(int fd);
struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, int type);
int sr_dealloc_mw(struct ibv_mw *mw);
int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, unsigned int flags, struct ibv_mr *mr,
	       uint64_t addr, uint64_t len, unsigned int access, uint32_t *rkey);
int sr_get_cq_events(struct ibv_comp_channel *ch, uintptr_t *cqs, int max, int *drained);
void sr_ack_cq_events(uintptr_t cq, unsigned int n);
int sr_get_async_event(struct ibv_context *ctx, struct sr_async *out);

#endif
