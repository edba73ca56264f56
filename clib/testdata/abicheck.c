/*
 * abicheck: misuse and blocking checks of softrdma's libibverbs.so.1,
 * from C, through the public ABI only. Each CHECK names what it tests;
 * the program prints FAIL lines and exits 1 if any fails.
 *
 * Covered: NULL and invalid arguments and attribute masks return the
 * errno libibverbs returns, in its convention for each function; a bad
 * work request is reported through bad_wr; a PD in use cannot be freed;
 * a completion channel's fd is a real fd (O_NONBLOCK gives EAGAIN, poll()
 * wakes on an event, ibv_get_cq_event returns the CQ and its context);
 * ibv_close_device releases what the program left.
 *
 * Build: cc -o abicheck abicheck.c -libverbs   (clib/test.sh does)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int fails;

#define CHECK(cond, what)                                                  \
	do {                                                               \
		if (!(cond)) {                                             \
			printf("FAIL %s (line %d, errno %d %s)\n", what,   \
			       __LINE__, errno, strerror(errno));          \
			fails++;                                           \
		}                                                          \
	} while (0)

static struct ibv_context *open_dev(const char *name)
{
	int n, i;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	if (!list)
		return NULL;
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

/* Steps an RC QP to RTS connected to dest (itself for a loopback). */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, int gid_index)
{
	struct ibv_qp_attr a;
	union ibv_gid gid;

	if (ibv_query_gid(qp->context, 1, gid_index, &gid))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 1;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "softrdma_lo";
	int gid_index = argc > 2 ? atoi(argv[2]) : 1;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *ev_cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr qia;
	struct ibv_qp_attr qa;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_wc wc;
	struct pollfd pfd;
	void *ev_ctx;
	char *buf;
	int n, r;

	/* No device: NULL and errno. */
	errno = 0;
	CHECK(ibv_open_device(NULL) == NULL && errno == EINVAL, "ibv_open_device(NULL) -> NULL, EINVAL");
	ctx = open_dev(name);
	if (!ctx) {
		printf("FAIL cannot open %s\n", name);
		return 1;
	}
	errno = 0;
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL, "ibv_alloc_pd(NULL) -> NULL, EINVAL");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "ibv_alloc_pd");
	CHECK(ibv_query_gid(ctx, 1, -1, NULL) == -1 && errno == EINVAL, "ibv_query_gid(NULL) -> -1, EINVAL");
	CHECK(ibv_query_device(NULL, NULL) == EINVAL, "ibv_query_device(NULL) returns EINVAL");

	buf = aligned_alloc(4096, 8192);
	memset(buf, 0, 8192);
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "ibv_reg_mr remote write without local write -> NULL, EINVAL");
	errno = 0;
	CHECK(ibv_reg_mr(NULL, buf, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "ibv_reg_mr(NULL pd) -> NULL, EINVAL");
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(mr != NULL && mr->addr == buf && mr->length == 8192, "ibv_reg_mr at the buffer's own address");

	errno = 0;
	CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL, "ibv_create_cq(cqe 0) -> NULL, EINVAL");
	errno = 0;
	CHECK(ibv_create_cq(ctx, 16, NULL, NULL, 99) == NULL && errno == EINVAL,
	      "ibv_create_cq(comp_vector 99) -> NULL, EINVAL");
	ch = ibv_create_comp_channel(ctx);
	CHECK(ch != NULL && ch->fd >= 0, "ibv_create_comp_channel gives an fd");
	cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	CHECK(cq != NULL && cq->cqe >= 16, "ibv_create_cq");
	{
		/* A channel is its context's: another context's CQ cannot use it. */
		struct ibv_context *other = open_dev(ibv_get_device_name(ctx->device));

		errno = 0;
		CHECK(other && ibv_create_cq(other, 16, NULL, ch, 0) == NULL && errno == EINVAL,
		      "ibv_create_cq with another context's channel -> NULL, EINVAL");
		if (other)
			ibv_close_device(other);
	}

	errno = 0;
	CHECK(ibv_create_qp(pd, NULL) == NULL && errno == EINVAL, "ibv_create_qp(NULL attr) -> NULL, EINVAL");
	memset(&qia, 0, sizeof(qia));
	qia.send_cq = cq;
	qia.recv_cq = cq;
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = 8;
	qia.cap.max_recv_wr = 8;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &qia);
	CHECK(qp != NULL && qp->qp_num != 0 && qp->state == IBV_QPS_RESET, "ibv_create_qp RC");

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | (1 << 30)) == EINVAL, "ibv_modify_qp unknown mask bit returns EINVAL");
	qa.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL, "ibv_modify_qp RESET -> RTR returns EINVAL");
	CHECK(ibv_modify_qp(NULL, &qa, IBV_QP_STATE) == EINVAL, "ibv_modify_qp(NULL) returns EINVAL");

	/* Posting to a RESET QP fails and names the request. */
	sge.addr = (uintptr_t)buf;
	sge.length = 64;
	sge.lkey = mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 7;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	bad = NULL;
	r = ibv_post_send(qp, &wr, &bad);
	CHECK(r != 0 && bad == &wr, "ibv_post_send on a RESET QP fails with bad_wr set");

	CHECK(connect_qp(qp, qp->qp_num, gid_index) == 0, "connect the QP to itself");
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_RTS, "ibv_query_qp says RTS");

	wr.opcode = IBV_WR_BIND_MW;
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send BIND_MW without a window returns EINVAL, bad_wr set");

	/* The completion channel's fd: non-blocking read, then poll(). */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
	      "ibv_get_cq_event on an empty non-blocking channel -> -1, EAGAIN");

	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 9;
	sge.addr = (uintptr_t)buf + 4096;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0, "ibv_post_recv");
	sge.addr = (uintptr_t)buf;
	memcpy(buf, "hello", 6);
	wr.opcode = IBV_WR_SEND;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send SEND to itself");

	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	CHECK(poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLIN), "poll() on the channel fd wakes for the event");
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq && ev_ctx == (void *)0x1234,
	      "ibv_get_cq_event returns the CQ and its context");
	ibv_ack_cq_events(cq, 1);
	for (n = 0, r = 0; r < 2000000 && n < 2; r++) {
		int got = ibv_poll_cq(cq, 1, &wc);

		CHECK(got >= 0, "ibv_poll_cq");
		if (got == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "completion status success");
			if (wc.opcode == IBV_WC_RECV)
				CHECK(wc.wr_id == 9 && wc.byte_len == 64 && !strcmp(buf + 4096, "hello"),
				      "the receive has the bytes sent");
			n++;
		}
	}
	CHECK(n == 2, "a send and a receive completion");
	CHECK(ibv_poll_cq(cq, -1, &wc) < 0, "ibv_poll_cq with a negative count fails");

	CHECK(ibv_dealloc_pd(pd) == EBUSY, "ibv_dealloc_pd with a QP and an MR in it returns EBUSY");
	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "ibv_destroy_comp_channel with a CQ on it returns EBUSY");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");

	/* Left for ibv_close_device to release: an MR, a PD, a CQ. */
	cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device with objects left");
	free(buf);
	printf("%s: %d failed\n", fails ? "FAIL" : "ok", fails);
	return fails ? 1 : 0;
}
