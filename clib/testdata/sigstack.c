/*
 * sigstack DEV: a program's signal handlers, installed without
 * SA_ONSTACK as most C programs install them (signal(), or sigaction
 * with sa_flags 0), run on the alternate signal stack over softrdma's
 * library, where the Go runtime it carries has one on every thread that
 * runs Go code. On a goroutine's few-kilobyte stack, a handler that
 * needs more than what is left writes past its end.
 *
 * 1. After signal(SIGALRM, h) and sigaction(SIGUSR1, {h, 0}), a query
 *    shows SA_ONSTACK on both; signal() still returns the previous
 *    handler, SIG_DFL and SIG_IGN still install as they are, and a bad
 *    signal number still fails with EINVAL.
 * 2. A 20 kHz SIGALRM timer runs a handler that uses 12 KiB of stack
 *    while the main thread makes verbs calls (into the library's Go code)
 *    for a second: the program must neither crash nor corrupt the
 *    library's state (every call keeps succeeding), and the handler must
 *    have run on the alternate stack whenever it ran on the main thread,
 *    which calls into Go (sigaltstack's SS_ONSTACK; a signal the kernel
 *    gives another thread runs on that thread's own full-size stack if
 *    it has no alternate one).
 *
 * Exit status 0 and "sigstack: ok" on success.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>
#include <time.h>

static volatile sig_atomic_t alarms, on_main, on_main_alt;
static pid_t main_tid;

static void big_handler(int sig)
{
	volatile char buf[12 * 1024];
	stack_t ss;

	(void)sig;
	memset((char *)buf, 0x5a, sizeof buf);
	if (buf[sizeof buf - 1] != 0x5a)
		abort();
	alarms++;
	if (syscall(SYS_gettid) != main_tid)
		return; /* another thread: its own stack, if it has no alternate one */
	on_main++;
	if (sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK))
		on_main_alt++;
}

static void small_handler(int sig)
{
	(void)sig;
}

static int fail(const char *what)
{
	fprintf(stderr, "sigstack: %s\n", what);
	return 1;
}

static int onstack(int sig)
{
	struct sigaction old;

	if (sigaction(sig, NULL, &old) != 0)
		return -1;
	return (old.sa_flags & SA_ONSTACK) != 0;
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "softrdma_lo";
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_device_attr attr;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	struct sigaction sa;
	struct itimerval it;
	struct timespec start, now;
	int n, i, calls = 0;

	main_tid = syscall(SYS_gettid);

	list = ibv_get_device_list(&n);
	if (!list)
		return fail("ibv_get_device_list failed");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		return fail("device not found or not opened");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		return fail("ibv_alloc_pd / ibv_create_cq failed");

	/* 1. The flags. */
	if (signal(SIGALRM, small_handler) == SIG_ERR)
		return fail("signal(SIGALRM) failed");
	if (onstack(SIGALRM) != 1)
		return fail("signal(SIGALRM, h) installed h without SA_ONSTACK");
	if (signal(SIGALRM, big_handler) != small_handler)
		return fail("signal() did not return the previous handler");
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = small_handler;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) != 0)
		return fail("sigaction(SIGUSR1) failed");
	if (onstack(SIGUSR1) != 1)
		return fail("sigaction(SIGUSR1, {h, 0}) installed h without SA_ONSTACK");
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGUSR1, &sa, NULL) != 0 || onstack(SIGUSR1) != 0)
		return fail("SIG_IGN did not install as it is");
	if (signal(SIGUSR1, SIG_DFL) == SIG_ERR || onstack(SIGUSR1) != 0)
		return fail("SIG_DFL did not install as it is");
	errno = 0;
	if (signal(0, small_handler) != SIG_ERR || errno != EINVAL)
		return fail("signal(0, h) did not fail with EINVAL");
	if (sigaction(SIGKILL, &sa, NULL) == 0 || errno != EINVAL)
		return fail("sigaction(SIGKILL) did not fail with EINVAL");

	/* 2. Signals into verbs calls. */
	memset(&it, 0, sizeof it);
	it.it_interval.tv_usec = 50;
	it.it_value.tv_usec = 50;
	if (setitimer(ITIMER_REAL, &it, NULL) != 0)
		return fail("setitimer failed");
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		for (i = 0; i < 100; i++, calls++) {
			if (ibv_query_device(ctx, &attr) != 0)
				return fail("ibv_query_device failed under signals");
			if (ibv_poll_cq(cq, 1, &wc) != 0)
				return fail("ibv_poll_cq of an empty CQ did not return 0 under signals");
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 1000000000L);
	memset(&it, 0, sizeof it);
	setitimer(ITIMER_REAL, &it, NULL);
	if (alarms < 100)
		return fail("fewer than 100 SIGALRMs arrived in a second");
	printf("sigstack: %d verbs calls, %d SIGALRMs, %d on the main thread, %d of them on the alternate stack\n", calls, (int)alarms, (int)on_main, (int)on_main_alt);
	if (on_main == 0 || on_main_alt != on_main)
		return fail("a handler on the main thread ran off the alternate signal stack");
	if (ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return fail("teardown failed");
	printf("sigstack: ok\n");
	return 0;
}
