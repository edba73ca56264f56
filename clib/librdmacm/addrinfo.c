/*
 * rdma_getaddrinfo and rdma_freeaddrinfo of softrdma's librdmacm.so.1: the
 * host's getaddrinfo() resolves names (RoCE addresses are IP addresses),
 * and the result is laid out as <rdma/rdma_cma.h>'s struct rdma_addrinfo.
 * As rdma-core's, rdma_getaddrinfo returns 0 or getaddrinfo()'s EAI_* code
 * (gai_strerror() says what it means).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#define SRD_EXPORT __attribute__((visibility("default")))

static struct sockaddr *dup_sa(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *d = malloc(len);

	if (d)
		memcpy(d, sa, len);
	return d;
}

SRD_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

SRD_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
				const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo h, *r;
	struct addrinfo ah, *ai = NULL;
	int ret, passive;

	if (!res || (!node && !service)) {
		errno = EINVAL;
		return EAI_NONAME;
	}
	memset(&h, 0, sizeof(h));
	if (hints)
		h = *hints;
	passive = !!(h.ai_flags & RAI_PASSIVE);
	memset(&ah, 0, sizeof(ah));
	ah.ai_socktype = SOCK_STREAM;
	if (h.ai_flags & RAI_NUMERICHOST)
		ah.ai_flags |= AI_NUMERICHOST;
	if (passive)
		ah.ai_flags |= AI_PASSIVE;
	if (h.ai_flags & RAI_FAMILY)
		ah.ai_family = h.ai_family;
	else if (h.ai_family == AF_INET || h.ai_family == AF_INET6)
		ah.ai_family = h.ai_family;
	if (h.ai_family == AF_IB) {
		errno = EAFNOSUPPORT;
		return EAI_FAMILY;
	}
	ret = getaddrinfo(node, service, &ah, &ai);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		errno = ENOMEM;
		return EAI_MEMORY;
	}
	r->ai_flags = h.ai_flags;
	r->ai_family = ai->ai_family;
	r->ai_port_space = h.ai_port_space ? h.ai_port_space :
		(h.ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
	r->ai_qp_type = h.ai_qp_type ? h.ai_qp_type :
		(r->ai_port_space == RDMA_PS_UDP || r->ai_port_space == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC);
	if (passive) {
		r->ai_src_addr = dup_sa(ai->ai_addr, ai->ai_addrlen);
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = dup_sa(ai->ai_addr, ai->ai_addrlen);
		r->ai_dst_len = ai->ai_addrlen;
		if (h.ai_src_addr && h.ai_src_len) {
			r->ai_src_addr = dup_sa(h.ai_src_addr, h.ai_src_len);
			r->ai_src_len = h.ai_src_len;
		}
	}
	if (h.ai_connect && h.ai_connect_len) {
		r->ai_connect = malloc(h.ai_connect_len);
		if (r->ai_connect) {
			memcpy(r->ai_connect, h.ai_connect, h.ai_connect_len);
			r->ai_connect_len = h.ai_connect_len;
		}
	}
	freeaddrinfo(ai);
	if ((passive && !r->ai_src_addr) || (!passive && !r->ai_dst_addr)) {
		rdma_freeaddrinfo(r);
		errno = ENOMEM;
		return EAI_MEMORY;
	}
	*res = r;
	return 0;
}
