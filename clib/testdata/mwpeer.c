/* mwpeer: a memory window across two processes (and two implementations:
 * clib/interop.sh runs one end on rxe). The server binds a type 2 window
 * to part of a region that grants no remote access itself and tells the
 * client its rkey and address over TCP; the client
 *
 *   1. WRITEs into the window: the bytes land (the server checks them);
 *   2. SENDs with invalidate, naming the window's rkey: the server's
 *      receive carries the rkey (invalidated_rkey) and says so
 *      (IBV_WC_WITH_INV; rxe sets IBV_WC_IP_CSUM_OK instead);
 *   3. WRITEs through the rkey again: refused, IBV_WC_REM_ACCESS_ERR.
 *
 *   server: mwpeer -d DEV -g GIDX [-p PORT]
 *   client: mwpeer -d DEV -g GIDX [-p PORT] SERVER-IPv4
 *
 * The ends swap "QPN PSN GID-hex\n", then the server sends "RKEY ADDR\n"
 * once its window is bound; a sync byte each way marks each step ('w'
 * after the WRITE, 'i' after the SEND, 'd' at the end). Exit status 0:
 * every check of this end held. clib/test.sh runs it C to C over the
 * library.
 */
#define TCPX_PROG "mwpeer"
#include "tcpx.h"

#define CHECK(cond, a, b) \
	do { \
		if (!(cond)) { \
			fprintf(stderr, "mwpeer: %s (%ld, %ld)\n", #cond, (long)(a), (long)(b)); \
			exit(1); \
		} \
	} while (0)

static void sync_with(int s, char what)
{
	char name[] = {'s', 'y', 'n', 'c', ' ', what, 0};
	send_all(s, &what, 1, name);
	CHECK(recv_byte(s, name) == what, what, 0);
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int k;
	for (long spins = 0; (k = ibv_poll_cq(cq, 1, &wc)) == 0; spins++) {
		if (spins > 1000000)
			usleep(100);
		CHECK(spins < 1000000 + 100000, spins, 0); /* about 10 s */
	}
	CHECK(k == 1, k, 1);
	return wc;
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *server = NULL;
	int gidx = 0, port = 18620, opt;
	while ((opt = getopt(argc, argv, "d:g:p:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default: fprintf(stderr, "usage: mwpeer -d DEV -g GIDX [-p PORT] [SERVER]\n"); return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];
	struct ibv_context *ctx = open_device(devname);
	int is_rxe = strncmp(ibv_get_device_name(ctx->device), "rxe", 3) == 0;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static unsigned char buf[3 * 4096] __attribute__((aligned(4096)));
	/* The server's region grants no remote access: only the window does. */
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(mr && cq, 0, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, 0, 0);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0, 0);
	union ibv_gid gid, rgid;
	CHECK(!ibv_query_gid(ctx, 1, gidx, &gid), gidx, 0);
	unsigned psn = (unsigned)getpid() & 0xffffff, rqpn, rpsn;
	char mine[128], theirs[128], hex[33], rhex[33];
	gid_hex(&gid, hex);
	snprintf(mine, sizeof mine, "%u %u %s\n", qp->qp_num, psn, hex);
	int sock = tcp_connect(server, port);
	send_all(sock, mine, strlen(mine), "write");
	recv_line(sock, theirs, sizeof theirs, "exchange");
	CHECK(sscanf(theirs, "%u %u %32s", &rqpn, &rpsn, rhex) == 3, 0, 0);
	hex_gid(rhex, &rgid);
	struct ibv_sge rs = {.addr = (uintptr_t)buf + 2 * 4096, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *badr;
	CHECK(!ibv_post_recv(qp, &rw, &badr), 0, 0);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = rqpn,
		.rq_psn = rpsn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = rgid, .sgid_index = gidx, .hop_limit = 64}}};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0, 0);
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 6, .rnr_retry = 7,
		.sq_psn = psn, .max_rd_atomic = 1};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), 0, 0);

	if (!server) {
		/* The window: 4096 bytes in the middle of the region. */
		struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		CHECK(mw, errno, 0);
		uint32_t rkey = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr bw = {.wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
			.bind_mw = {.mw = mw, .rkey = rkey, .bind_info = {.mr = mr, .addr = (uintptr_t)buf + 4096,
				.length = 4096, .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}}}, *bad;
		CHECK(!ibv_post_send(qp, &bw, &bad), 0, 0);
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, wc.wr_id, wc.status);
		snprintf(mine, sizeof mine, "%u %llu\n", rkey, (unsigned long long)(uintptr_t)(buf + 4096));
		send_all(sock, mine, strlen(mine), "window");
		sync_with(sock, 'w');
		CHECK(memcmp(buf + 4096 + 100, "mwpeer!", 8) == 0, buf[4096 + 100], 'm');
		sync_with(sock, 'i');
		wc = wait_wc(cq);
		CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, wc.wr_id, wc.status);
		CHECK(wc.invalidated_rkey == rkey, wc.invalidated_rkey, rkey);
		/* rxe writes the kernel's IB_WC_WITH_INVALIDATE bit, which
		 * userspace reads as IBV_WC_IP_CSUM_OK (see mw.c). */
		CHECK(wc.wc_flags & (is_rxe ? IBV_WC_IP_CSUM_OK : IBV_WC_WITH_INV), wc.wc_flags, 0);
		sync_with(sock, 'd');
		printf("mwpeer: the window took a WRITE, then a SEND_WITH_INV of its rkey (flags %#x) closed it\n",
		       wc.wc_flags);
		return 0;
	}

	uint32_t rkey;
	unsigned long long raddr;
	char line[128];
	recv_line(sock, line, sizeof line, "window");
	CHECK(sscanf(line, "%u %llu", &rkey, &raddr) == 2, 0, 0);
	memcpy(buf, "mwpeer!", 8);
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr ww = {.wr_id = 3, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = raddr + 100, .rkey = rkey}}, *bad;
	CHECK(!ibv_post_send(qp, &ww, &bad), 0, 0);
	struct ibv_wc wc = wait_wc(cq);
	CHECK(wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS, wc.wr_id, wc.status);
	sync_with(sock, 'w');
	struct ibv_send_wr iw = {.wr_id = 4, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
		.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey};
	CHECK(!ibv_post_send(qp, &iw, &bad), 0, 0);
	wc = wait_wc(cq);
	CHECK(wc.wr_id == 4 && wc.status == IBV_WC_SUCCESS, wc.wr_id, wc.status);
	sync_with(sock, 'i');
	ww.wr_id = 5;
	CHECK(!ibv_post_send(qp, &ww, &bad), 0, 0);
	wc = wait_wc(cq);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_REM_ACCESS_ERR, wc.wr_id, wc.status);
	sync_with(sock, 'd');
	printf("mwpeer: WRITE through the window landed, SEND_WITH_INV completed, the WRITE after it was refused\n");
	return 0;
}
