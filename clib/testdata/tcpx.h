/* tcpx.h: what clib/test.sh's C test programs (idleqp.c, udburst.c,
 * sendring.c, cqex.c) share: opening the device, moving an RC QP to RTS,
 * and, for the two-ended ones, the TCP side channel over
 * which the two ends swap QP numbers and GIDs as text lines and then
 * one-byte syncs. Define TCPX_PROG (the program's name, for messages)
 * before including it.
 *
 * Every read takes exactly what it was asked for, a byte at a time: a
 * read that took the peer's next sync along with its line would leave
 * that sync unseen, and both ends would wait for each other.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static void send_all(int s, const char *p, size_t n, const char *what)
{
	while (n > 0) {
		ssize_t k = write(s, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			die(what);
		p += k;
		n -= k;
	}
}

static char recv_byte(int s, const char *what)
{
	char ch;
	for (;;) {
		ssize_t k = read(s, &ch, 1);
		if (k == 1)
			return ch;
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0) {
			fprintf(stderr, TCPX_PROG ": the peer closed the connection during the %s\n", what);
			exit(2);
		}
		die(what);
	}
}

/* recv_line reads a line (without its newline) into line, of n bytes. */
static void recv_line(int s, char *line, size_t n, const char *what)
{
	size_t got = 0;
	char ch;
	while ((ch = recv_byte(s, what)) != '\n') {
		if (got == n - 1) {
			fprintf(stderr, TCPX_PROG ": the peer's %s line is longer than %zu bytes\n", what, n - 1);
			exit(2);
		}
		line[got++] = ch;
	}
	line[got] = 0;
}

/* A connect to a port that nobody listens on yet can pick that same port
 * as its ephemeral source (loopback, port in ip_local_port_range) and
 * connect the socket to itself; such a socket reads its own line back. */
static int self_connected(int s)
{
	struct sockaddr_in me, peer;
	socklen_t lm = sizeof me, lp = sizeof peer;
	return getsockname(s, (void *)&me, &lm) == 0 && getpeername(s, (void *)&peer, &lp) == 0 &&
	       me.sin_port == peer.sin_port && me.sin_addr.s_addr == peer.sin_addr.s_addr;
}

/* tcp_connect connects to server:port (IPv4), retrying for about ten
 * seconds while the server does not listen yet; with server NULL it
 * accepts one connection on port instead. */
static int tcp_connect(const char *server, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int s, c;
	if (server) {
		inet_pton(AF_INET, server, &a.sin_addr);
		/* A new socket per attempt: a socket whose connect failed is
		 * not to be reused. */
		for (int i = 0;; i++) {
			if ((s = socket(AF_INET, SOCK_STREAM, 0)) < 0)
				die("socket");
			if (connect(s, (void *)&a, sizeof a) == 0 && !self_connected(s))
				return s;
			close(s);
			if (i == 100)
				die("connect");
			usleep(100000);
		}
	}
	if ((s = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		die("socket");
	int on = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
	if (bind(s, (void *)&a, sizeof a) < 0 || listen(s, 1) < 0)
		die("bind/listen");
	if ((c = accept(s, NULL, NULL)) < 0)
		die("accept");
	close(s);
	return c;
}

/* gid_hex writes g as 32 hex digits and a NUL into hex; hex_gid reads
 * them back. */
static void gid_hex(const union ibv_gid *g, char *hex)
{
	for (int i = 0; i < 16; i++)
		sprintf(hex + 2 * i, "%02x", g->raw[i]);
}

static void hex_gid(const char *hex, union ibv_gid *g)
{
	for (int i = 0; i < 16; i++)
		sscanf(hex + 2 * i, "%2hhx", &g->raw[i]);
}

/* open_device opens the device named name (any device if NULL), or dies. */
static struct ibv_context *open_device(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			if ((ctx = ibv_open_device(list[i])))
				break;
	if (!ctx)
		die("ibv_open_device");
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

/* rc_to_rts moves the RC QP q through INIT, RTR and RTS, connected to QP
 * number remote at gid (source GID index gidx, port 1), both PSNs 100,
 * remote writes allowed, the Local ACK Timeout timeout; or dies. */
__attribute__((unused)) static void rc_to_rts(struct ibv_qp *q, uint32_t remote, const union ibv_gid *gid, int gidx, int timeout)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = remote,
		.rq_psn = 100, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = *gid, .sgid_index = gidx, .hop_limit = 64}}};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = timeout, .retry_cnt = 7, .rnr_retry = 7,
		.sq_psn = 100, .max_rd_atomic = 1};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

/* rc_qp creates an RC QP with one SGE each way, or dies. */
__attribute__((unused)) static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
						    uint32_t max_send, uint32_t max_recv)
{
	struct ibv_qp_init_attr a = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = max_send, .max_recv_wr = max_recv, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *q = ibv_create_qp(pd, &a);

	if (!q)
		die("ibv_create_qp");
	return q;
}

/* rc_loop connects the RC QPs q[0] and q[1] of one context to each other
 * through its GID at index gidx (port 1), with rc_to_rts; or dies. */
__attribute__((unused)) static void rc_loop(struct ibv_context *ctx, struct ibv_qp *q[2], int gidx)
{
	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_gid");
	rc_to_rts(q[0], q[1]->qp_num, &gid, gidx, 14);
	rc_to_rts(q[1], q[0]->qp_num, &gid, gidx, 14);
}
