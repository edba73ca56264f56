/* udburst: a burst of UD SENDs that arrives while the receiving process
 * is not running. The server posts a receive for every message, as
 * perftest's UD server does, and sends its QPN, GID and PID; the client
 * stops the server (SIGSTOP), sends the burst, resumes it (SIGCONT) and
 * says so. A NIC or Linux rxe places the messages in the posted WQEs
 * while the server is stopped; softrdma's device receives them when the
 * process runs again, from its UDP socket, which must have held them all
 * (UD sends nothing again).
 *
 *   server: udburst -d DEV -g GIDX [-p PORT] [-n COUNT] [-s SIZE]
 *   client: udburst -d DEV -g GIDX [-p PORT] [-n COUNT] [-s SIZE] SERVER-IPv4
 *
 * The TCP exchange: the server's line "QPN GID-hex PID\n", then the
 * client's line "QPN GID-hex\n", then one byte from the client once it
 * resumed the server. Exit status 0: the server received COUNT messages
 * of SIZE bytes (default 1000 of the port's MTU, at most 4096), in
 * order; the client's sends all completed.
 */
#include <signal.h>
#include <time.h>

#define TCPX_PROG "udburst"
#include "tcpx.h"

#define QKEY 0x11111111

/* stopped waits until process pid is in the stopped state ('T' in
 * /proc/PID/stat): kill returns before the process has stopped. */
static int stopped(pid_t pid)
{
	char path[64], stat[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");
		if (!f)
			return 0;
		size_t k = fread(stat, 1, sizeof stat - 1, f);
		fclose(f);
		stat[k] = 0;
		char *p = strrchr(stat, ')'); /* the command name may hold spaces */
		if (p && p[1] == ' ' && p[2] == 'T')
			return 1;
		usleep(1000);
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *server = NULL;
	int gidx = 0, port = 18700, count = 1000, size = 0, opt;
	while ((opt = getopt(argc, argv, "d:g:p:n:s:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'n': count = atoi(optarg); break;
		case 's': size = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: udburst -d DEV -g GIDX [-p PORT] [-n COUNT] [-s SIZE] [SERVER]\n");
			return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];
	if (count < 1) {
		fprintf(stderr, "udburst: -n %d: want a count of at least 1\n", count);
		return 2;
	}
	struct ibv_context *ctx = open_device(devname);
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		die("ibv_query_port");
	int mtu = 128 << pa.active_mtu; /* IBV_MTU_256 is 1 */
	if (size <= 0)
		size = mtu < 4096 ? mtu : 4096;
	if (size > mtu) {
		fprintf(stderr, "udburst: -s %d is more than the port's MTU %d\n", size, mtu);
		return 2;
	}
	/* A slot per message: the server's receive (40 bytes of GRH, then
	 * the message), the client's send (from byte 40 on; the send may
	 * read its buffer until it completes). */
	int slots = count, slot = 40 + size;
	char *buf = calloc(slots, slot);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd && buf ? ibv_reg_mr(pd, buf, (size_t)slots * slot, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, count + 64, NULL, NULL, 0);
	if (!mr || !cq)
		die("ibv_reg_mr/ibv_create_cq");
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = {.max_send_wr = 64, .max_recv_wr = server ? 1 : count, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("RTR");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("RTS");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_gid");
	char hex[33], line[160], rhex[33];
	gid_hex(&gid, hex);

	if (!server) {
		for (int i = 0; i < count; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)(buf + (size_t)i * slot), .length = slot, .lkey = mr->lkey};
			struct ibv_recv_wr rw = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
			if (ibv_post_recv(qp, &rw, &bad))
				die("ibv_post_recv");
		}
		int s = tcp_connect(NULL, port);
		snprintf(line, sizeof line, "%u %s %d\n", qp->qp_num, hex, (int)getpid());
		send_all(s, line, strlen(line), "write");
		recv_line(s, line, sizeof line, "exchange"); /* the client's address: unused */
		recv_line(s, line, sizeof line, "exchange"); /* the client resumed this process */
		struct ibv_wc wc[64];
		int got = 0;
		double last = now();
		while (got < count && now() - last < 5) {
			int k = ibv_poll_cq(cq, 64, wc);
			if (k < 0)
				die("ibv_poll_cq");
			for (int i = 0; i < k; i++, got++) {
				if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV) {
					fprintf(stderr, "udburst: receive %d completed with %s\n", got, ibv_wc_status_str(wc[i].status));
					return 1;
				}
				if ((int)wc[i].wr_id != got || (int)wc[i].byte_len != slot ||
				    *(int *)(buf + (size_t)got * slot + 40) != got) {
					fprintf(stderr, "udburst: receive %d: WQE %d, %u bytes, message %d\n", got,
						(int)wc[i].wr_id, wc[i].byte_len, *(int *)(buf + (size_t)wc[i].wr_id * slot + 40));
					return 1;
				}
			}
			if (k > 0)
				last = now();
		}
		printf("udburst: received %d of the %d messages of %d bytes sent while this process was stopped\n", got, count, size);
		return got == count ? 0 : 1;
	}

	int s = tcp_connect(server, port);
	unsigned rqpn;
	int rpid;
	recv_line(s, line, sizeof line, "exchange");
	if (sscanf(line, "%u %32s %d", &rqpn, rhex, &rpid) != 3) {
		fprintf(stderr, "udburst: the server's line \"%s\" is not \"QPN GID PID\"\n", line);
		return 2;
	}
	snprintf(line, sizeof line, "%u %s\n", qp->qp_num, hex);
	send_all(s, line, strlen(line), "write");
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.sgid_index = gidx, .hop_limit = 64}};
	hex_gid(rhex, &aa.grh.dgid);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	if (kill(rpid, SIGSTOP) || !stopped(rpid)) {
		fprintf(stderr, "udburst: could not stop the server (PID %d)\n", rpid);
		return 2;
	}
	struct ibv_sge sge = {.length = size, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
		.wr = {.ud = {.ah = ah, .remote_qpn = rqpn, .remote_qkey = QKEY}}}, *bad;
	int posted = 0, done = 0, err = 0;
	while (done < count && !err) {
		while (posted < count && posted - done < 64) {
			sge.addr = (uintptr_t)(buf + (size_t)posted * slot + 40);
			*(int *)(uintptr_t)sge.addr = posted;
			sw.wr_id = posted;
			if (ibv_post_send(qp, &sw, &bad))
				die("ibv_post_send");
			posted++;
		}
		struct ibv_wc wc[64];
		int k = ibv_poll_cq(cq, 64, wc);
		if (k < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < k; i++, done++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "udburst: send %d completed with %s\n", done, ibv_wc_status_str(wc[i].status));
				err = 1;
			}
	}
	usleep(100000); /* let the last packets reach the server's socket */
	kill(rpid, SIGCONT);
	send_all(s, "d\n", 2, "write");
	if (!err)
		printf("udburst: sent %d messages of %d bytes to the stopped server\n", count, size);
	return err;
}
