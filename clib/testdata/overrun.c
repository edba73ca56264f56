/* overrun: a CQ that overflows, as a program sees it, on two RC QPs of one
 * device connected to each other in one process.
 *
 * QP 0's send CQ holds one completion (cqe 1, as perftest's latency tests
 * make it); three signaled SENDs complete while nobody polls it. rxe then
 * reports IBV_EVENT_CQ_ERR on the context's async fd, keeps the completions
 * that fitted and loses the others, and its ibv_poll_cq goes on working.
 * Checked here:
 *
 *   1. the async event IBV_EVENT_CQ_ERR names the CQ;
 *   2. ibv_poll_cq returns what the CQ kept, in order from the first,
 *      fewer than were sent, and never an error;
 *   3. the CQ works on: a fourth SEND's completion is polled as usual.
 *
 *   overrun -d DEV -g GIDX
 *
 * clib/test.sh runs it over the library, and clib/interop.sh in the VM
 * through rdma-core's own library on rxe0, where it passes too; exit
 * status 0 means every check held.
 */
#define TCPX_PROG "overrun"
#include "tcpx.h"
#include <poll.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qp[2];
static struct ibv_mr *mr;
static char buf[4096];

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "overrun: %s (%ld, %ld)\n", what, a, b);
	exit(1);
}

static void send_one(uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED}, *bad;
	if (ibv_post_send(qp[0], &w, &bad))
		die("ibv_post_send");
}

/* receive waits for n receive completions on QP 1 (the polls also drive
 * the device, which completes QP 0's SENDs as their ACKs come in). */
static void receive(int n)
{
	struct ibv_wc wc;
	long spins = 0;

	for (int got = 0; got < n;) {
		int k = ibv_poll_cq(rcq, 1, &wc);
		if (k < 0)
			fail("ibv_poll_cq of the receive CQ", k, got);
		if (k == 1 && wc.status != IBV_WC_SUCCESS)
			fail("receive status", wc.status, got);
		got += k;
		if (++spins > 50000000)
			fail("receives stopped at", got, n);
	}
}

/* send_cq_poll polls the send CQ until it gives a completion or until
 * tries empty polls, and returns what the last poll returned. */
static int send_cq_poll(struct ibv_wc *wc, long tries)
{
	int k = 0;

	for (long i = 0; i < tries && k == 0; i++)
		k = ibv_poll_cq(scq, 4, wc);
	return k;
}

int main(int argc, char **argv)
{
	const char *devname = NULL;
	int opt, gidx = 0, k;
	struct ibv_wc wc[4];
	struct ibv_async_event ev;
	struct pollfd pfd;

	while ((opt = getopt(argc, argv, "d:g:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		default: fprintf(stderr, "usage: overrun -d DEV -g GIDX\n"); return 2;
		}
	}
	ctx = open_device(devname);
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	scq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!mr || !scq || !rcq)
		die("ibv_reg_mr/ibv_create_cq");
	for (int i = 0; i < 2; i++)
		qp[i] = rc_qp(pd, i == 0 ? scq : rcq, rcq, 4, 8);
	rc_loop(ctx, qp, gidx);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr w = {.wr_id = i, .sg_list = &s, .num_sge = 1}, *bad;
		if (ibv_post_recv(qp[1], &w, &bad))
			die("ibv_post_recv");
	}

	/* Three SENDs complete into a CQ that holds one. */
	for (int i = 0; i < 3; i++) {
		send_one(i);
		receive(1);
	}
	/* 1. The overrun is an async event, on the CQ. */
	pfd = (struct pollfd){.fd = ctx->async_fd, .events = POLLIN};
	if (poll(&pfd, 1, 10000) != 1)
		fail("no async event within 10 s of the overrun", 0, 0);
	if (ibv_get_async_event(ctx, &ev))
		die("ibv_get_async_event");
	if (ev.event_type != IBV_EVENT_CQ_ERR || ev.element.cq != scq)
		fail("async event: type, want IBV_EVENT_CQ_ERR", ev.event_type, IBV_EVENT_CQ_ERR);
	ibv_ack_async_event(&ev);
	/* 2. What the CQ kept, in order from the first, and fewer than were
	 * sent: never an error. (A provider may round the size up, and one
	 * that completes a SEND only when its CQ is polled, as shm0, may add
	 * a later SEND's completion once the poll made room.) */
	if (scq->cqe < 1 || scq->cqe > 2)
		fail("ibv_create_cq(cqe 1) gave cqe", scq->cqe, 1);
	{
		long last = -1, got = 0, empty = 0;
		while (got < 3 && empty < 100000) {
			k = ibv_poll_cq(scq, 4, wc);
			if (k < 0)
				fail("ibv_poll_cq after the overrun returned", k, got);
			empty = k ? 0 : empty + 1;
			for (int i = 0; i < k; i++, got++) {
				if ((long)wc[i].wr_id <= last || (got == 0 && wc[i].wr_id != 0))
					fail("kept completions out of order: wr_id after", (long)wc[i].wr_id, last);
				if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_SEND)
					fail("a kept completion: status, opcode", wc[i].status, wc[i].opcode);
				last = (long)wc[i].wr_id;
			}
		}
		if (got < 1 || got > 2)
			fail("completions polled after the overrun, want 1 or 2", got, 0);
	}
	/* 3. The CQ goes on. */
	send_one(3);
	receive(1);
	k = send_cq_poll(wc, 50000000);
	if (k != 1 || wc[0].wr_id != 3 || wc[0].status != IBV_WC_SUCCESS)
		fail("the SEND after the overrun: returned, wr_id", k, k == 1 ? (long)wc[0].wr_id : -1);
	for (int i = 0; i < 2; i++)
		if (ibv_destroy_qp(qp[i]))
			die("ibv_destroy_qp");
	if (ibv_destroy_cq(scq) || ibv_destroy_cq(rcq))
		die("ibv_destroy_cq");
	printf("overrun: the CQ overflowed, reported it, and went on\n");
	return 0;
}
