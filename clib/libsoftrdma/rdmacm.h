//go:build clib

/*
 * What softrdma's librdmacm.so.1 (clib/librdmacm) and the Go side of
 * libibverbs.so.1 (clib/libsoftrdma/cm.go) share: the C wrapper of an
 * rdma_cm_id, the description of one event that the Go side hands to
 * rdma_get_cm_event, and the private entry points librdmacm.so.1 calls
 * (exported by libibverbs.so.1 under the version SOFTRDMA_PRIVATE_1, so
 * one Go runtime serves both libraries).
 *
 * Events travel through a pipe per event channel: the Go side writes one
 * 8-byte handle per event into the channel's pipe, rdma_get_cm_event
 * reads it (so it blocks, and poll() on channel->fd works) and asks the
 * Go side for the event with srdgo_cm_event.
 */
#ifndef SOFTRDMA_RDMACM_H
#define SOFTRDMA_RDMACM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>

/* The private data of any CM message fits (a REP's is 196 bytes). */
#define SRD_CM_PDATA_MAX 256

struct srd_cm_id {
	struct rdma_cm_id id;
	uintptr_t h;      /* the Go side's handle of the id */
	int sync;         /* created without a channel: calls wait for their event */
	int own_pd;       /* id.pd was allocated by rdma_create_qp */
	int own_cqs;      /* id.send_cq/recv_cq were created by rdma_create_qp */
	struct rdma_cm_event *pending; /* a sync id's CONNECT_REQUEST (rdma_get_request) */
};

/* An address as the Go side reports it: family AF_INET or AF_INET6 (0: none). */
struct srd_cm_addr {
	int family;
	uint16_t port;     /* host order */
	uint8_t addr[16];  /* 4 bytes for AF_INET */
};

/* One event, filled by srdgo_cm_event. */
struct srd_cm_evinfo {
	struct srd_cm_id *id;      /* the id the event is for (the listener's for CONNECT_REQUEST) */
	int event;                 /* enum rdma_cm_event_type */
	int status;
	/* CONNECT_REQUEST: the new id's Go handle, device and addresses. */
	uintptr_t child;
	struct ibv_context *verbs;
	struct srd_cm_addr src, dst;
	/* The parameters (param.conn or param.ud) without the private data. */
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq, flow_control;
	uint32_t qp_num, qkey;
	int ud;                     /* param.ud is meant */
	uint8_t dgid[16];
	uint8_t sgid_index, hop_limit, port_num;
	uint8_t pdata_len;
	uint8_t pdata[SRD_CM_PDATA_MAX];
};

/* The route an id resolved to or is bound on, filled by the Go side. */
struct srd_cm_route {
	struct ibv_context *verbs;  /* NULL: bound to the unspecified address */
	struct srd_cm_addr src;
	uint8_t sgid[16], dgid[16];
};

#ifndef SRD_CM_GO /* cgo declares them itself */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

/* srd_addr_in reads an IPv4 or IPv6 sockaddr of len bytes into a: 0,
   EFAULT (none), EINVAL (shorter than its family's), EAFNOSUPPORT. */
static inline int srd_addr_in(const struct sockaddr *sa, socklen_t len, struct srd_cm_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (!sa)
		return EFAULT;
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s = (const void *)sa;
		a->family = AF_INET;
		a->port = ntohs(s->sin_port);
		memcpy(a->addr, &s->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s = (const void *)sa;
		a->family = AF_INET6;
		a->port = ntohs(s->sin6_port);
		memcpy(a->addr, &s->sin6_addr, 16);
		return 0;
	}
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
		return EINVAL;
	return EAFNOSUPPORT;
}

/* srd_sockaddr writes a into ss as a sockaddr and returns its length
   (0, and ss zeroed, when a has no address). */
static inline socklen_t srd_sockaddr(struct sockaddr_storage *ss, const struct srd_cm_addr *a)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *s = (void *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->addr, 4);
		return sizeof(*s);
	}
	if (a->family == AF_INET6) {
		struct sockaddr_in6 *s = (void *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(a->port);
		memcpy(&s->sin6_addr, a->addr, 16);
		return sizeof(*s);
	}
	return 0;
}

/* Go side entry points (clib/libsoftrdma/cm.go); errno-style returns:
   0, or the positive errno. */
int srdgo_cm_register_ctx(struct ibv_context *ctx);
int srdgo_cm_create_id(struct srd_cm_id *id, int ps, int qp_type, int fd, uintptr_t *h);
int srdgo_cm_set_fd(uintptr_t h, int fd);
void srdgo_cm_close_fd(int fd);
void srdgo_cm_destroy_id(uintptr_t h);
int srdgo_cm_child_bind(uintptr_t h, struct srd_cm_id *id);
int srdgo_cm_bind(uintptr_t h, struct srd_cm_addr *a, struct srd_cm_route *r);
int srdgo_cm_resolve_addr(uintptr_t h, struct srd_cm_addr *src, struct srd_cm_addr *dst, struct srd_cm_route *r);
int srdgo_cm_resolve_route(uintptr_t h);
int srdgo_cm_listen(uintptr_t h, int backlog, uint16_t *port);
int srdgo_cm_connect(uintptr_t h, struct ibv_qp *qp, struct rdma_conn_param *p);
int srdgo_cm_accept(uintptr_t h, struct ibv_qp *qp, struct rdma_conn_param *p);
int srdgo_cm_reject(uintptr_t h, void *pdata, int len);
int srdgo_cm_disconnect(uintptr_t h);
int srdgo_cm_event(uintptr_t ev, struct srd_cm_evinfo *info);
int srdgo_cm_establish(uintptr_t h);
int srdgo_cm_init_qp_attr(uintptr_t h, struct ibv_qp_attr *attr, int *mask);
int srdgo_cm_set_option(uintptr_t h, int name, uint8_t value);
#endif

#endif
