//go:build clib

/*
 * How the C files of softrdma's libibverbs.so.1 and librdmacm.so.1 fail a
 * call, as rdma-core's do: set errno, return -1 (or NULL for a call that
 * returns a pointer).
 */
#ifndef SOFTRDMA_SRDERRNO_H
#define SOFTRDMA_SRDERRNO_H

#include <errno.h>
#include <stddef.h>

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

#endif
