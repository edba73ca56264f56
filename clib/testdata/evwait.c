/* evwait: completion events as a blocking and a non-blocking program wait
 * for them, on two RC QPs of one device connected to each other in one
 * process. QP 1's receive CQ reports to a completion channel.
 *
 *   1. A blocking ibv_get_cq_event that waits long (the SEND is posted by
 *      another thread 300 ms later, far past any spin before the wait
 *      blocks) returns the receive CQ's event, and the CQ holds the
 *      receive: the device receives while the thread sleeps.
 *   1b. Signals while it waits: SIGURG (the Go runtime's preemption
 *      signal, which the library's own runtime sends to a thread that
 *      calls into it) and a SIGUSR1 with an SA_RESTART handler, every
 *      millisecond for 300 ms, do not end the wait, as they do not end
 *      rdma-core's blocking read; a SIGUSR2 whose handler has no
 *      SA_RESTART ends it with EINTR, as it ends that read, and the event
 *      comes on the next call.
 *   2. Short waits, many in a row (a ping-pong through the event: arm,
 *      SEND, wait, poll), each return the one event.
 *   3. Two threads blocked on one channel take one event each.
 *   4. With the channel's descriptor non-blocking, ibv_get_cq_event
 *      returns -1 and errno EAGAIN when no event is there; poll() on the
 *      descriptor then announces the next event, which ibv_get_cq_event
 *      returns.
 *   5. ibv_ack_cq_events for every event lets ibv_destroy_cq return.
 *
 *   evwait -d DEV -g GIDX
 *
 * clib/test.sh runs it over the library, and clib/interop.sh in the VM
 * through rdma-core's own library on rxe0, where it passes too; exit
 * status 0 means every check held.
 */
#define TCPX_PROG "evwait"
#include "tcpx.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

static struct ibv_context *ctx;
static struct ibv_comp_channel *ch;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qp[2];
static struct ibv_mr *mr;
static char buf[4096];
static unsigned events;

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "evwait: %s (%ld, %ld)\n", what, a, b);
	exit(1);
}

static void send_one(uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	if (ibv_post_send(qp[0], &w, &bad))
		die("ibv_post_send");
}

static void post_recv(uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	if (ibv_post_recv(qp[1], &w, &bad))
		die("ibv_post_recv");
}

static void *send_later(void *arg)
{
	usleep(300000);
	send_one((uintptr_t)arg);
	return NULL;
}

static pthread_t main_thread;
static volatile sig_atomic_t usr1, usr2;

static void on_usr1(int sig) { usr1++; }
static void on_usr2(int sig) { usr2++; }

/* signal_then_send signals the main thread every millisecond for 300 ms
 * (SIGURG and SIGUSR1), then sends message arg. */
static void *signal_then_send(void *arg)
{
	for (int i = 0; i < 300; i++) {
		pthread_kill(main_thread, SIGURG);
		pthread_kill(main_thread, SIGUSR1);
		usleep(1000);
	}
	send_one((uintptr_t)arg);
	return NULL;
}

/* interrupt_then_send sends SIGUSR2 to the main thread once it waits,
 * then message arg. */
static void *interrupt_then_send(void *arg)
{
	usleep(200000); /* far past the spin: the thread sleeps */
	pthread_kill(main_thread, SIGUSR2);
	usleep(100000);
	send_one((uintptr_t)arg);
	return NULL;
}

/* arm_then posts the receive of message id, arms the receive CQ and
 * starts fn(id) in a thread, which sends the message. */
static pthread_t arm_then(uint64_t id, void *(*fn)(void *))
{
	pthread_t th;

	post_recv(id);
	if (ibv_req_notify_cq(rcq, 0))
		die("ibv_req_notify_cq");
	if (pthread_create(&th, NULL, fn, (void *)(uintptr_t)id))
		die("pthread_create");
	return th;
}

/* get_event waits for an event with ibv_get_cq_event, checks it is the
 * receive CQ's and acks it; i names the message in a failure. */
static void get_event(long i)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	if (ibv_get_cq_event(ch, &cq, &cq_ctx))
		fail("ibv_get_cq_event failed: errno, message", errno, i);
	if (cq != rcq || cq_ctx != (void *)&events)
		fail("event for another CQ, or with another context: message, same CQ", i, cq == rcq);
	ibv_ack_cq_events(cq, 1);
	__atomic_add_fetch(&events, 1, __ATOMIC_SEQ_CST);
}

static int taken; /* events the waiters took */

/* waiter takes one event, as get_event does, in a thread of its own. */
static void *waiter(void *arg)
{
	get_event((long)(uintptr_t)arg);
	__atomic_add_fetch(&taken, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* expect_recv polls the receive CQ once for the receive of message id:
 * the event came, so the completion is there. */
static void expect_recv(uint64_t id)
{
	struct ibv_wc wc;
	int k = ibv_poll_cq(rcq, 1, &wc);
	if (k != 1)
		fail("after the event, ibv_poll_cq of the receive CQ returned", k, (long)id);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != id || wc.opcode != IBV_WC_RECV)
		fail("receive: status, wr_id", wc.status, (long)wc.wr_id);
}

int main(int argc, char **argv)
{
	const char *devname = NULL;
	int opt, gidx = 0;
	struct ibv_cq *cq;
	void *cq_ctx;
	pthread_t th;

	while ((opt = getopt(argc, argv, "d:g:")) != -1) {
		switch (opt) {
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		default: fprintf(stderr, "usage: evwait -d DEV -g GIDX\n"); return 2;
		}
	}
	alarm(60); /* a wait that never ends fails the run */
	ctx = open_device(devname);
	ch = ibv_create_comp_channel(ctx);
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ch ? ibv_create_cq(ctx, 64, &events, ch, 0) : NULL;
	if (!mr || !scq || !rcq)
		die("ibv_create_comp_channel/ibv_reg_mr/ibv_create_cq");
	for (int i = 0; i < 2; i++)
		qp[i] = rc_qp(pd, scq, rcq, 64, 64);
	rc_loop(ctx, qp, gidx);

	/* 1. A long blocking wait. */
	post_recv(1);
	if (ibv_req_notify_cq(rcq, 0))
		die("ibv_req_notify_cq");
	if (pthread_create(&th, NULL, send_later, (void *)(uintptr_t)1))
		die("pthread_create");
	get_event(1);
	pthread_join(th, NULL);
	expect_recv(1);

	/* 1b. Signals while it waits. */
	{
		struct sigaction a = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};

		main_thread = pthread_self();
		sigemptyset(&a.sa_mask);
		if (sigaction(SIGUSR1, &a, NULL))
			die("sigaction SIGUSR1");
		th = arm_then(300, signal_then_send);
		get_event(300);
		pthread_join(th, NULL);
		expect_recv(300);
		if (usr1 == 0)
			fail("no SIGUSR1 reached the waiting thread", 0, 0);

		a.sa_handler = on_usr2;
		a.sa_flags = 0;
		if (sigaction(SIGUSR2, &a, NULL))
			die("sigaction SIGUSR2");
		th = arm_then(301, interrupt_then_send);
		errno = 0;
		if (ibv_get_cq_event(ch, &cq, &cq_ctx) != -1 || errno != EINTR)
			fail("a SIGUSR2 without SA_RESTART: want -1 and EINTR; errno", errno, usr2);
		get_event(301);
		pthread_join(th, NULL);
		expect_recv(301);
		a.sa_handler = SIG_DFL;
		sigaction(SIGUSR2, &a, NULL);
	}

	/* 2. Short waits in a row. */
	for (uint64_t id = 2; id < 202; id++) {
		post_recv(id);
		if (ibv_req_notify_cq(rcq, 0))
			die("ibv_req_notify_cq");
		send_one(id);
		get_event((long)id);
		expect_recv(id);
	}

	/* 3. Two waiters on one channel. */
	{
		pthread_t w[2];

		for (int i = 0; i < 2; i++)
			if (pthread_create(&w[i], NULL, waiter, (void *)(uintptr_t)(202 + i)))
				die("pthread_create");
		for (uint64_t id = 202; id < 204; id++) {
			post_recv(id);
			if (ibv_req_notify_cq(rcq, 0))
				die("ibv_req_notify_cq");
			send_one(id);
			while (__atomic_load_n(&taken, __ATOMIC_SEQ_CST) < (int)(id - 201))
				usleep(100);
			expect_recv(id);
		}
		for (int i = 0; i < 2; i++)
			pthread_join(w[i], NULL);
	}

	/* 4. A non-blocking descriptor. */
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		die("fcntl O_NONBLOCK");
	post_recv(204);
	if (ibv_req_notify_cq(rcq, 0))
		die("ibv_req_notify_cq");
	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &cq_ctx) != -1 || errno != EAGAIN)
		fail("no event yet, non-blocking: want -1 and EAGAIN; errno", errno, EAGAIN);
	send_one(204);
	{
		struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
		if (poll(&pfd, 1, 10000) != 1 || !(pfd.revents & POLLIN))
			fail("poll() on the channel announced no event in 10 s: revents", pfd.revents, 0);
	}
	get_event(204);
	expect_recv(204);
	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &cq_ctx) != -1 || errno != EAGAIN)
		fail("events drained, non-blocking: want -1 and EAGAIN; errno", errno, EAGAIN);

	/* 5. Every event acked: the CQ can go. */
	for (int i = 0; i < 2; i++)
		if (ibv_destroy_qp(qp[i]))
			die("ibv_destroy_qp");
	if (ibv_destroy_cq(rcq) || ibv_destroy_cq(scq))
		die("ibv_destroy_cq");
	if (ibv_destroy_comp_channel(ch))
		die("ibv_destroy_comp_channel");
	printf("evwait: %u events, blocking and non-blocking, each for its receive\n", events);
	return 0;
}
