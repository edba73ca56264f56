/*
 * rsockets (<rdma/rsocket.h>) in softrdma's librdmacm.so.1: not provided.
 * Every call fails with ENOSYS, and the first one says so on stderr, so a
 * program such as rstream or riostream stops with a clear message instead
 * of misbehaving. Go programs have sockets over RDMA in softrdma's rdmanet
 * package.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/select.h>
#include <poll.h>
#include <rdma/rsocket.h>

#define SRD_EXPORT __attribute__((visibility("default")))

static int nosys(const char *fn)
{
	static int told;

	if (!told) {
		told = 1;
		fprintf(stderr, "softrdma: %s: rsockets are not provided by softrdma's librdmacm (rdma_cm connections are; see docs/clib.md)\n", fn);
	}
	errno = ENOSYS;
	return -1;
}

SRD_EXPORT int rsocket(int domain, int type, int protocol) { (void)domain; (void)type; (void)protocol; return nosys("rsocket"); }
SRD_EXPORT int rbind(int s, const struct sockaddr *a, socklen_t l) { (void)s; (void)a; (void)l; return nosys("rbind"); }
SRD_EXPORT int rlisten(int s, int b) { (void)s; (void)b; return nosys("rlisten"); }
SRD_EXPORT int raccept(int s, struct sockaddr *a, socklen_t *l) { (void)s; (void)a; (void)l; return nosys("raccept"); }
SRD_EXPORT int rconnect(int s, const struct sockaddr *a, socklen_t l) { (void)s; (void)a; (void)l; return nosys("rconnect"); }
SRD_EXPORT int rshutdown(int s, int how) { (void)s; (void)how; return nosys("rshutdown"); }
SRD_EXPORT int rclose(int s) { (void)s; return nosys("rclose"); }
SRD_EXPORT ssize_t rrecv(int s, void *b, size_t n, int f) { (void)s; (void)b; (void)n; (void)f; return nosys("rrecv"); }
SRD_EXPORT ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l) { (void)s; (void)b; (void)n; (void)f; (void)a; (void)l; return nosys("rrecvfrom"); }
SRD_EXPORT ssize_t rrecvmsg(int s, struct msghdr *m, int f) { (void)s; (void)m; (void)f; return nosys("rrecvmsg"); }
SRD_EXPORT ssize_t rsend(int s, const void *b, size_t n, int f) { (void)s; (void)b; (void)n; (void)f; return nosys("rsend"); }
SRD_EXPORT ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l) { (void)s; (void)b; (void)n; (void)f; (void)a; (void)l; return nosys("rsendto"); }
SRD_EXPORT ssize_t rsendmsg(int s, const struct msghdr *m, int f) { (void)s; (void)m; (void)f; return nosys("rsendmsg"); }
SRD_EXPORT ssize_t rread(int s, void *b, size_t n) { (void)s; (void)b; (void)n; return nosys("rread"); }
SRD_EXPORT ssize_t rreadv(int s, const struct iovec *v, int n) { (void)s; (void)v; (void)n; return nosys("rreadv"); }
SRD_EXPORT ssize_t rwrite(int s, const void *b, size_t n) { (void)s; (void)b; (void)n; return nosys("rwrite"); }
SRD_EXPORT ssize_t rwritev(int s, const struct iovec *v, int n) { (void)s; (void)v; (void)n; return nosys("rwritev"); }
SRD_EXPORT int rpoll(struct pollfd *f, nfds_t n, int t) { (void)f; (void)n; (void)t; return nosys("rpoll"); }
SRD_EXPORT int rselect(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t) { (void)n; (void)r; (void)w; (void)e; (void)t; return nosys("rselect"); }
SRD_EXPORT int rgetpeername(int s, struct sockaddr *a, socklen_t *l) { (void)s; (void)a; (void)l; return nosys("rgetpeername"); }
SRD_EXPORT int rgetsockname(int s, struct sockaddr *a, socklen_t *l) { (void)s; (void)a; (void)l; return nosys("rgetsockname"); }
SRD_EXPORT int rsetsockopt(int s, int lv, int o, const void *v, socklen_t l) { (void)s; (void)lv; (void)o; (void)v; (void)l; return nosys("rsetsockopt"); }
SRD_EXPORT int rgetsockopt(int s, int lv, int o, void *v, socklen_t *l) { (void)s; (void)lv; (void)o; (void)v; (void)l; return nosys("rgetsockopt"); }
SRD_EXPORT int rfcntl(int s, int cmd, ...) { (void)s; (void)cmd; return nosys("rfcntl"); }
SRD_EXPORT off_t riomap(int s, void *b, size_t n, int p, int f, off_t o) { (void)s; (void)b; (void)n; (void)p; (void)f; (void)o; return nosys("riomap"); }
SRD_EXPORT int riounmap(int s, void *b, size_t n) { (void)s; (void)b; (void)n; return nosys("riounmap"); }
SRD_EXPORT size_t riowrite(int s, const void *b, size_t n, off_t o, int f) { (void)s; (void)b; (void)n; (void)o; (void)f; nosys("riowrite"); return 0; }
