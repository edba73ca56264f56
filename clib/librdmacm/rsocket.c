/*
 * rsockets (<rdma/rsocket.h>) in softrdma's librdmacm.so.1: stream
 * sockets over RDMA in librdmacm's rsocket wire protocol, so rstream,
 * riostream and other rsocket programs talk to each other, to softrdma's
 * Go programs (package rdmanet) and to rdma-core's rsockets.
 *
 * This half owns the socket numbers: each rsocket is an eventfd the
 * library creates, so its number never collides with the program's own
 * descriptors, and it is readable whenever the socket's state changed.
 * The Go half (clib/libsoftrdma/rsocket.go, through libibverbs.so.1's
 * private srdgo_cm_rs_* entry points) holds the connection, the data
 * rings and the state; rpoll asks it which events are ready and, to
 * wait, poll()s the eventfds together with the program's own
 * descriptors. Datagram rsockets (SOCK_DGRAM) are not provided
 * (EOPNOTSUPP).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <rdma/rsocket.h>
#include "rdmacm.h"
#include "srderrno.h"
#include "forked.h"

#define SRD_EXPORT __attribute__((visibility("default")))

/* The Go half (clib/libsoftrdma/rsocket.go): 0 or a positive errno. */
int srdgo_cm_rs_socket(int fd, int domain, int type);
int srdgo_cm_rs_bind(int fd, struct srd_cm_addr *a);
int srdgo_cm_rs_listen(int fd, int backlog);
int srdgo_cm_rs_accept(int fd, int nfd, struct srd_cm_addr *peer);
int srdgo_cm_rs_connect(int fd, struct srd_cm_addr *a);
int srdgo_cm_rs_shutdown(int fd, int how);
int srdgo_cm_rs_close(int fd);
int srdgo_cm_rs_recv(int fd, void *buf, size_t n, int flags, ssize_t *out);
int srdgo_cm_rs_send(int fd, const void *buf, size_t n, int flags, ssize_t *out);
/* -1: not an rsocket; wait < 0 asks only that, wait > 0: rpoll sleeps next */
int srdgo_cm_rs_revents(int fd, short events, int wait);
void srdgo_cm_rs_arm(int fd, int on);
int srdgo_cm_rs_name(int fd, int peer, struct srd_cm_addr *a);
int srdgo_cm_rs_setopt(int fd, int level, int name, int val);
int srdgo_cm_rs_getopt(int fd, int level, int name, int *val);
int srdgo_cm_rs_fcntl(int fd, int cmd, int arg, int *out);
int srdgo_cm_rs_iomap(int fd, void *buf, size_t n, int prot, off_t offset, off_t *out);
int srdgo_cm_rs_iounmap(int fd, void *buf, size_t n);
int srdgo_cm_rs_iowrite(int fd, const void *buf, size_t n, off_t offset, int flags, size_t *out);

/*
 * A program that retries non-blocking calls at once (rstream's default)
 * would keep its CPU from the library's goroutines that move its data:
 * a call that finds nothing to do yields the CPU, as the library's
 * ibv_poll_cq does when it finds the CQ empty.
 */
static int rs_again(void)
{
	sched_yield();
	return srd_fail(EAGAIN);
}

/* addr_out writes the Go side's address into a socket call's sa and
   len (a socket with no address yet reads as IPv4's 0.0.0.0:0). */
static void addr_out(const struct srd_cm_addr *a, struct sockaddr *sa, socklen_t *len)
{
	struct sockaddr_storage ss;
	struct srd_cm_addr b = *a;
	socklen_t n;

	if (!sa || !len)
		return;
	if (b.family != AF_INET6)
		b.family = AF_INET;
	n = srd_sockaddr(&ss, &b);
	memcpy(sa, &ss, *len < n ? *len : n);
	*len = n;
}

/* A new socket number: an eventfd, made readable by the Go side. */
static int new_fd(void)
{
	return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

static int is_rsocket(int fd)
{
	return fd >= 0 && srdgo_cm_rs_revents(fd, 0, -1) >= 0;
}

SRD_EXPORT int rsocket(int domain, int type, int protocol)
{
	int fd, err;
	struct ibv_context **devs;

	(void)protocol;
	/* The devices librdmacm opens are the ones rsockets use. */
	devs = rdma_get_devices(NULL);
	if (!devs)
		return -1;
	rdma_free_devices(devs);
	fd = new_fd();
	if (fd < 0)
		return -1;
	err = srdgo_cm_rs_socket(fd, domain, type);
	if (err) {
		close(fd);
		return srd_fail(err);
	}
	return fd;
}

/* with_addr checks an rsocket call's socket and address and hands them
   to the Go side's call. */
static int with_addr(int s, const struct sockaddr *sa, socklen_t len, int (*call)(int, struct srd_cm_addr *))
{
	struct srd_cm_addr a;
	int err;

	if (!is_rsocket(s))
		return srd_fail(EBADF);
	if ((err = srd_addr_in(sa, len, &a)))
		return srd_fail(err);
	err = call(s, &a);
	return err ? srd_fail(err) : 0;
}

SRD_EXPORT int rbind(int s, const struct sockaddr *sa, socklen_t len)
{
	return with_addr(s, sa, len, srdgo_cm_rs_bind);
}

SRD_EXPORT int rlisten(int s, int backlog)
{
	int err = srdgo_cm_rs_listen(s, backlog);
	return err ? srd_fail(err) : 0;
}

SRD_EXPORT int raccept(int s, struct sockaddr *sa, socklen_t *len)
{
	struct srd_cm_addr peer;
	int nfd, err;

	if (!is_rsocket(s))
		return srd_fail(EBADF);
	nfd = new_fd();
	if (nfd < 0)
		return -1;
	err = srdgo_cm_rs_accept(s, nfd, &peer);
	if (err) {
		close(nfd);
		return srd_fail(err);
	}
	addr_out(&peer, sa, len);
	return nfd;
}

SRD_EXPORT int rconnect(int s, const struct sockaddr *sa, socklen_t len)
{
	return with_addr(s, sa, len, srdgo_cm_rs_connect);
}

SRD_EXPORT int rshutdown(int s, int how)
{
	int err = srdgo_cm_rs_shutdown(s, how);
	return err ? srd_fail(err) : 0;
}

SRD_EXPORT int rclose(int s)
{
	int err = srdgo_cm_rs_close(s);

	if (err)
		return srd_fail(err);
	close(s);
	return 0;
}

SRD_EXPORT ssize_t rrecv(int s, void *b, size_t n, int f)
{
	ssize_t out = 0;
	int err;

	if (!b && n)
		return srd_fail(EFAULT);
	err = srdgo_cm_rs_recv(s, b, n, f, &out);
	if (err == EAGAIN)
		return rs_again();
	return err ? srd_fail(err) : out;
}

SRD_EXPORT ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *sa, socklen_t *len)
{
	ssize_t ret = rrecv(s, b, n, f);

	if (ret >= 0 && sa && len)
		rgetpeername(s, sa, len);
	return ret;
}

SRD_EXPORT ssize_t rread(int s, void *b, size_t n)
{
	return rrecv(s, b, n, 0);
}

/* Scatter reads: the first iovec waits as a read would, the rest take
   what is there. */
static ssize_t recv_iov(int s, const struct iovec *v, int cnt, int f)
{
	ssize_t total = 0, ret;
	int i;

	if (cnt < 0 || (cnt && !v))
		return srd_fail(EINVAL);
	for (i = 0; i < cnt; i++) {
		if (!v[i].iov_len)
			continue;
		ret = rrecv(s, v[i].iov_base, v[i].iov_len, total ? (f | MSG_DONTWAIT) & ~MSG_WAITALL : f);
		if (ret < 0)
			return total ? total : ret;
		total += ret;
		if ((size_t)ret < v[i].iov_len)
			break;
	}
	return total;
}

SRD_EXPORT ssize_t rreadv(int s, const struct iovec *v, int cnt)
{
	return recv_iov(s, v, cnt, 0);
}

SRD_EXPORT ssize_t rrecvmsg(int s, struct msghdr *m, int f)
{
	ssize_t ret;

	if (!m)
		return srd_fail(EFAULT);
	ret = recv_iov(s, m->msg_iov, (int)m->msg_iovlen, f);
	if (ret >= 0) {
		if (m->msg_name && m->msg_namelen)
			rgetpeername(s, m->msg_name, &m->msg_namelen);
		m->msg_controllen = 0;
		m->msg_flags = 0;
	}
	return ret;
}

SRD_EXPORT ssize_t rsend(int s, const void *b, size_t n, int f)
{
	ssize_t out = 0;
	int err;

	if (!b && n)
		return srd_fail(EFAULT);
	err = srdgo_cm_rs_send(s, b, n, f, &out);
	if (err == EAGAIN)
		return rs_again();
	return err ? srd_fail(err) : out;
}

/* A stream rsocket is connected: the destination is not used. */
SRD_EXPORT ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *sa, socklen_t len)
{
	(void)sa;
	(void)len;
	return rsend(s, b, n, f);
}

SRD_EXPORT ssize_t rwrite(int s, const void *b, size_t n)
{
	return rsend(s, b, n, 0);
}

static ssize_t send_iov(int s, const struct iovec *v, int cnt, int f)
{
	ssize_t total = 0, ret;
	int i;

	if (cnt < 0 || (cnt && !v))
		return srd_fail(EINVAL);
	for (i = 0; i < cnt; i++) {
		if (!v[i].iov_len)
			continue;
		ret = rsend(s, v[i].iov_base, v[i].iov_len, f);
		if (ret < 0)
			return total ? total : ret;
		total += ret;
		if ((size_t)ret < v[i].iov_len)
			break;
	}
	return total;
}

SRD_EXPORT ssize_t rwritev(int s, const struct iovec *v, int cnt)
{
	return send_iov(s, v, cnt, 0);
}

SRD_EXPORT ssize_t rsendmsg(int s, const struct msghdr *m, int f)
{
	if (!m)
		return srd_fail(EFAULT);
	return send_iov(s, m->msg_iov, (int)m->msg_iovlen, f);
}

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/*
 * rpoll: rsockets' events come from the Go side; the program's own
 * descriptors from poll(). A first look asks each rsocket's connection
 * (which polls its CQ) and, if there are other descriptors, poll()s them
 * without waiting. Only if nothing is ready does rpoll wait: it arms
 * each rsocket (from then on every change of its state writes its
 * eventfd), drains the eventfd, looks again, and poll()s the eventfds in
 * the rsockets' places together with the program's descriptors; a
 * change after the look wakes the poll(). Unarmed, the data path writes
 * no eventfd.
 */
static int poll_once(struct pollfd *fds, struct pollfd *pf, const char *isrs, nfds_t nfds, int wait, int others)
{
	nfds_t i;
	int ret = 0, r;
	uint64_t drain;

	for (i = 0; i < nfds; i++) {
		fds[i].revents = 0;
		if (!isrs[i])
			continue;
		if (wait) {
			srdgo_cm_rs_arm(fds[i].fd, 1);
			while (read(fds[i].fd, &drain, sizeof(drain)) == sizeof(drain))
				;
		}
		r = srdgo_cm_rs_revents(fds[i].fd, fds[i].events, wait != 0);
		if (r < 0) /* closed meanwhile */
			r = POLLNVAL;
		fds[i].revents = (short)r;
		if (r)
			ret++;
	}
	if (!others && !wait)
		return ret;
	for (i = 0; i < nfds; i++) {
		pf[i] = fds[i];
		pf[i].revents = 0;
		if (isrs[i])
			pf[i].events = POLLIN;
	}
	r = poll(pf, nfds, ret ? 0 : wait);
	if (wait) {
		for (i = 0; i < nfds; i++)
			if (isrs[i])
				srdgo_cm_rs_arm(fds[i].fd, 0);
	}
	if (r < 0)
		return errno == EINTR ? ret : -1;
	for (i = 0; i < nfds; i++) {
		if (isrs[i] || !pf[i].revents)
			continue;
		fds[i].revents = pf[i].revents;
		ret++;
	}
	return ret;
}

SRD_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct pollfd stack[16], *pf = stack;
	char *isrs, stackrs[16];
	int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
	nfds_t i;
	int ret, wait, others = 0;

	if (nfds && !fds)
		return srd_fail(EFAULT);
	isrs = stackrs;
	if (nfds > 16) {
		pf = calloc(nfds, sizeof(*pf));
		isrs = calloc(nfds, 1);
		if (!pf || !isrs) {
			free(pf);
			free(isrs);
			return srd_fail(ENOMEM);
		}
	}
	for (i = 0; i < nfds; i++) {
		isrs[i] = is_rsocket(fds[i].fd);
		if (!isrs[i])
			others = 1;
	}
	ret = poll_once(fds, pf, isrs, nfds, 0, others);
	while (ret == 0 && timeout != 0) {
		if (timeout < 0)
			wait = -1;
		else {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				break;
			wait = (int)left;
		}
		/* The Go runtime's own signals (preemption) interrupt the
		   poll(): they are the library's, not the program's, and
		   poll_once counts them as a wake-up with nothing ready. */
		ret = poll_once(fds, pf, isrs, nfds, wait, others);
		if (ret == 0)
			ret = poll_once(fds, pf, isrs, nfds, 0, others);
	}
	if (ret == 0 && timeout == 0)
		sched_yield(); /* a program polling in a loop */
	if (pf != stack) {
		free(pf);
		free(isrs);
	}
	return ret < 0 ? -1 : ret;
}

SRD_EXPORT int rselect(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	struct pollfd *fds;
	int i, cnt = 0, ret, timeout;

	if (n < 0 || n > FD_SETSIZE)
		return srd_fail(EINVAL);
	fds = calloc(n ? n : 1, sizeof(*fds));
	if (!fds)
		return srd_fail(ENOMEM);
	for (i = 0; i < n; i++) {
		short ev = 0;
		if (r && FD_ISSET(i, r))
			ev |= POLLIN;
		if (w && FD_ISSET(i, w))
			ev |= POLLOUT;
		if (e && FD_ISSET(i, e))
			ev |= POLLPRI;
		if (ev) {
			fds[cnt].fd = i;
			fds[cnt].events = ev;
			cnt++;
		}
	}
	timeout = t ? (int)(t->tv_sec * 1000 + (t->tv_usec + 999) / 1000) : -1;
	ret = rpoll(fds, cnt, timeout);
	if (ret < 0) {
		free(fds);
		return ret;
	}
	if (r)
		FD_ZERO(r);
	if (w)
		FD_ZERO(w);
	if (e)
		FD_ZERO(e);
	ret = 0;
	for (i = 0; i < cnt; i++) {
		short rv = fds[i].revents;
		if (r && (rv & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(fds[i].fd, r);
			ret++;
		}
		if (w && (rv & (POLLOUT | POLLERR))) {
			FD_SET(fds[i].fd, w);
			ret++;
		}
		if (e && (rv & POLLPRI)) {
			FD_SET(fds[i].fd, e);
			ret++;
		}
	}
	free(fds);
	return ret;
}

static int get_name(int s, int peer, struct sockaddr *sa, socklen_t *len)
{
	struct srd_cm_addr a;
	int err;

	if (!sa || !len)
		return srd_fail(EFAULT);
	err = srdgo_cm_rs_name(s, peer, &a);
	if (err)
		return srd_fail(err);
	addr_out(&a, sa, len);
	return 0;
}

SRD_EXPORT int rgetpeername(int s, struct sockaddr *sa, socklen_t *len)
{
	return get_name(s, 1, sa, len);
}

SRD_EXPORT int rgetsockname(int s, struct sockaddr *sa, socklen_t *len)
{
	return get_name(s, 0, sa, len);
}

SRD_EXPORT int rsetsockopt(int s, int level, int name, const void *v, socklen_t len)
{
	int val, err;

	if (!is_rsocket(s))
		return srd_fail(EBADF);
	if (level == SOL_RDMA && name == RDMA_ROUTE)
		return 0; /* routes come from the CM's own resolution */
	if (level == SOL_SOCKET && name == SO_LINGER) {
		if (!v || len < sizeof(struct linger))
			return srd_fail(EINVAL);
		val = ((const struct linger *)v)->l_onoff;
	} else {
		if (!v || len < sizeof(int))
			return srd_fail(EINVAL);
		val = *(const int *)v;
	}
	err = srdgo_cm_rs_setopt(s, level, name, val);
	return err ? srd_fail(err) : 0;
}

SRD_EXPORT int rgetsockopt(int s, int level, int name, void *v, socklen_t *len)
{
	int val = 0, err;

	if (!is_rsocket(s))
		return srd_fail(EBADF);
	if (!v || !len)
		return srd_fail(EFAULT);
	err = srdgo_cm_rs_getopt(s, level, name, &val);
	if (err)
		return srd_fail(err);
	if (level == SOL_SOCKET && name == SO_LINGER) {
		struct linger l = { .l_onoff = val, .l_linger = 0 };
		if (*len < sizeof(l))
			return srd_fail(EINVAL);
		memcpy(v, &l, sizeof(l));
		*len = sizeof(l);
		return 0;
	}
	if (*len < sizeof(int))
		return srd_fail(EINVAL);
	memcpy(v, &val, sizeof(int));
	*len = sizeof(int);
	return 0;
}

SRD_EXPORT int rfcntl(int s, int cmd, ...)
{
	va_list ap;
	int arg = 0, out = 0, err;

	va_start(ap, cmd);
	if (cmd == F_SETFL)
		arg = va_arg(ap, int);
	va_end(ap);
	err = srdgo_cm_rs_fcntl(s, cmd, arg, &out);
	return err ? srd_fail(err) : out;
}

SRD_EXPORT off_t riomap(int s, void *b, size_t n, int p, int f, off_t o)
{
	off_t out = 0;
	int err;

	(void)f;
	err = srdgo_cm_rs_iomap(s, b, n, p, o, &out);
	return err ? srd_fail(err) : out;
}

SRD_EXPORT int riounmap(int s, void *b, size_t n)
{
	int err = srdgo_cm_rs_iounmap(s, b, n);
	return err ? srd_fail(err) : 0;
}

SRD_EXPORT size_t riowrite(int s, const void *b, size_t n, off_t o, int f)
{
	size_t out = 0;
	int err;

	/* As rsocket's: (size_t)-1 with errno set on failure. */
	if (!b && n)
		return (size_t)srd_fail(EFAULT);
	err = srdgo_cm_rs_iowrite(s, b, n, o, f, &out);
	return err ? (size_t)srd_fail(err) : out;
}
