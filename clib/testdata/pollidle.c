/*
 * pollidle: the library's busy-polling behaviour as a C program sees it.
 *
 * A thread that polls an empty CQ over and over (perftest does, never
 * yielding) must give its CPU away now and then, as softrdma's Go pollers
 * do: this program defines sched_yield itself, so the library's calls land
 * here and are counted, and checks that polling an empty CQ yields about
 * once every 64 receive attempts and that a poll of zero entries does not
 * count. TRIES is how many receive attempts one empty ibv_poll_cq makes on
 * DEVICE: 4 on a UDP device (the library's emptyPollTries), 1 on shm.
 *
 * Build: cc -rdynamic -o pollidle pollidle.c -libverbs   (clib/test.sh does)
 * Run:   pollidle DEVICE TRIES
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int yields;

/* Interposes on libc's sched_yield for the whole process. */
int sched_yield(void)
{
	yields++;
	return syscall(SYS_sched_yield);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	int n, i, got, tries, want, polls = 64 * 100;

	if (argc != 3 || (tries = atoi(argv[2])) < 1) {
		fprintf(stderr, "usage: pollidle DEVICE TRIES\n");
		return 2;
	}
	want = polls * tries / 64;
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx) {
		printf("FAIL cannot open %s\n", argv[1]);
		return 1;
	}
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq) {
		printf("FAIL ibv_create_cq\n");
		return 1;
	}
	yields = 0;
	for (i = 0; i < polls; i++)
		if (ibv_poll_cq(cq, 1, &wc) != 0) {
			printf("FAIL a poll of an empty CQ returned non-zero\n");
			return 1;
		}
	/* The Go runtime may yield too, through its own system call, not
	 * this function: what is counted here is the library's. */
	if (yields < want - 1 || yields > want + 1) {
		printf("FAIL %d empty polls of %d receive attempts yielded the CPU %d times; want %d (one every 64 attempts)\n",
		       polls, tries, yields, want);
		return 1;
	}
	got = yields;
	/* Polls of zero entries are no empty polls. */
	yields = 0;
	for (i = 0; i < polls; i++)
		ibv_poll_cq(cq, 0, &wc);
	if (yields != 0) {
		printf("FAIL %d polls for zero completions yielded %d times; want 0\n", polls, yields);
		return 1;
	}
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
	printf("PASS %d empty polls yielded %d times\n", polls, got);
	return 0;
}
