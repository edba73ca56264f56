/* mw: memory windows as a program sees them, on RC QPs of one device
 * connected to each other in pairs (rc_loop) in one process. QP A of a
 * pair binds the windows, its peer B reaches them with RDMA WRITE, READ
 * and SEND_WITH_INV. A case that moves a QP to the error state ends with
 * a fresh pair. Checked here, each case one line of output:
 *
 *   1. ibv_query_device: max_mw > 0 (the window capability flags are
 *      printed);
 *   2. type 1: ibv_bind_mw completes with IBV_WC_BIND_MW and moves
 *      mw->rkey on; WRITE and READ through it land and return; a READ
 *      through a write-only bind is refused; a WRITE outside the window
 *      but inside the MR is refused (on rxe it lands: rxe checks the MR's
 *      range only);
 *   3. type 1 unbind (a bind of length 0; rdma-core 44's rxe needs the
 *      MR even then, it dereferences a NULL one): access through the old
 *      rkey is refused;
 *   4. a bind to an MR without IBV_ACCESS_MW_BIND completes with
 *      IBV_WC_MW_BIND_ERR and the QP is in error;
 *   5. ibv_bind_mw with IBV_ACCESS_ZERO_BASED returns EINVAL, posts nothing;
 *   6. type 2, bound with IBV_WR_BIND_MW: the new rkey works, the old one
 *      is refused; local and remote invalidation end access (the
 *      receive of a SEND_WITH_INV carries invalidated_rkey and
 *      IBV_WC_WITH_INV; on rxe IBV_WC_IP_CSUM_OK instead); a rebind after
 *      invalidation works; a
 *      bind of a window still bound fails; access arriving at another QP
 *      than the one that bound it is refused; a bind WR whose mw->rkey is
 *      not the window's current rkey fails on rxe (softrdma names the
 *      window by its object and binds it);
 *   7. ibv_dereg_mr of an MR with a bound window fails (rxe: EINVAL,
 *      softrdma: EBUSY), and
 *      succeeds once the window is deallocated;
 *   8. IBV_WR_BIND_MW (and ibv_bind_mw) on a UD QP: EINVAL;
 *   9. ibv_dealloc_pd of a PD with a window: EBUSY;
 *  10. the extended QP API: ibv_wr_bind_mw and ibv_wr_local_inv.
 *
 *   mw -d DEV -g GIDX
 *
 * The expectations are what Linux rxe does (6.1, through rdma-core 44's
 * own library, in the interop VM: clib/interop.sh's on_rxe), except where
 * a device whose name does not start with "rxe" is held to IBTA instead
 * (the window's bounds, IBV_WC_WITH_INV); exit status 0 means every check
 * held.
 */
#define TCPX_PROG "mw"
#include "tcpx.h"
#include <time.h>

#define WIN 4096 /* windows span mem[WIN, 2 * WIN) */
#define RW IBV_ACCESS_REMOTE_WRITE
#define RR IBV_ACCESS_REMOTE_READ

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static int gidx;
static int is_rxe; /* Linux rxe: its departures from IBTA are expected */
static unsigned char mem[4 * WIN] __attribute__((aligned(4096))); /* where windows go */
static unsigned char mem2[WIN] __attribute__((aligned(4096)));    /* case 7's MR */
static unsigned char loc[WIN] __attribute__((aligned(4096)));     /* B's buffer */
static unsigned char *const win = mem + WIN;
static struct ibv_mr *mr, *lmr;

/* A pair: qp[0] (A) binds, qp[1] (B) is its peer; each has a CQ of its own. */
struct pair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
};

static void fail(int line, const char *what, long a, long b)
{
	fprintf(stderr, "mw: line %d: %s (%ld, %ld)\n", line, what, a, b);
	exit(1);
}

/* CHECK(cond, a, b) fails the run, printing cond and the values a and b. */
#define CHECK(c, a, b)                                            \
	do {                                                      \
		if (!(c))                                         \
			fail(__LINE__, #c, (long)(a), (long)(b)); \
	} while (0)

/* pair_up makes a connected pair; with ex, A comes from ibv_create_qp_ex
 * with the window operations of the extended API, and is returned. */
static struct ibv_qp_ex *pair_up(struct pair *p, int ex)
{
	for (int i = 0; i < 2; i++)
		if (!(p->cq[i] = ibv_create_cq(ctx, 32, NULL, NULL, 0)))
			die("ibv_create_cq");
	if (ex) {
		struct ibv_qp_init_attr_ex a = {.send_cq = p->cq[0], .recv_cq = p->cq[0], .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV};
		if (!(p->qp[0] = ibv_create_qp_ex(ctx, &a)))
			die("ibv_create_qp_ex");
	} else {
		p->qp[0] = rc_qp(pd, p->cq[0], p->cq[0], 16, 16);
	}
	p->qp[1] = rc_qp(pd, p->cq[1], p->cq[1], 16, 16);
	rc_loop(ctx, p->qp, gidx);
	/* rc_loop grants remote writes; the READs here need remote reads too. */
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | RW | RR};
		if (ibv_modify_qp(p->qp[i], &a, IBV_QP_ACCESS_FLAGS))
			die("ibv_modify_qp ACCESS_FLAGS");
	}
	return ex ? ibv_qp_to_qp_ex(p->qp[0]) : NULL;
}

static void pair_down(struct pair *p)
{
	for (int i = 0; i < 2; i++)
		if (ibv_destroy_qp(p->qp[i]) || ibv_destroy_cq(p->cq[i]))
			die("ibv_destroy_qp/cq");
}

/* next_wc polls cq for its next completion, for at most 10 s. */
static struct ibv_wc next_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	int k;

	while ((k = ibv_poll_cq(cq, 1, &wc)) == 0) {
		CHECK(time(NULL) < end, 0, 0); /* no completion in 10 s */
		usleep(50);
	}
	CHECK(k == 1, k, 0);
	return wc;
}

/* expect_wc takes cq's next completion: wr_id id, status st, and (when
 * successful) opcode op; it returns it. */
static struct ibv_wc expect_wc(struct ibv_cq *cq, uint64_t id, enum ibv_wc_status st, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = next_wc(cq);

	CHECK(wc.wr_id == id, wc.wr_id, id);
	CHECK(wc.status == st, wc.status, st);
	if (st == IBV_WC_SUCCESS)
		CHECK(wc.opcode == op, wc.opcode, op);
	return wc;
}

/* cq_empty: nothing more comes on cq within 100 ms. */
static int cq_empty(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	usleep(100000);
	return ibv_poll_cq(cq, 1, &wc) == 0;
}

/* rdma has B post a signaled RDMA WRITE from, or READ into, loc of 64
 * bytes at at with rkey, and returns the completion's status. */
static enum ibv_wc_status rdma(struct pair *p, enum ibv_wr_opcode op, uint32_t rkey, void *at)
{
	struct ibv_sge s = {.addr = (uintptr_t)loc, .length = 64, .lkey = lmr->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = (uintptr_t)at, .rkey = rkey}}, *bad;
	struct ibv_wc wc;

	CHECK(ibv_post_send(p->qp[1], &w, &bad) == 0, op, rkey);
	wc = next_wc(p->cq[1]);
	CHECK(wc.wr_id == 7, wc.wr_id, 7);
	if (wc.status == IBV_WC_SUCCESS)
		CHECK(wc.opcode == (op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE), wc.opcode, op);
	return wc.status;
}

/* write_ok: a WRITE of 64 bytes of seed at at through rkey lands. */
static void write_ok(struct pair *p, uint32_t rkey, unsigned char *at, int seed)
{
	memset(loc, seed, 64);
	CHECK(rdma(p, IBV_WR_RDMA_WRITE, rkey, at) == IBV_WC_SUCCESS, rkey, seed);
	CHECK(memcmp(at, loc, 64) == 0, at[0], seed);
}

/* read_ok: a READ of 64 bytes at at through rkey returns them. */
static void read_ok(struct pair *p, uint32_t rkey, unsigned char *at, int seed)
{
	memset(at, seed, 64);
	memset(loc, 0, 64);
	CHECK(rdma(p, IBV_WR_RDMA_READ, rkey, at) == IBV_WC_SUCCESS, rkey, seed);
	CHECK(memcmp(at, loc, 64) == 0, loc[0], seed);
}

/* refused: op through rkey at at fails with a remote access error (B and,
 * on rxe, A go to the error state: the pair is spent). */
static void refused(struct pair *p, enum ibv_wr_opcode op, uint32_t rkey, void *at)
{
	enum ibv_wc_status st = rdma(p, op, rkey, at);

	CHECK(st == IBV_WC_REM_ACCESS_ERR, st, rkey);
}

/* bind1 binds the type 1 window w with ibv_bind_mw on q, signaled, wr_id id,
 * to n bytes at at of m with access acc; returns ibv_bind_mw's value. */
static int bind1(struct ibv_qp *q, struct ibv_mw *w, struct ibv_mr *m, void *at, uint64_t n, unsigned acc,
		 uint64_t id)
{
	struct ibv_mw_bind b = {.wr_id = id, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = {.mr = m, .addr = (uintptr_t)at, .length = n, .mw_access_flags = acc}};

	return ibv_bind_mw(q, w, &b);
}

/* bind2 posts IBV_WR_BIND_MW on q, signaled, wr_id id: the type 2 window w
 * with the new rkey, over n bytes at at of m with access acc. */
static int bind2(struct ibv_qp *q, struct ibv_mw *w, uint32_t rkey, struct ibv_mr *m, void *at, uint64_t n,
		 unsigned acc, uint64_t id)
{
	struct ibv_send_wr wr = {.wr_id = id, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
		.bind_mw = {.mw = w, .rkey = rkey,
			.bind_info = {.mr = m, .addr = (uintptr_t)at, .length = n, .mw_access_flags = acc}}}, *bad;

	return ibv_post_send(q, &wr, &bad);
}

/* bind2_ok binds the type 2 window w over the window range on p's A with
 * the next rkey, expects its completion and returns that rkey. rdma-core's
 * ibv_post_send leaves mw->rkey as it was; rxe checks a bind's mw->rkey
 * against the window's current rkey (see 6f), so the program keeps
 * mw->rkey up to date itself. */
static uint32_t bind2_ok(struct pair *p, struct ibv_mw *w, unsigned acc, uint64_t id)
{
	uint32_t old = w->rkey, r = ibv_inc_rkey(old);

	CHECK(bind2(p->qp[0], w, r, mr, win, WIN, acc, id) == 0, id, 0);
	expect_wc(p->cq[0], id, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK(w->rkey == old, w->rkey, old); /* ibv_post_send does not touch it */
	w->rkey = r;
	return r;
}

/* local_inv posts a signaled IBV_WR_LOCAL_INV of rkey on q, wr_id id. */
static void local_inv(struct ibv_qp *q, uint32_t rkey, uint64_t id)
{
	struct ibv_send_wr wr = {.wr_id = id, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
		.invalidate_rkey = rkey}, *bad;

	CHECK(ibv_post_send(q, &wr, &bad) == 0, id, rkey);
}

static enum ibv_qp_state qp_state(struct ibv_qp *q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(q, &a, IBV_QP_STATE, &ia))
		die("ibv_query_qp");
	return a.qp_state;
}

/* ud_qp makes a UD QP in RTS on cq. */
static struct ibv_qp *ud_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};

	if (!q || ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("UD QP INIT");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE))
		die("UD QP RTR");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 1};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("UD QP RTS");
	return q;
}

int main(int argc, char **argv)
{
	const char *devname = NULL;
	int opt, rc, cases = 0;
	struct pair p, p2;
	struct ibv_device_attr da;
	struct ibv_mr *nobind;
	struct ibv_mw *mw1, *mw2;
	enum ibv_wc_status st;
	uint32_t r, r1, r2, old;
	unsigned flags;

	while ((opt = getopt(argc, argv, "d:g:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		default: fprintf(stderr, "usage: mw -d DEV -g GIDX\n"); return 2;
		}
	}
	alarm(120); /* a wait that never ends fails the run */
	ctx = open_device(devname);
	is_rxe = strncmp(ibv_get_device_name(ctx->device), "rxe", 3) == 0;
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE | RW | RR | IBV_ACCESS_MW_BIND) : NULL;
	nobind = pd ? ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE | RW | RR) : NULL;
	lmr = pd ? ibv_reg_mr(pd, loc, sizeof loc, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr || !nobind || !lmr)
		die("ibv_alloc_pd/ibv_reg_mr");

	/* 1. What the device says of windows. */
	if (ibv_query_device(ctx, &da))
		die("ibv_query_device");
	CHECK(da.max_mw > 0 || !(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW), da.max_mw, 0);
	printf("mw: 1. max_mw %d, IBV_DEVICE_MEM_WINDOW %s, TYPE_2A %s, TYPE_2B %s\n", da.max_mw,
	       da.device_cap_flags & IBV_DEVICE_MEM_WINDOW ? "yes" : "no",
	       da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A ? "yes" : "no",
	       da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B ? "yes" : "no");
	cases++;
	if (!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW)) {
		/* A device without windows (softrdma's shm0) refuses them. */
		errno = 0;
		CHECK(ibv_alloc_mw(pd, IBV_MW_TYPE_2) == NULL && errno == EOPNOTSUPP, errno, EOPNOTSUPP);
		printf("mw: no memory windows on %s: ibv_alloc_mw fails with EOPNOTSUPP\n", ibv_get_device_name(ctx->device));
		return 0;
	}

	/* 2. Type 1: bind, WRITE and READ inside, WRITE outside the window,
	 * READ through a write-only bind. */
	pair_up(&p, 0);
	mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->type == IBV_MW_TYPE_1, 0, 0);
	old = mw1->rkey;
	CHECK(bind1(p.qp[0], mw1, mr, win, WIN, RW | RR, 21) == 0, 0, 0);
	expect_wc(p.cq[0], 21, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	/* rdma-core's rxe moves mw->rkey to the next key, as ibv_inc_rkey. */
	CHECK(mw1->rkey == ibv_inc_rkey(old), mw1->rkey, old);
	write_ok(&p, mw1->rkey, win + 100, 0x11);
	read_ok(&p, mw1->rkey, win + 200, 0x22);
	/* A rebind of a bound type 1 window is allowed; write access only now. */
	CHECK(bind1(p.qp[0], mw1, mr, win, WIN, RW, 22) == 0, 0, 0);
	expect_wc(p.cq[0], 22, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	write_ok(&p, mw1->rkey, win + 300, 0x24);
	refused(&p, IBV_WR_RDMA_READ, mw1->rkey, win);
	pair_down(&p);
	printf("mw: 2. type 1: bind CQE, rkey %#x -> %#x; WRITE/READ in the window work; "
	       "READ via write-only bind: REM_ACCESS_ERR\n", old, ibv_inc_rkey(old));
	cases++;

	/* 2b. A WRITE through the window beyond its end, inside the MR: IBTA
	 * refuses it (C10-75's bounds are the window's). rxe checks an access
	 * through a window against the MR's range only (rxe_resp.c
	 * check_rkey: mr_check_range), and it lands. */
	pair_up(&p, 0);
	CHECK(bind1(p.qp[0], mw1, mr, win, WIN, RW, 23) == 0, 0, 0);
	expect_wc(p.cq[0], 23, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	memset(mem + 3 * WIN, 0, 64);
	if (is_rxe) {
		write_ok(&p, mw1->rkey, mem + 3 * WIN, 0x23);
	} else {
		refused(&p, IBV_WR_RDMA_WRITE, mw1->rkey, mem + 3 * WIN);
		CHECK(mem[3 * WIN] == 0, mem[3 * WIN], 0);
	}
	pair_down(&p);
	printf("mw: 2b. WRITE through a type 1 window beyond its end, inside the MR: %s\n",
	       is_rxe ? "lands (rxe checks the MR's bounds)" : "REM_ACCESS_ERR, nothing written");
	cases++;

	/* 3. Type 1 unbind: a bind of length 0. (rdma-core 44's rxe reads
	 * bind_info.mr->lkey even then, and a NULL mr crashes the program
	 * with SIGSEGV; so the MR is given.) */
	pair_up(&p, 0);
	CHECK(bind1(p.qp[0], mw1, mr, win, WIN, RW | RR, 31) == 0, 0, 0);
	expect_wc(p.cq[0], 31, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	r = mw1->rkey;
	write_ok(&p, r, win, 0x31);
	CHECK(bind1(p.qp[0], mw1, mr, win, 0, 0, 32) == 0, 0, 0);
	expect_wc(p.cq[0], 32, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	CHECK(mw1->rkey == ibv_inc_rkey(r), mw1->rkey, r);
	refused(&p, IBV_WR_RDMA_WRITE, r, win);
	pair_down(&p);
	printf("mw: 3. type 1 unbind (length 0): bind CQE, then WRITE via the old rkey: REM_ACCESS_ERR\n");
	cases++;

	/* 4. A bind to an MR without IBV_ACCESS_MW_BIND: the post succeeds, the
	 * completion fails, the QP is in error; mw->rkey, moved on by the
	 * post, is put back as ibv_bind_mw(3) tells. */
	pair_up(&p, 0);
	old = mw1->rkey;
	CHECK(bind1(p.qp[0], mw1, nobind, win, WIN, RW, 41) == 0, 0, 0);
	expect_wc(p.cq[0], 41, IBV_WC_MW_BIND_ERR, 0);
	CHECK(qp_state(p.qp[0]) == IBV_QPS_ERR, qp_state(p.qp[0]), IBV_QPS_ERR);
	mw1->rkey = old;
	pair_down(&p);
	printf("mw: 4. bind to an MR without MW_BIND: IBV_WC_MW_BIND_ERR, QP in IBV_QPS_ERR\n");
	cases++;

	/* 5. ZERO_BASED: refused by ibv_bind_mw itself; nothing posted. */
	pair_up(&p, 0);
	old = mw1->rkey;
	rc = bind1(p.qp[0], mw1, mr, win, WIN, RW | IBV_ACCESS_ZERO_BASED, 51);
	CHECK(rc == EINVAL, rc, EINVAL);
	CHECK(mw1->rkey == old, mw1->rkey, old);
	CHECK(cq_empty(p.cq[0]), 0, 0);
	printf("mw: 5. ibv_bind_mw with IBV_ACCESS_ZERO_BASED: EINVAL, no completion\n");
	cases++;

	/* 6a. Type 2: a bind WR with the next rkey; that rkey works, the old
	 * one does not. */
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2 && mw2->type == IBV_MW_TYPE_2, 0, 0);
	old = mw2->rkey;
	r = bind2_ok(&p, mw2, RW | RR, 61);
	write_ok(&p, r, win + 400, 0x61);
	read_ok(&p, r, win + 500, 0x62);
	refused(&p, IBV_WR_RDMA_WRITE, old, win);
	/* The window holds A: it goes before the pair. */
	CHECK(ibv_dealloc_mw(mw2) == 0, 0, 0);
	pair_down(&p);
	printf("mw: 6a. type 2: IBV_WR_BIND_MW CQE, mw->rkey left %#x; new rkey %#x works, old one: REM_ACCESS_ERR\n",
	       old, r);
	cases++;

	/* 6b. Local invalidation ends access; a rebind (next rkey) works. */
	pair_up(&p, 0);
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2 != NULL, 0, 0);
	r1 = bind2_ok(&p, mw2, RW, 62);
	write_ok(&p, r1, win, 0x63);
	local_inv(p.qp[0], r1, 63);
	expect_wc(p.cq[0], 63, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	refused(&p, IBV_WR_RDMA_WRITE, r1, win);
	pair_down(&p); /* an invalidated window holds no QP */
	pair_up(&p, 0);
	r2 = bind2_ok(&p, mw2, RW, 64);
	CHECK(r2 == ibv_inc_rkey(r1), r2, r1);
	write_ok(&p, r2, win + 600, 0x64);
	printf("mw: 6b. type 2 IBV_WR_LOCAL_INV: IBV_WC_LOCAL_INV, then REM_ACCESS_ERR; rebind %#x works\n", r2);
	cases++;

	/* 6c. Remote invalidation: B's SEND_WITH_INV of the rkey; A's receive
	 * says so; access ends. */
	{
		struct ibv_sge rs = {.addr = (uintptr_t)(mem + 3 * WIN), .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 65, .sg_list = &rs, .num_sge = 1}, *rbad;
		struct ibv_sge ss = {.addr = (uintptr_t)loc, .length = 8, .lkey = lmr->lkey};
		struct ibv_send_wr sw = {.wr_id = 66, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
			.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = r2}, *sbad;
		struct ibv_wc wc;

		CHECK(ibv_post_recv(p.qp[0], &rw, &rbad) == 0, 0, 0);
		CHECK(ibv_post_send(p.qp[1], &sw, &sbad) == 0, 0, 0);
		expect_wc(p.cq[1], 66, IBV_WC_SUCCESS, IBV_WC_SEND);
		wc = expect_wc(p.cq[0], 65, IBV_WC_SUCCESS, IBV_WC_RECV);
		/* rxe (rxe_resp.c do_complete) writes the kernel's
		 * IB_WC_WITH_INVALIDATE, 1 << 2, into the user CQ: userspace
		 * reads it as IBV_WC_IP_CSUM_OK, and IBV_WC_WITH_INV (1 << 3)
		 * is never set. (It also sets IBV_WC_GRH on every receive.) */
		if (is_rxe)
			CHECK((wc.wc_flags & (IBV_WC_IP_CSUM_OK | IBV_WC_WITH_INV)) == IBV_WC_IP_CSUM_OK, wc.wc_flags, 0);
		else
			CHECK(wc.wc_flags & IBV_WC_WITH_INV, wc.wc_flags, IBV_WC_WITH_INV);
		CHECK(wc.invalidated_rkey == r2, wc.invalidated_rkey, r2);
		CHECK(wc.byte_len == 8, wc.byte_len, 8);
		flags = wc.wc_flags;
	}
	refused(&p, IBV_WR_RDMA_WRITE, r2, win);
	pair_down(&p);
	printf("mw: 6c. type 2 SEND_WITH_INV: receive's wc_flags %#x (%s), "
	       "invalidated_rkey %#x; then REM_ACCESS_ERR\n", flags,
	       is_rxe ? "IBV_WC_IP_CSUM_OK, not IBV_WC_WITH_INV" : "IBV_WC_WITH_INV", r2);
	cases++;

	/* 6d. A bind of a type 2 window that is bound: IBV_WC_MW_BIND_ERR. */
	pair_up(&p, 0);
	r = bind2_ok(&p, mw2, RW, 67);
	CHECK(bind2(p.qp[0], mw2, ibv_inc_rkey(r), mr, win, WIN, RW, 68) == 0, 0, 0);
	expect_wc(p.cq[0], 68, IBV_WC_MW_BIND_ERR, 0);
	CHECK(qp_state(p.qp[0]) == IBV_QPS_ERR, qp_state(p.qp[0]), IBV_QPS_ERR);
	CHECK(ibv_dealloc_mw(mw2) == 0, 0, 0);
	pair_down(&p);
	printf("mw: 6d. type 2 bind of a bound window: IBV_WC_MW_BIND_ERR, QP in IBV_QPS_ERR\n");
	cases++;

	/* 6e. A type 2 window is for the QP that bound it: a WRITE that comes
	 * in at another QP of the PD is refused (rxe_lookup_mw: mw->qp != qp). */
	pair_up(&p, 0);
	pair_up(&p2, 0);
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2 != NULL, 0, 0);
	r = bind2_ok(&p, mw2, RW, 69);
	write_ok(&p, r, win, 0x69);
	st = rdma(&p2, IBV_WR_RDMA_WRITE, r, win);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, st, r);
	pair_down(&p2);
	local_inv(p.qp[0], r, 70);
	expect_wc(p.cq[0], 70, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	printf("mw: 6e. type 2 bound on one QP, WRITE arriving at another QP: REM_ACCESS_ERR\n");
	cases++;

	/* 6f. rxe matches a bind WR's mw->rkey against the window's current
	 * rkey (rxe_bind_mw): after invalidation the window keeps the rkey of
	 * its last bind, and a WR whose mw->rkey is another key of the same
	 * window (such as the one from ibv_alloc_mw, which ibv_post_send
	 * leaves in mw->rkey) fails. */
	old = mw2->rkey;
	mw2->rkey = old & ~0xffu;
	if (mw2->rkey == old)
		mw2->rkey = old | 1;
	CHECK(bind2(p.qp[0], mw2, ibv_inc_rkey(old), mr, win, WIN, RW, 71) == 0, 0, 0);
	expect_wc(p.cq[0], 71, is_rxe ? IBV_WC_MW_BIND_ERR : IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	mw2->rkey = old;
	if (!is_rxe) {
		write_ok(&p, ibv_inc_rkey(old), win, 0x71);
		local_inv(p.qp[0], ibv_inc_rkey(old), 73);
		expect_wc(p.cq[0], 73, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	}
	pair_down(&p);
	printf("mw: 6f. type 2 bind WR whose mw->rkey is not the window's current rkey: %s\n",
	       is_rxe ? "IBV_WC_MW_BIND_ERR" : "bound (the window is named by its object)");
	cases++;

	/* 7. An MR with a bound window cannot go; once the window is gone,
	 * it can. */
	{
		struct ibv_mr *m2 = ibv_reg_mr(pd, mem2, sizeof mem2, IBV_ACCESS_LOCAL_WRITE | RW | IBV_ACCESS_MW_BIND);
		struct ibv_mw *w = ibv_alloc_mw(pd, IBV_MW_TYPE_1);

		CHECK(m2 && w, 0, 0);
		pair_up(&p, 0);
		CHECK(bind1(p.qp[0], w, m2, mem2, WIN, RW, 72) == 0, 0, 0);
		expect_wc(p.cq[0], 72, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
		errno = 0;
		rc = ibv_dereg_mr(m2);
		printf("mw: 7. ibv_dereg_mr of an MR with a bound window: returns %d, errno %d; "
		       "after ibv_dealloc_mw it succeeds\n", rc, errno);
		CHECK(rc == (is_rxe ? EINVAL : EBUSY), rc, errno);
		CHECK(ibv_dealloc_mw(w) == 0, 0, 0);
		CHECK(ibv_dereg_mr(m2) == 0, 0, 0);
		pair_down(&p);
	}
	cases++;

	/* 8. No binds on a UD QP: ibv_post_send and ibv_bind_mw say EINVAL. */
	{
		struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
		struct ibv_qp *ud;

		if (!cq)
			die("ibv_create_cq");
		ud = ud_qp(cq);
		rc = bind2(ud, mw2, ibv_inc_rkey(mw2->rkey), mr, win, WIN, RW, 81);
		CHECK(rc == EINVAL, rc, EINVAL);
		old = mw1->rkey;
		rc = bind1(ud, mw1, mr, win, WIN, RW, 82);
		CHECK(rc == EINVAL, rc, EINVAL);
		CHECK(mw1->rkey == old, mw1->rkey, old);
		CHECK(cq_empty(cq), 0, 0);
		if (ibv_destroy_qp(ud) || ibv_destroy_cq(cq))
			die("ibv_destroy_qp/cq");
		printf("mw: 8. IBV_WR_BIND_MW and ibv_bind_mw on a UD QP: EINVAL\n");
	}
	cases++;

	/* 9. A PD with a window cannot go. */
	{
		struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
		struct ibv_mw *w = pd2 ? ibv_alloc_mw(pd2, IBV_MW_TYPE_1) : NULL;

		CHECK(w != NULL, 0, 0);
		errno = 0;
		rc = ibv_dealloc_pd(pd2);
		printf("mw: 9. ibv_dealloc_pd with a window: returns %d, errno %d\n", rc, errno);
		CHECK(rc == EBUSY, rc, errno);
		CHECK(ibv_dealloc_mw(w) == 0, 0, 0);
		CHECK(ibv_dealloc_pd(pd2) == 0, 0, 0);
	}
	cases++;

	/* 10. The extended QP API: ibv_wr_bind_mw and ibv_wr_local_inv. */
	{
		struct ibv_qp_ex *qx = pair_up(&p, 1);
		struct ibv_mw_bind_info bi = {.mr = mr, .addr = (uintptr_t)win, .length = WIN, .mw_access_flags = RW};

		r = ibv_inc_rkey(mw2->rkey);
		ibv_wr_start(qx);
		qx->wr_id = 101;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(qx, mw2, r, &bi);
		CHECK(ibv_wr_complete(qx) == 0, 0, 0);
		expect_wc(p.cq[0], 101, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
		mw2->rkey = r;
		write_ok(&p, r, win + 700, 0x70);
		ibv_wr_start(qx);
		qx->wr_id = 102;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_local_inv(qx, r);
		CHECK(ibv_wr_complete(qx) == 0, 0, 0);
		expect_wc(p.cq[0], 102, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
		refused(&p, IBV_WR_RDMA_WRITE, r, win);
		pair_down(&p);
		printf("mw: 10. ibv_wr_bind_mw: IBV_WC_BIND_MW, WRITE works; ibv_wr_local_inv: IBV_WC_LOCAL_INV, then REM_ACCESS_ERR\n");
	}
	cases++;

	if (ibv_dealloc_mw(mw1) || ibv_dealloc_mw(mw2))
		die("ibv_dealloc_mw");
	if (ibv_dereg_mr(mr) || ibv_dereg_mr(nobind) || ibv_dereg_mr(lmr) || ibv_dealloc_pd(pd))
		die("ibv_dereg_mr/ibv_dealloc_pd");
	ibv_close_device(ctx);
	printf("mw: %d cases of memory windows, type 1 and type 2, held\n", cases);
	return 0;
}
