/* idleqp: an RC connection between QPs that grant no remote access
 * (IBV_ACCESS_LOCAL_WRITE only, as ibv_rc_pingpong's and perftest's
 * exchange QP), idle for longer than softrdma's keepalive, then used
 * again. A keepalive probe the peer refuses moves both QPs to ERR, and
 * the SENDs after the idle spell fail.
 *
 *   server: idleqp -d DEV -g GIDX [-p PORT] [-t SECONDS]
 *   client: idleqp -d DEV -g GIDX [-p PORT] [-t SECONDS] SERVER-IPv4
 *
 * The two ends swap QPN, PSN and GID over TCP as "QPN PSN GID-hex\n",
 * and a sync byte each way once both QPs are ready to receive ("r") and
 * before exiting ("d"). Each round is one SEND each way (the client
 * first), with a round before and a round after the idle spell. Exit
 * status 0: both rounds completed successfully on this end.
 *
 * The exchange reads its line a byte at a time: a larger read can take
 * the peer's first sync byte along with its line, and both ends then wait
 * for each other until a timeout kills one of them.
 *
 * clib/test.sh runs it C to C over the library. Against rxe, with the
 * server over the library:
 *   vm.sh nsexec env LD_LIBRARY_PATH=DIR SOFTRDMA_ADDR=10.77.0.1 idleqp -d softrdma_br0 -g 1 -p 18612 -t 12
 *   vm.sh exec vm1 "/share/idleqp -d rxe0 -g 1 -p 18612 -t 12 10.77.0.1"
 */
#define TCPX_PROG "idleqp"
#include "tcpx.h"

/* sync: both ends say what they are ready for and wait for the other. */
static void sync_with(int s, char what)
{
	char name[] = {'s', 'y', 'n', 'c', ' ', what, 0};
	send_all(s, &what, 1, name);
	char got = recv_byte(s, name);
	if (got != what) {
		fprintf(stderr, "idleqp: the peer sent %#x at the %s\n", (unsigned char)got, name);
		exit(2);
	}
}

static int exchange(const char *server, int port, const char *mine, char *theirs, size_t n)
{
	int c = tcp_connect(server, port);
	send_all(c, mine, strlen(mine), "write");
	recv_line(c, theirs, n, "exchange");
	return c;
}

static int wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	int k;
	for (int spins = 0; (k = ibv_poll_cq(cq, 1, &wc)) == 0; spins++) {
		if (spins > 1000000)
			usleep(100);
		if (spins > 1000000 + 100000) {
			fprintf(stderr, "idleqp: no completion for the %s\n", what);
			return -1;
		}
	}
	if (k < 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "idleqp: %s completed with %s\n", what, k < 0 ? "a poll error" : ibv_wc_status_str(wc.status));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *server = NULL;
	int gidx = 0, port = 18600, idle = 12, opt;
	while ((opt = getopt(argc, argv, "d:g:p:t:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 't': idle = atoi(optarg); break;
		default: fprintf(stderr, "usage: idleqp -d DEV -g GIDX [-p PORT] [-t SECONDS] [SERVER]\n"); return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];
	struct ibv_context *ctx = open_device(devname);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[2][64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!mr || !cq)
		die("ibv_reg_mr/ibv_create_cq");
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_gid");
	unsigned psn = (unsigned)getpid() & 0xffffff;
	char mine[128], theirs[128], hex[33];
	gid_hex(&gid, hex);
	snprintf(mine, sizeof mine, "%u %u %s\n", qp->qp_num, psn, hex);
	int sock = exchange(server, port, mine, theirs, sizeof theirs);
	unsigned rqpn, rpsn;
	char rhex[33];
	if (sscanf(theirs, "%u %u %32s", &rqpn, &rpsn, rhex) != 3)
		die("peer's address");
	union ibv_gid rgid;
	hex_gid(rhex, &rgid);

	struct ibv_recv_wr rw = {.wr_id = 1, .num_sge = 1}, *badr;
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
	rw.sg_list = &rs;
	for (int i = 0; i < 2; i++)
		if (ibv_post_recv(qp, &rw, &badr))
			die("ibv_post_recv");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = rqpn,
		.rq_psn = rpsn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = rgid, .sgid_index = gidx, .hop_limit = 64}}};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
		.sq_psn = psn, .max_rd_atomic = 1};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
	sync_with(sock, 'r'); /* both ready to receive */

	struct ibv_sge ss = {.addr = (uintptr_t)buf[0], .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED}, *bads;
	for (int round = 0; round < 2; round++) {
		if (round == 1) {
			printf("idleqp: idle for %d s\n", idle);
			fflush(stdout);
			sleep(idle);
		}
		for (int turn = 0; turn < 2; turn++) {
			int sending = (turn == 0) == (server != NULL);
			if (sending) {
				if (ibv_post_send(qp, &sw, &bads))
					die("ibv_post_send");
				if (wait_wc(cq, round ? "SEND after the idle spell" : "first SEND"))
					return 1;
			} else if (wait_wc(cq, round ? "receive after the idle spell" : "first receive")) {
				return 1;
			}
		}
	}
	printf("idleqp: both rounds completed\n");
	sync_with(sock, 'd'); /* neither exits before the other's done */
	return 0;
}
