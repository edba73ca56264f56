/* sendring: ibv_post_send's send ring (libsoftrdma/ibverbs_sring.c) as a
 * program sees it, on two RC QPs of one device connected to each other in
 * one process:
 *
 *   1. four threads post signaled WRITEs to one QP at once, each keeping
 *      up to 16 of its own outstanding; each thread's completions come in
 *      its order, none fails, and the peer's memory holds every word;
 *   2. an inline SEND's buffer rewritten right after ibv_post_send: the
 *      peer receives what was posted;
 *   3. a chain whose 6th request has too many SGEs: EINVAL, bad_wr is
 *      the 6th, and the five before it complete;
 *   4. max_send_wr requests without polling, then one more: ENOMEM;
 *   5. ibv_wr_* batches and ibv_post_send interleaved: one order;
 *   6. the QP moved to ERR with requests outstanding: every one completes
 *      flushed, none twice, none lost;
 *   7. the receive ring: receive requests posted (and waiting in the ring)
 *      when the QP moves to ERR complete flushed, in order, and one
 *      posted in ERR is flushed at once; in RESET ibv_post_recv fails.
 *
 * With -p it runs one other check and exits at once, without cleaning up:
 * a QP sends a WRITE to a QP number nobody has (so no acknowledgement
 * ever comes back, and its retransmission timer is seconds away), then
 * queues eight more in its ring, then polls its CQ once. The poll must
 * take the eight from the ring (the QP builds their packets then, as a
 * Go program's PostSend would, instead of when the next acknowledgement
 * comes): clib/test.sh checks the counters this process writes at exit
 * for feed_taken 8.
 *
 *   sendring -d DEV -g GIDX [-p]
 *
 * clib/test.sh runs it over the library, with the ring and with
 * SOFTRDMA_NO_SEND_RING=1; exit status 0 means every check held.
 */
#define TCPX_PROG "sendring"
#include "tcpx.h"
#include <pthread.h>

#define DEPTH 64
#define THREADS 4
#define PER_THREAD 20000
#define WORDS 4096

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq[2];
static struct ibv_qp *qp[2];
static struct ibv_mr *mr[2];
static uint64_t *mem[2];
static union ibv_gid gid;
static int gidx;

static void fail(const char *fmt, const char *what, long a, long b)
{
	fprintf(stderr, "sendring: ");
	fprintf(stderr, fmt, what, a, b);
	fprintf(stderr, "\n");
	exit(1);
}

static struct ibv_qp *make_qp(int i, int depth, struct ibv_qp_init_attr_ex *ex)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq[i], .recv_cq = cq[i], .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = depth, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64}};
	struct ibv_qp *q;

	if (ex) {
		memcpy(ex, &ia, sizeof ia);
		ex->comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ex->pd = pd;
		ex->send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
		q = ibv_create_qp_ex(ctx, ex);
	} else {
		q = ibv_create_qp(pd, &ia);
	}
	if (!q)
		die("ibv_create_qp");
	return q;
}

static int rts_timeout = 14; /* the QPs' Local ACK Timeout */

static void connect_qp(struct ibv_qp *q, uint32_t remote)
{
	rc_to_rts(q, remote, &gid, gidx, rts_timeout);
}

/* pair: fresh QPs 0 -> 1 of send depth depth. */
static void pair(int depth, struct ibv_qp_init_attr_ex *ex)
{
	for (int i = 0; i < 2; i++) {
		if (qp[i])
			ibv_destroy_qp(qp[i]);
		qp[i] = make_qp(i, depth, i == 0 ? ex : NULL);
	}
	connect_qp(qp[0], qp[1]->qp_num);
	connect_qp(qp[1], qp[0]->qp_num);
}

static struct ibv_wc poll1(int i, const char *what)
{
	struct ibv_wc wc;
	for (long spins = 0;; spins++) {
		int k = ibv_poll_cq(cq[i], 1, &wc);
		if (k < 0)
			fail("%s: ibv_poll_cq %ld%ld", what, k, 0);
		if (k == 1)
			return wc;
		if (spins > 20000000)
			fail("%s: no completion (%ld %ld)", what, 0, 0);
	}
}

static void write_wr(struct ibv_send_wr *w, struct ibv_sge *s, uint64_t id, int word)
{
	*s = (struct ibv_sge){.addr = (uintptr_t)&mem[0][word], .length = 8, .lkey = mr[0]->lkey};
	*w = (struct ibv_send_wr){.wr_id = id, .sg_list = s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr = {.rdma = {.remote_addr = (uintptr_t)&mem[1][word], .rkey = mr[1]->rkey}}};
}

/* 1: threads posting at once. wr_id = thread << 32 | sequence. */
static volatile long done[THREADS];

static void *poster(void *arg)
{
	long t = (long)arg;
	for (long i = 0; i < PER_THREAD; i++) {
		struct ibv_send_wr w, *bad;
		struct ibv_sge s;
		int word = (int)(t * (WORDS / THREADS) + i % (WORDS / THREADS));
		while (i - __atomic_load_n(&done[t], __ATOMIC_ACQUIRE) >= 16)
			;
		mem[0][word] = ((uint64_t)t << 32) | (uint64_t)i;
		write_wr(&w, &s, ((uint64_t)t << 32) | (uint64_t)i, word);
		int err;
		while ((err = ibv_post_send(qp[0], &w, &bad)) == ENOMEM)
			;
		if (err)
			fail("%s: ibv_post_send %ld (request %ld)", "threads", err, i);
	}
	return NULL;
}

static void threads(void)
{
	pthread_t th[THREADS];
	long next[THREADS] = {0};

	pair(DEPTH, NULL);
	for (long t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, poster, (void *)t);
	for (long n = 0; n < (long)THREADS * PER_THREAD; n++) {
		struct ibv_wc wc = poll1(0, "threads");
		long t = (long)(wc.wr_id >> 32), i = (long)(wc.wr_id & 0xffffffff);
		if (wc.status != IBV_WC_SUCCESS)
			fail("%s: completion status %ld for request %ld", "threads", wc.status, i);
		if (t >= THREADS || i != next[t])
			fail("%s: thread's completion %ld, expected %ld", "threads", i, t < THREADS ? next[t] : -1);
		next[t]++;
		__atomic_store_n(&done[t], next[t], __ATOMIC_RELEASE);
	}
	for (long t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	for (int w = 0; w < WORDS; w++) {
		long t = w / (WORDS / THREADS), k = w % (WORDS / THREADS);
		long last = k + (WORDS / THREADS) * ((PER_THREAD - 1 - k) / (WORDS / THREADS));
		if (mem[1][w] != (((uint64_t)t << 32) | (uint64_t)last))
			fail("%s: peer's word %ld holds the wrong request (%ld)", "threads", w, (long)(mem[1][w] & 0xffffffff));
	}
	printf("sendring: %d threads x %d WRITEs in order\n", THREADS, PER_THREAD);
}

/* 2: inline data is taken at the call: two SENDs a round, the second
 * behind the first (so it rides the ring), each buffer rewritten as soon
 * as ibv_post_send returns. */
static void inline_send(void)
{
	char msg[2][48], want[48];
	struct ibv_sge rs[2];
	struct ibv_recv_wr rw[2], *badr;

	pair(DEPTH, NULL);
	for (int i = 0; i < 200; i++) {
		for (int k = 0; k < 2; k++) {
			rs[k] = (struct ibv_sge){.addr = (uintptr_t)&mem[1][8 * k], .length = 64, .lkey = mr[1]->lkey};
			rw[k] = (struct ibv_recv_wr){.wr_id = (uint64_t)k, .sg_list = &rs[k], .num_sge = 1};
			if (ibv_post_recv(qp[1], &rw[k], &badr))
				die("ibv_post_recv");
		}
		for (int k = 0; k < 2; k++) {
			snprintf(msg[k], sizeof msg[k], "inline message %d.%d", i, k);
			struct ibv_sge s = {.addr = (uintptr_t)msg[k], .length = sizeof msg[k], .lkey = 0};
			struct ibv_send_wr w = {.wr_id = (uint64_t)k, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE}, *bad;
			if (ibv_post_send(qp[0], &w, &bad))
				die("ibv_post_send inline");
			memset(msg[k], 'x', sizeof msg[k]);
		}
		for (int k = 0; k < 2; k++) {
			struct ibv_wc wc = poll1(1, "inline receive");
			snprintf(want, sizeof want, "inline message %d.%d", i, (int)wc.wr_id);
			if (wc.status != IBV_WC_SUCCESS || memcmp(&mem[1][8 * wc.wr_id], want, strlen(want) + 1) != 0)
				fail("%s: message %ld.%ld arrived changed", "inline", i, (long)wc.wr_id);
			if (poll1(0, "inline send").status != IBV_WC_SUCCESS)
				fail("%s: send %ld.%ld failed", "inline", i, k);
		}
	}
	printf("sendring: inline SENDs carry what was posted\n");
}

/* 3: a bad request in a chain. */
static void bad_chain(void)
{
	struct ibv_send_wr w[10], *bad = NULL;
	struct ibv_sge s[10][3];

	pair(DEPTH, NULL);
	write_wr(&w[9], &s[9][0], 99, 99); /* arm: one outstanding */
	if (ibv_post_send(qp[0], &w[9], &bad))
		die("ibv_post_send");
	for (int i = 0; i < 10; i++) {
		write_wr(&w[i], &s[i][0], (uint64_t)i, i);
		w[i].next = i < 9 ? &w[i + 1] : NULL;
	}
	s[5][1] = s[5][2] = s[5][0];
	w[5].num_sge = 3; /* max_send_sge is 2 */
	int err = ibv_post_send(qp[0], &w[0], &bad);
	if (err != EINVAL || bad != &w[5])
		fail("%s: ibv_post_send returned %ld, bad_wr is request %ld; want EINVAL, 5", "chain", err, bad ? (long)(bad - w) : -1);
	if (poll1(0, "chain").wr_id != 99)
		fail("%s: first completion is not the arming request%ld%ld", "chain", 0, 0);
	for (uint64_t i = 0; i < 5; i++) {
		struct ibv_wc wc = poll1(0, "chain");
		if (wc.wr_id != i || wc.status != IBV_WC_SUCCESS)
			fail("%s: completion %ld is request %ld", "chain", (long)i, (long)wc.wr_id);
	}
	struct ibv_wc wc;
	usleep(20000);
	if (ibv_poll_cq(cq[0], 1, &wc) != 0)
		fail("%s: request %ld after the bad one completed%ld", "chain", (long)wc.wr_id, 0);
	printf("sendring: a bad request stops its chain\n");
}

/* 4: a full send queue. */
static void full(void)
{
	struct ibv_send_wr w, *bad;
	struct ibv_sge s;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;

	pair(8, NULL);
	if (ibv_query_qp(qp[0], &qa, IBV_QP_CAP, &qi))
		die("ibv_query_qp");
	int n = (int)qi.cap.max_send_wr, err = 0, i;
	for (i = 0; i < n + 1 && !err; i++) {
		write_wr(&w, &s, (uint64_t)i, i);
		err = ibv_post_send(qp[0], &w, &bad);
	}
	if (err != ENOMEM || i != n + 1)
		fail("%s: request %ld of a queue of %ld was refused with a different error or not at all", "full", i - 1, n);
	for (i = 0; i < n; i++)
		if (poll1(0, "full").wr_id != (uint64_t)i)
			fail("%s: completion %ld out of order%ld", "full", i, 0);
	printf("sendring: the %d+1st request of a full queue gets ENOMEM\n", n);
}

/* 5: ibv_wr_* and ibv_post_send on one QP. */
static void wr_api(void)
{
	struct ibv_qp_init_attr_ex ex;

	pair(DEPTH, &ex);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp[0]);
	if (!qx)
		die("ibv_qp_to_qp_ex");
	uint64_t id = 0;
	for (int round = 0; round < 200; round++) {
		ibv_wr_start(qx);
		for (int k = 0; k < 3; k++) {
			qx->wr_id = id++;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write(qx, mr[1]->rkey, (uintptr_t)&mem[1][k]);
			ibv_wr_set_sge(qx, mr[0]->lkey, (uintptr_t)&mem[0][k], 8);
		}
		if (ibv_wr_complete(qx))
			die("ibv_wr_complete");
		struct ibv_send_wr w, *bad;
		struct ibv_sge s;
		write_wr(&w, &s, id++, 5);
		if (ibv_post_send(qp[0], &w, &bad))
			die("ibv_post_send");
		for (int k = 0; k < 4; k++) {
			struct ibv_wc wc = poll1(0, "wr api");
			if (wc.wr_id != id - 4 + (uint64_t)k || wc.status != IBV_WC_SUCCESS)
				fail("%s: completion %ld is request %ld", "wr api", (long)(id - 4 + k), (long)wc.wr_id);
		}
	}
	printf("sendring: ibv_wr_* and ibv_post_send keep one order\n");
}

/* 6: ERR with requests outstanding. */
static void error_flush(void)
{
	struct ibv_send_wr w, *bad;
	struct ibv_sge s;

	pair(DEPTH, NULL);
	for (int i = 0; i < 40; i++) {
		write_wr(&w, &s, (uint64_t)i, i);
		if (ibv_post_send(qp[0], &w, &bad))
			die("ibv_post_send");
	}
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	if (ibv_modify_qp(qp[0], &a, IBV_QP_STATE))
		die("ERR");
	int ok = 0, flushed = 0;
	for (int i = 0; i < 40; i++) {
		struct ibv_wc wc = poll1(0, "error flush");
		if (wc.wr_id != (uint64_t)i)
			fail("%s: completion %ld is request %ld", "error flush", i, (long)wc.wr_id);
		if (wc.status == IBV_WC_SUCCESS)
			ok++;
		else if (wc.status == IBV_WC_WR_FLUSH_ERR)
			flushed++;
		else
			fail("%s: status %ld for request %ld", "error flush", wc.status, i);
	}
	struct ibv_wc wc;
	usleep(20000);
	if (ibv_poll_cq(cq[0], 1, &wc) != 0)
		fail("%s: an extra completion (%ld)%ld", "error flush", (long)wc.wr_id, 0);
	printf("sendring: ERR completed %d and flushed %d of 40\n", ok, flushed);
}

/* 7: the receive ring's requests at ERR and RESET. */
static void recv_states(void)
{
	struct ibv_sge rs = {.addr = (uintptr_t)&mem[1][0], .length = 64, .lkey = mr[1]->lkey};
	struct ibv_recv_wr rw = {.sg_list = &rs, .num_sge = 1}, *badr;

	pair(DEPTH, NULL);
	for (int i = 0; i < 20; i++) {
		rw.wr_id = (uint64_t)i;
		if (ibv_post_recv(qp[1], &rw, &badr))
			die("ibv_post_recv");
	}
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	if (ibv_modify_qp(qp[1], &a, IBV_QP_STATE))
		die("ERR");
	for (int i = 0; i < 20; i++) {
		struct ibv_wc wc = poll1(1, "receive flush");
		if (wc.wr_id != (uint64_t)i || wc.status != IBV_WC_WR_FLUSH_ERR)
			fail("%s: completion %ld is request %ld", "receive flush", i, (long)wc.wr_id);
	}
	rw.wr_id = 99;
	if (ibv_post_recv(qp[1], &rw, &badr))
		die("ibv_post_recv in ERR");
	if (poll1(1, "receive flush in ERR").wr_id != 99)
		fail("%s: no flush for the request posted in ERR%ld%ld", "receive flush", 0, 0);
	a.qp_state = IBV_QPS_RESET;
	if (ibv_modify_qp(qp[1], &a, IBV_QP_STATE))
		die("RESET");
	int err = ibv_post_recv(qp[1], &rw, &badr);
	if (err != EINVAL || badr != &rw)
		fail("%s: ibv_post_recv in RESET returned %ld (bad_wr %ld), want EINVAL", "receive states", err, badr == &rw);
	printf("sendring: receive requests flush at ERR, in order; RESET refuses\n");
}

/* -p: a poll of the send CQ takes the ring (see the header). */
static void poll_takes(void)
{
	struct ibv_send_wr w, *bad;
	struct ibv_sge s;
	struct ibv_wc wc;

	rts_timeout = 20; /* 4.3 s: no retransmission while this runs */
	qp[0] = make_qp(0, DEPTH, NULL);
	connect_qp(qp[0], 0xabcde); /* no such QP: nothing comes back */
	for (int i = 0; i < 9; i++) {
		write_wr(&w, &s, i, i);
		if (ibv_post_send(qp[0], &w, &bad))
			fail("%s: ibv_post_send %ld %ld", "poll_takes", i, errno);
	}
	if (ibv_poll_cq(cq[0], 1, &wc) != 0)
		fail("%s: a completion (%ld) with nothing acknowledged %ld", "poll_takes", wc.status, 0);
	exit(0); /* the counters are written now: feed_taken 8 */
}

int main(int argc, char **argv)
{
	const char *devname = NULL;
	int opt, polltake = 0;
	while ((opt = getopt(argc, argv, "d:g:p")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': polltake = 1; break;
		default: fprintf(stderr, "usage: sendring -d DEV -g GIDX [-p]\n"); return 2;
		}
	}
	ctx = open_device(devname);
	pd = ibv_alloc_pd(ctx);
	for (int i = 0; i < 2; i++) {
		mem[i] = calloc(WORDS, sizeof(uint64_t));
		mr[i] = pd ? ibv_reg_mr(pd, mem[i], WORDS * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
		cq[i] = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
		if (!mr[i] || !cq[i])
			die("ibv_reg_mr/ibv_create_cq");
	}
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("ibv_query_gid");
	if (polltake)
		poll_takes();
	threads();
	inline_send();
	bad_chain();
	full();
	wr_api();
	error_flush();
	recv_states();
	return 0;
}
