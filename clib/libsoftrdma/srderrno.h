//go:build clib

/*
 * How the C files of softrdma's libibverbs.so.1 and librdmacm.so.1 fail a
 * call, as rdma-core's do: set errno, return -1 (or NULL for a call that
 * returns a pointer); and the allocation with a pipe both make.
 */
#ifndef SOFTRDMA_SRDERRNO_H
#define SOFTRDMA_SRDERRNO_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

static inline int srd_fail(int err)
{
	errno = err;
	return -1;
}

static inline void *srd_fail_ptr(int err)
{
	errno = err;
	return NULL;
}

/* srd_alloc_pipe returns size zeroed bytes and a close-on-exec pipe in
   fds (what an event channel or a device's async events use), or NULL
   with errno set. */
static inline void *srd_alloc_pipe(size_t size, int fds[2])
{
	void *p = calloc(1, size);
	int err;

	if (!p)
		return srd_fail_ptr(ENOMEM);
	if (pipe2(fds, O_CLOEXEC)) {
		err = errno;
		free(p);
		return srd_fail_ptr(err);
	}
	return p;
}

#endif
