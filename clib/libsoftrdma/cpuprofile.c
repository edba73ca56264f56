//go:build clib

/*
 * The exit hook of SOFTRDMA_CPUPROFILE (cpuprofile.go): a C program may
 * exit without closing its devices, and its profile is written then.
 * The library is linked with -z nodelete, so the hook stays mapped until
 * exit. A child forked after the profile started has no Go runtime
 * threads to write with (and no profile of its own): the hook does
 * nothing there.
 */
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "_cgo_export.h"

static pid_t srd_cpuprofile_pid;

static void srd_cpuprofile_exit(void)
{
	if (getpid() == srd_cpuprofile_pid)
		srdgo_cpuprofile_exit();
}

/* srd_cpuprofile_atexit registers the hook; the Go side calls it once,
 * when the profile starts. */
int srd_cpuprofile_atexit(void)
{
	srd_cpuprofile_pid = getpid();
	return atexit(srd_cpuprofile_exit);
}
