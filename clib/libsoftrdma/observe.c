//go:build clib

/*
 * The exit hook of SOFTRDMA_CPUPROFILE, SOFTRDMA_TRACE and
 * SOFTRDMA_COUNTERS (observe.go): a C program may exit without closing
 * its devices, and their files are written then.
 * The library is linked with -z nodelete, so the hook stays mapped until
 * exit. A child forked after the profile started has no Go runtime
 * threads to write with (and no files of its own): the hook does
 * nothing there.
 */
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "_cgo_export.h"

static pid_t srd_observe_pid;

static void srd_observe_exit(void)
{
	if (getpid() == srd_observe_pid)
		srdgo_observe_exit();
}

/* srd_observe_atexit registers the hook; the Go side calls it once,
 * when observing starts. */
int srd_observe_atexit(void)
{
	srd_observe_pid = getpid();
	return atexit(srd_observe_exit);
}
