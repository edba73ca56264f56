/* forkchild: what a child of fork() (without exec) meets, and that the
 * parent does not notice. The parent opens a device, makes a PD, a CQ,
 * an MR and two RC QPs connected to each other, and forks; the child,
 * under a 10 s alarm:
 *
 *   1. opens the device again: ENODEV, at once (the library's Go runtime
 *      has no threads in the child; it used to wait for them for ever);
 *   2. allocates a PD on the inherited context: ENODEV;
 *   3. polls the inherited CQ: -ENODEV; posts a send and a receive to
 *      the inherited QP (the library's post rings included): ENODEV;
 *      waits for a CQ event or an async event: ENODEV, at once, without
 *      taking the parent's records;
 *   4. creates an rdma_cm ID (librdmacm): fails at once;
 *   5. destroys the inherited QPs, deregisters the MR, destroys the CQ,
 *      deallocates the PD and closes the device: each returns 0 (the
 *      child's copy of the C memory goes; the parent's objects stay).
 *
 * Then the parent, once the child exited 0, sends a message between
 * its QPs: it still works.
 *
 *   forkchild -d DEV -g GIDX
 *
 * clib/test.sh runs it over the library; exit status 0 means every
 * check held.
 */
#define TCPX_PROG "forkchild"
#include "tcpx.h"
#include <rdma/rdma_cma.h>
#include <sys/wait.h>

static char buf[4096];

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "forkchild: %s (%ld, %ld)\n", what, a, b);
	exit(1);
}

#define CHECK(cond, a, b) \
	do { \
		if (!(cond)) \
			fail(#cond, (long)(a), (long)(b)); \
	} while (0)

int main(int argc, char **argv)
{
	const char *devname = NULL;
	int opt, gidx = 1, st, n;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
	struct ibv_mr *mr;
	struct ibv_qp *qp[2];
	struct ibv_wc wc;
	pid_t pid;

	while ((opt = getopt(argc, argv, "d:g:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		default: fprintf(stderr, "usage: forkchild -d DEV -g GIDX\n"); return 2;
		}
	}
	ctx = open_device(devname);
	pd = ibv_alloc_pd(ctx);
	ch = pd ? ibv_create_comp_channel(ctx) : NULL;
	cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	mr = cq ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		die("ibv_alloc_pd/ibv_create_cq/ibv_reg_mr");
	qp[0] = rc_qp(pd, cq, cq, 4, 4);
	qp[1] = rc_qp(pd, cq, cq, 4, 4);
	rc_loop(ctx, qp, gidx);

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
		struct rdma_event_channel *ech;
		struct rdma_cm_id *id = NULL;

		alarm(10); /* a call that waits for the Go runtime kills the child */
		errno = 0;
		CHECK(ibv_open_device(ctx->device) == NULL && errno == ENODEV, errno, ENODEV);
		errno = 0;
		CHECK(ibv_alloc_pd(ctx) == NULL && errno == ENODEV, errno, ENODEV);
		n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n == -ENODEV, n, -ENODEV);
		n = ibv_post_send(qp[0], &w, &bad);
		CHECK(n == ENODEV, n, ENODEV);
		{
			struct ibv_sge rs = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
			struct ibv_recv_wr rw = {.wr_id = 3, .sg_list = &rs, .num_sge = 1}, *rbad;
			struct ibv_async_event ae;
			struct ibv_cq *ecq;
			void *ectx;

			n = ibv_post_recv(qp[1], &rw, &rbad);
			CHECK(n == ENODEV, n, ENODEV);
			errno = 0;
			CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == ENODEV, errno, ENODEV);
			errno = 0;
			CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == ENODEV, errno, ENODEV);
		}
		ech = rdma_create_event_channel();
		CHECK(!ech || rdma_create_id(ech, &id, NULL, RDMA_PS_TCP) != 0, 0, 0);
		CHECK(ibv_destroy_qp(qp[0]) == 0 && ibv_destroy_qp(qp[1]) == 0, 0, 0);
		CHECK(ibv_dereg_mr(mr) == 0, 0, 0);
		CHECK(ibv_destroy_cq(cq) == 0, 0, 0);
		CHECK(ibv_destroy_comp_channel(ch) == 0, 0, 0);
		CHECK(ibv_dealloc_pd(pd) == 0, 0, 0);
		CHECK(ibv_close_device(ctx) == 0, 0, 0);
		_exit(0);
	}
	CHECK(waitpid(pid, &st, 0) == pid, pid, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), 0);

	/* The parent's objects are as they were. */
	{
		struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_sge r = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &r, .num_sge = 1}, *rbad;
		struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED}, *sbad;
		int got = 0;
		time_t end = time(NULL) + 10;

		memcpy(buf, "forked!", 8);
		CHECK(ibv_post_recv(qp[1], &rw, &rbad) == 0, 0, 0);
		CHECK(ibv_post_send(qp[0], &sw, &sbad) == 0, 0, 0);
		while (got < 2 && time(NULL) < end) {
			n = ibv_poll_cq(cq, 1, &wc);
			CHECK(n >= 0, n, 0);
			if (n == 1) {
				CHECK(wc.status == IBV_WC_SUCCESS, wc.status, wc.wr_id);
				got++;
			}
		}
		CHECK(got == 2, got, 2);
		CHECK(memcmp(buf + 1024, "forked!", 8) == 0, 0, 0);
	}
	ibv_destroy_qp(qp[0]);
	ibv_destroy_qp(qp[1]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("forkchild: the child failed fast (ENODEV) and released its copies; the parent's QPs still work\n");
	return 0;
}
