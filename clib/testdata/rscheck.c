/*
 * rscheck ADDR PORT: rsockets through softrdma's librdmacm.so.1, checked
 * from C: the errnos of misuse, non-blocking calls, rpoll over rsockets
 * mixed with a pipe, a connection over ADDR:PORT with data both ways,
 * socket options, names and shutdown. Prints "ok" and exits 0, or says
 * which check failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rsocket.h>

static int failed;

#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "rscheck:%d: ", __LINE__);       \
			fprintf(stderr, __VA_ARGS__);                    \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
			failed = 1;                                      \
		}                                                        \
	} while (0)

#define ERRNO(call, want)                                                          \
	do {                                                                       \
		errno = 0;                                                         \
		long r_ = (long)(call);                                            \
		CHECK(r_ == -1 && errno == (want), "%s: got %ld errno %d, want -1 %s", \
		      #call, r_, errno, #want);                                    \
	} while (0)

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char buf[256];
	int val;
	socklen_t len;

	if (argc != 3) {
		fprintf(stderr, "usage: rscheck ADDR PORT\n");
		return 2;
	}
	inet_pton(AF_INET, argv[1], &sin.sin_addr);
	sin.sin_port = htons(atoi(argv[2]));

	/* Bad descriptors: never an rsocket, a normal fd, closed. */
	ERRNO(rsend(12345, "x", 1, 0), EBADF);
	ERRNO(rrecv(12345, buf, 1, 0), EBADF);
	ERRNO(rclose(12345), EBADF);
	ERRNO(rlisten(0, 1), EBADF);
	ERRNO(rsocket(AF_INET, SOCK_DGRAM, 0), EOPNOTSUPP);
	ERRNO(rsocket(AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);

	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0, "rsocket");
	/* Not connected. */
	ERRNO(rsend(s, "x", 1, 0), ENOTCONN);
	ERRNO(rrecv(s, buf, 1, MSG_DONTWAIT), ENOTCONN);
	ERRNO(rgetpeername(s, (struct sockaddr *)&sin, &(socklen_t){ sizeof(sin) }), ENOTCONN);
	ERRNO(rshutdown(s, SHUT_WR), ENOTCONN);
	/* Options. */
	val = 1;
	CHECK(!rsetsockopt(s, SOL_SOCKET, SO_REUSEADDR, &val, sizeof(val)), "SO_REUSEADDR");
	CHECK(!rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &val, sizeof(val)), "TCP_NODELAY");
	CHECK(!rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &val, sizeof(val)), "RDMA_IOMAPSIZE");
	val = 1 << 16;
	CHECK(!rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &val, sizeof(val)), "SO_RCVBUF");
	val = 0;
	len = sizeof(val);
	CHECK(!rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &val, &len) && val == 1 << 17, "SO_RCVBUF reads back doubled: %d", val);
	ERRNO(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &val, sizeof(val)), ENOPROTOOPT);
	ERRNO(rgetsockopt(s, SOL_IP, IP_TTL, &val, &len), ENOPROTOOPT);
	ERRNO(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &val, 1), EINVAL);
	/* rfcntl. */
	CHECK((rfcntl(s, F_GETFL) & O_NONBLOCK) == 0, "F_GETFL blocking");
	CHECK(!rfcntl(s, F_SETFL, O_NONBLOCK), "F_SETFL");
	CHECK(rfcntl(s, F_GETFL) & O_NONBLOCK, "F_GETFL non-blocking");

	/* A listener on ADDR:PORT. */
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0, "rsocket listener");
	CHECK(!rbind(l, (struct sockaddr *)&sin, sizeof(sin)), "rbind");
	CHECK(!rlisten(l, 4), "rlisten");
	rfcntl(l, F_SETFL, O_NONBLOCK);
	ERRNO(raccept(l, NULL, NULL), EAGAIN);

	/* rpoll: timeout 0 on idle sockets and a pipe returns 0. */
	int pfd[2];
	CHECK(!pipe(pfd), "pipe");
	struct pollfd fds[3] = { { .fd = l, .events = POLLIN }, { .fd = pfd[0], .events = POLLIN }, { .fd = s, .events = POLLIN } };
	CHECK(rpoll(fds, 3, 0) == 0, "rpoll of idle sockets and an empty pipe: not 0");
	CHECK(rpoll(fds, 2, 50) == 0, "rpoll with a 50 ms timeout: not 0");
	/* The pipe's readiness comes through rpoll. */
	CHECK(write(pfd[1], "p", 1) == 1, "write pipe");
	CHECK(rpoll(fds, 2, 1000) == 1 && fds[1].revents == POLLIN && fds[0].revents == 0, "rpoll: the pipe is readable (%d %d)", fds[0].revents, fds[1].revents);
	CHECK(read(pfd[0], buf, 1) == 1, "read pipe");

	/* A non-blocking connect: EINPROGRESS, then POLLOUT and SO_ERROR 0. */
	errno = 0;
	int r = rconnect(s, (struct sockaddr *)&sin, sizeof(sin));
	CHECK(r == 0 || errno == EINPROGRESS, "rconnect: %d", r);
	if (r) {
		fds[0] = (struct pollfd){ .fd = s, .events = POLLOUT };
		CHECK(rpoll(fds, 1, 10000) == 1 && (fds[0].revents & POLLOUT), "rpoll POLLOUT after rconnect");
		val = -1;
		len = sizeof(val);
		CHECK(!rgetsockopt(s, SOL_SOCKET, SO_ERROR, &val, &len) && val == 0, "SO_ERROR %d", val);
	}
	ERRNO(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)), EISCONN);
	/* The listener is readable, then accepts. */
	fds[0] = (struct pollfd){ .fd = l, .events = POLLIN };
	CHECK(rpoll(fds, 1, 10000) == 1 && fds[0].revents == POLLIN, "rpoll POLLIN on the listener");
	struct sockaddr_in peer;
	len = sizeof(peer);
	int a = raccept(l, (struct sockaddr *)&peer, &len);
	CHECK(a >= 0 && len == sizeof(peer) && peer.sin_family == AF_INET, "raccept");
	/* Names agree. */
	struct sockaddr_in sn, pn;
	len = sizeof(sn);
	CHECK(!rgetsockname(s, (struct sockaddr *)&sn, &len), "rgetsockname");
	len = sizeof(pn);
	CHECK(!rgetpeername(a, (struct sockaddr *)&pn, &len), "rgetpeername");
	CHECK(sn.sin_port == pn.sin_port && sn.sin_addr.s_addr == pn.sin_addr.s_addr, "names differ");
	len = sizeof(pn);
	CHECK(!rgetpeername(s, (struct sockaddr *)&pn, &len) && pn.sin_port == sin.sin_port, "client's peer port");

	/* Non-blocking receive with nothing there: EAGAIN, and rpoll says 0. */
	ERRNO(rrecv(a, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	ERRNO(rrecv(s, buf, sizeof(buf), 0), EAGAIN); /* s is O_NONBLOCK */
	fds[0] = (struct pollfd){ .fd = a, .events = POLLIN };
	CHECK(rpoll(fds, 1, 0) == 0, "rpoll on an idle connection: not 0");
	/* Data both ways, a blocking receive, rpoll mixing an rsocket and a pipe. */
	CHECK(rsend(s, "hello", 5, 0) == 5, "rsend");
	fds[0] = (struct pollfd){ .fd = pfd[0], .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = a, .events = POLLIN };
	CHECK(rpoll(fds, 2, 10000) == 1 && fds[1].revents == POLLIN && fds[0].revents == 0, "rpoll: the rsocket is readable");
	memset(buf, 0, sizeof(buf));
	CHECK(rrecv(a, buf, 5, MSG_WAITALL) == 5 && !memcmp(buf, "hello", 5), "rrecv");
	struct iovec iov[2] = { { "ab", 2 }, { "cde", 3 } };
	CHECK(rwritev(a, iov, 2) == 5, "rwritev");
	fds[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	CHECK(rpoll(fds, 1, 10000) == 1, "rpoll before rread");
	int got = 0;
	while (got < 5) {
		r = rread(s, buf + got, 5 - got);
		if (r < 0 && errno == EAGAIN)
			continue;
		CHECK(r > 0, "rread");
		if (r <= 0)
			break;
		got += r;
	}
	CHECK(got == 5 && !memcmp(buf, "abcde", 5), "rwritev's bytes");
	/* rselect over an rsocket. */
	CHECK(rsend(a, "z", 1, 0) == 1, "rsend z");
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	struct timeval tv = { 10, 0 };
	CHECK(rselect(s + 1, &rd, NULL, NULL, &tv) == 1 && FD_ISSET(s, &rd), "rselect");
	CHECK(rrecv(s, buf, 1, 0) == 1 && buf[0] == 'z', "rrecv z");
	/* MSG_PEEK leaves the bytes for the next rrecv. */
	CHECK(rsend(a, "peek", 4, 0) == 4, "rsend peek");
	fds[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	CHECK(rpoll(fds, 1, 10000) == 1, "rpoll before MSG_PEEK");
	memset(buf, 0, sizeof(buf));
	do
		r = rrecv(s, buf, 4, MSG_PEEK | MSG_WAITALL);
	while (r < 0 && errno == EAGAIN);
	CHECK(r > 0 && !memcmp(buf, "peek", r), "MSG_PEEK: %d %.4s", (int)r, buf);
	got = 0;
	while (got < 4) {
		r = rrecv(s, buf + got, 4 - got, 0);
		if (r < 0 && errno == EAGAIN)
			continue;
		CHECK(r > 0, "rrecv after MSG_PEEK");
		if (r <= 0)
			break;
		got += r;
	}
	CHECK(got == 4 && !memcmp(buf, "peek", 4), "rrecv after MSG_PEEK: %.4s", buf);
	/* Back-pressure: a non-blocking rsend takes what the peer's ring
	   has room for, then EAGAIN, and rpoll says not writable; once the
	   peer reads, rpoll wakes with POLLOUT. The bytes arrive intact. */
	static unsigned char big[1 << 16], back[1 << 16];
	size_t total = 0, i;
	for (i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i % 251);
	for (;;) {
		r = rsend(s, big + total % sizeof(big), sizeof(big) - total % sizeof(big), 0);
		if (r < 0)
			break;
		total += r;
		if (total > 64 << 20)
			break;
	}
	CHECK(r < 0 && errno == EAGAIN && total > 0 && total <= 64 << 20, "non-blocking rsend never stopped: %zu bytes", total);
	fds[0] = (struct pollfd){ .fd = s, .events = POLLOUT };
	CHECK(rpoll(fds, 1, 0) == 0, "rpoll POLLOUT with the peer's ring full");
	size_t have = 0;
	while (have < total) {
		size_t want = total - have, off = have % sizeof(big);
		if (want > sizeof(back) - off)
			want = sizeof(back) - off;
		r = rrecv(a, back, want, 0);
		CHECK(r > 0, "rrecv of the back-pressure bytes");
		if (r <= 0)
			break;
		CHECK(!memcmp(back, big + off, r), "back-pressure bytes differ at %zu", have);
		have += r;
	}
	CHECK(rpoll(fds, 1, 10000) == 1 && (fds[0].revents & POLLOUT), "rpoll POLLOUT after the peer read");
	/* riowrite into nothing mapped: an error, not a crash. */
	CHECK(riowrite(s, "x", 1, 1 << 20, 0) == (size_t)-1, "riowrite with nothing mapped");
	ERRNO(riounmap(s, buf, 1), EINVAL);
	/* Shutdown: the peer reads EOF after the data; sending after it is EPIPE. */
	CHECK(rsend(s, "end", 3, 0) == 3, "rsend end");
	CHECK(!rshutdown(s, SHUT_WR), "rshutdown");
	ERRNO(rsend(s, "x", 1, 0), EPIPE);
	got = 0;
	for (;;) {
		r = rrecv(a, buf + got, sizeof(buf) - got, 0);
		if (r <= 0)
			break;
		got += r;
	}
	CHECK(r == 0 && got == 3 && !memcmp(buf, "end", 3), "EOF after the data: r=%d got=%d", r, got);
	CHECK(!rclose(a), "rclose accepted");
	CHECK(!rclose(s), "rclose client");
	CHECK(!rclose(l), "rclose listener");
	ERRNO(rsend(s, "x", 1, 0), EBADF);

	/* A connect nobody listens to fails with ECONNREFUSED. */
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	sin.sin_port = htons(ntohs(sin.sin_port) + 1);
	ERRNO(rconnect(s, (struct sockaddr *)&sin, sizeof(sin)), ECONNREFUSED);
	rclose(s);
	if (failed)
		return 1;
	printf("ok\n");
	return 0;
}
