/*
 * softrdma's librdmacm.so.1: rdma-core 44's librdmacm API for unmodified C
 * programs (rping, ucmatose, udaddy, perftest -R) over softrdma's devices.
 *
 * This file owns the C side: the rdma_cm_id and event structs as the
 * installed <rdma/rdma_cma.h> lays them out, the event channels (pipes,
 * so rdma_get_cm_event blocks and poll() works), the QPs rdma_create_qp
 * makes through the public libibverbs API, rdma_getaddrinfo. Connection
 * management itself runs in softrdma's Go cm package inside
 * libibverbs.so.1, reached through its private srdgo_cm_* exports
 * (clib/libsoftrdma/cm.go): one Go runtime per process.
 *
 * Calls return -1 and set errno on failure, as librdmacm's do.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "rdmacm.h"
#include "srderrno.h"
#include "forked.h"

#define SRD_EXPORT __attribute__((visibility("default")))

/* The layouts programs compiled against rdma-core 44 use. */
_Static_assert(offsetof(struct rdma_cm_id, verbs) == 0, "rdma_cm_id.verbs");
_Static_assert(offsetof(struct rdma_cm_id, route) == 32, "rdma_cm_id.route");
_Static_assert(sizeof(struct rdma_addr) == 2 * 128 + 40, "rdma_addr");
_Static_assert(offsetof(struct rdma_cm_event, param) == 24, "rdma_cm_event.param");
_Static_assert(offsetof(struct rdma_conn_param, qp_num) == 16, "rdma_conn_param.qp_num");
_Static_assert(offsetof(struct srd_cm_id, id) == 0, "srd_cm_id.id first");

/* An event as rdma_get_cm_event hands it out: the public struct, then
   the private data it points to. */
struct srd_cm_event {
	struct rdma_cm_event ev;
	uint8_t pdata[SRD_CM_PDATA_MAX];
};

static inline struct srd_cm_id *srd_id(struct rdma_cm_id *id)
{
	return (struct srd_cm_id *)id;
}

/* ---- devices: librdmacm opens every device once, as rdma-core's does ---- */

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context **devs;
static int ndevs;

static int open_devices(void)
{
	struct ibv_device **list;
	int i, n, err = 0;

	pthread_mutex_lock(&dev_mu);
	if (devs) {
		pthread_mutex_unlock(&dev_mu);
		return 0;
	}
	list = ibv_get_device_list(&n);
	if (!list) {
		err = errno ? errno : ENODEV;
		pthread_mutex_unlock(&dev_mu);
		return err;
	}
	devs = calloc(n + 1, sizeof(*devs));
	if (!devs) {
		ibv_free_device_list(list);
		pthread_mutex_unlock(&dev_mu);
		return ENOMEM;
	}
	for (i = 0; i < n; i++) {
		/* The shared-memory devices find peers by service, not by
		   address: rdma_cm's address resolution does not reach them. */
		if (!strncmp(ibv_get_device_name(list[i]), "shm", 3))
			continue;
		struct ibv_context *c = ibv_open_device(list[i]);
		if (!c)
			continue;
		if (srdgo_cm_register_ctx(c)) {
			ibv_close_device(c);
			continue;
		}
		devs[ndevs++] = c;
	}
	ibv_free_device_list(list);
	if (!ndevs)
		err = ENODEV;
	pthread_mutex_unlock(&dev_mu);
	return err;
}

SRD_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **out;
	int err = open_devices();

	if (err && err != ENODEV)
		return srd_fail_ptr(err);
	out = calloc(ndevs + 1, sizeof(*out));
	if (!out)
		return srd_fail_ptr(ENOMEM);
	memcpy(out, devs, ndevs * sizeof(*out));
	if (num_devices)
		*num_devices = ndevs;
	return out;
}

SRD_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* ---- event channels ---- */

struct srd_channel {
	struct rdma_event_channel ch; /* ch.fd is the read end */
	int wfd;
};

SRD_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct srd_channel *c;
	int fds[2], err;

	if ((err = open_devices()) != 0)
		return srd_fail_ptr(err);
	if (!(c = srd_alloc_pipe(sizeof(*c), fds)))
		return NULL;
	c->ch.fd = fds[0];
	c->wfd = fds[1];
	return &c->ch;
}

SRD_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct srd_channel *c = (struct srd_channel *)channel;

	if (!c)
		return;
	srdgo_cm_close_fd(c->wfd);
	close(c->ch.fd);
	close(c->wfd);
	free(c);
}

static int wfd_of(struct rdma_event_channel *ch)
{
	return ((struct srd_channel *)ch)->wfd;
}

/* ---- ids ---- */

static int qp_type_of(enum rdma_port_space ps)
{
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
		return IBV_QPT_RC;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		return IBV_QPT_UD;
	}
	return -1;
}

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **out,
		     void *context, enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct srd_cm_id *id;
	int err;

	if (!out)
		return srd_fail(EINVAL);
	if (qp_type_of(ps) < 0 || ps == RDMA_PS_IPOIB)
		return srd_fail(EPROTONOSUPPORT);
	id = calloc(1, sizeof(*id));
	if (!id)
		return srd_fail(ENOMEM);
	if (!channel) {
		/* Synchronous: the calls wait for their own events. */
		channel = rdma_create_event_channel();
		if (!channel) {
			err = errno;
			free(id);
			return srd_fail(err);
		}
		id->sync = 1;
	}
	id->id.channel = channel;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qpt;
	err = srdgo_cm_create_id(id, ps, qpt, wfd_of(channel), &id->h);
	if (err) {
		if (id->sync)
			rdma_destroy_event_channel(channel);
		free(id);
		return srd_fail(err);
	}
	*out = &id->id;
	return 0;
}

SRD_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			      void *context, enum rdma_port_space ps)
{
	int t = qp_type_of(ps);

	return create_id(channel, id, context, ps, t < 0 ? IBV_QPT_RC : t);
}

SRD_EXPORT int rdma_destroy_id(struct rdma_cm_id *cid)
{
	struct srd_cm_id *id = srd_id(cid);

	if (!cid)
		return srd_fail(EINVAL);
	srdgo_cm_destroy_id(id->h);
	if (id->pending)
		free(id->pending);
	if (id->sync)
		rdma_destroy_event_channel(cid->channel);
	free(id);
	return 0;
}

SRD_EXPORT int rdma_migrate_id(struct rdma_cm_id *cid, struct rdma_event_channel *channel)
{
	struct srd_cm_id *id = srd_id(cid);
	struct rdma_event_channel *old;
	int err, sync = 0;

	if (!cid)
		return srd_fail(EINVAL);
	if (!channel) {
		/* Synchronous from now on: a channel of its own. */
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	err = srdgo_cm_set_fd(id->h, wfd_of(channel));
	if (err) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return srd_fail(err);
	}
	old = cid->channel;
	cid->channel = channel;
	if (id->sync)
		rdma_destroy_event_channel(old);
	id->sync = sync;
	return 0;
}

/* ---- addresses ---- */

/* addr_from_sa reads an address argument; none is the zero address. */
static int addr_from_sa(const struct sockaddr *sa, struct srd_cm_addr *a)
{
	if (!sa) {
		memset(a, 0, sizeof(*a));
		return 0;
	}
	return srd_addr_in(sa, sizeof(struct sockaddr_storage), a);
}

static void apply_route(struct rdma_cm_id *cid, const struct srd_cm_route *r, const struct sockaddr *dst)
{
	cid->verbs = r->verbs;
	cid->port_num = r->verbs ? 1 : 0;
	srd_sockaddr(&cid->route.addr.src_storage, &r->src);
	if (dst) {
		memset(&cid->route.addr.dst_storage, 0, sizeof(cid->route.addr.dst_storage));
		memcpy(&cid->route.addr.dst_storage, dst,
		       dst->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	}
	memcpy(cid->route.addr.addr.ibaddr.sgid.raw, r->sgid, 16);
	memcpy(cid->route.addr.addr.ibaddr.dgid.raw, r->dgid, 16);
	cid->route.addr.addr.ibaddr.pkey = htons(0xffff);
}

SRD_EXPORT int rdma_bind_addr(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	struct srd_cm_addr a;
	struct srd_cm_route r;
	int err;

	if (!cid || !addr)
		return srd_fail(EINVAL);
	if ((err = addr_from_sa(addr, &a)) != 0)
		return srd_fail(err);
	if ((err = srdgo_cm_bind(srd_id(cid)->h, &a, &r)) != 0)
		return srd_fail(err);
	apply_route(cid, &r, NULL);
	return 0;
}

/* wait_event: a synchronous id's call waits for its event; anything but
   the expected one fails with the event's status. */
static int wait_event(struct rdma_cm_id *cid, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	int status, type;

	if (!srd_id(cid)->sync)
		return 0;
	if (rdma_get_cm_event(cid->channel, &ev))
		return -1;
	type = ev->event;
	status = ev->status;
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST && want == RDMA_CM_EVENT_CONNECT_REQUEST)
		return 0; /* rdma_get_request keeps it */
	rdma_ack_cm_event(ev);
	if (type == (int)want)
		return 0;
	if (type == RDMA_CM_EVENT_REJECTED)
		return srd_fail(ECONNREFUSED);
	return srd_fail(status < 0 ? -status : (status ? status : EIO));
}

SRD_EXPORT int rdma_resolve_addr(struct rdma_cm_id *cid, struct sockaddr *src_addr,
				 struct sockaddr *dst_addr, int timeout_ms)
{
	struct srd_cm_addr s, d;
	struct srd_cm_route r;
	int err;

	(void)timeout_ms;
	if (!cid || !dst_addr)
		return srd_fail(EINVAL);
	if ((err = addr_from_sa(src_addr, &s)) != 0 || (err = addr_from_sa(dst_addr, &d)) != 0)
		return srd_fail(err);
	memset(&r, 0, sizeof(r));
	if ((err = srdgo_cm_resolve_addr(srd_id(cid)->h, &s, &d, &r)) != 0)
		return srd_fail(err);
	if (r.verbs)
		apply_route(cid, &r, dst_addr);
	return wait_event(cid, RDMA_CM_EVENT_ADDR_RESOLVED);
}

SRD_EXPORT int rdma_resolve_route(struct rdma_cm_id *cid, int timeout_ms)
{
	int err;

	(void)timeout_ms;
	if (!cid)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_resolve_route(srd_id(cid)->h)) != 0)
		return srd_fail(err);
	return wait_event(cid, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

SRD_EXPORT int rdma_listen(struct rdma_cm_id *cid, int backlog)
{
	uint16_t port = 0;
	int err;

	if (!cid)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_listen(srd_id(cid)->h, backlog, &port)) != 0)
		return srd_fail(err);
	if (cid->route.addr.src_addr.sa_family == AF_INET)
		cid->route.addr.src_sin.sin_port = htons(port);
	else if (cid->route.addr.src_addr.sa_family == AF_INET6)
		cid->route.addr.src_sin6.sin6_port = htons(port);
	return 0;
}

/* sa_port is an IPv4 or IPv6 address's port, network order (0 for
   other families). */
static __be16 sa_port(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)sa)->sin_port;
	case AF_INET6:
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	}
	return 0;
}

SRD_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *cid)
{
	return cid ? sa_port(&cid->route.addr.src_addr) : 0;
}

SRD_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *cid)
{
	return cid ? sa_port(&cid->route.addr.dst_addr) : 0;
}

/* ---- QPs ---- */

/* ready_qp moves a new QP to INIT (RC, UC) or to RTS (UD), as librdmacm
   does: receives may be posted before connecting, and a UD QP sends as
   soon as the peer's QPN is known. */
static int ready_qp(struct rdma_cm_id *cid, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = cid->port_num ? cid->port_num : 1;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = RDMA_UDP_QKEY;
		if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
			return err;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
			return err;
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int create_cqs(struct rdma_cm_id *cid, int send_size, int recv_size)
{
	cid->send_cq = ibv_create_cq(cid->verbs, send_size ? send_size : 1, cid, NULL, 0);
	if (!cid->send_cq)
		return errno;
	cid->recv_cq = ibv_create_cq(cid->verbs, recv_size ? recv_size : 1, cid, NULL, 0);
	if (!cid->recv_cq) {
		int err = errno;
		ibv_destroy_cq(cid->send_cq);
		cid->send_cq = NULL;
		return err;
	}
	srd_id(cid)->own_cqs = 1;
	return 0;
}

static void destroy_owned(struct rdma_cm_id *cid)
{
	struct srd_cm_id *id = srd_id(cid);

	if (id->own_cqs) {
		if (cid->recv_cq)
			ibv_destroy_cq(cid->recv_cq);
		if (cid->send_cq)
			ibv_destroy_cq(cid->send_cq);
		cid->send_cq = cid->recv_cq = NULL;
		id->own_cqs = 0;
	}
	if (id->own_pd && cid->pd) {
		ibv_dealloc_pd(cid->pd);
		cid->pd = NULL;
		id->own_pd = 0;
	}
}

/* id_pd is the id's PD, allocated (and owned by the id) on first use. */
static struct ibv_pd *id_pd(struct rdma_cm_id *cid)
{
	if (!cid->pd) {
		cid->pd = ibv_alloc_pd(cid->verbs);
		if (!cid->pd)
			return NULL;
		srd_id(cid)->own_pd = 1;
	}
	return cid->pd;
}

SRD_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp *qp;
	int err;

	if (!cid || !attr)
		return srd_fail(EINVAL);
	if (!cid->verbs)
		return srd_fail(EINVAL); /* no device yet: resolve or bind to an address first */
	if (cid->qp)
		return srd_fail(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		if (!(attr->pd = id_pd(cid)))
			return -1;
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (attr->pd->context != cid->verbs)
		return srd_fail(EINVAL);
	if (!attr->send_cq && !attr->recv_cq && !cid->send_cq &&
	    (err = create_cqs(cid, attr->cap.max_send_wr, attr->cap.max_recv_wr)) != 0) {
		destroy_owned(cid);
		return srd_fail(err);
	}
	if (!attr->send_cq)
		attr->send_cq = cid->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = cid->recv_cq;
	if (!attr->srq && cid->srq)
		attr->srq = cid->srq;
	qp = ibv_create_qp_ex(cid->verbs, attr);
	if (!qp) {
		err = errno;
		destroy_owned(cid);
		return srd_fail(err);
	}
	if ((err = ready_qp(cid, qp)) != 0) {
		ibv_destroy_qp(qp);
		destroy_owned(cid);
		return srd_fail(err);
	}
	cid->qp = qp;
	cid->qp_type = qp->qp_type;
	return 0;
}

SRD_EXPORT int rdma_create_qp(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex a;
	int ret;

	if (!cid || !qp_init_attr)
		return srd_fail(EINVAL);
	memset(&a, 0, sizeof(a));
	memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
	a.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0;
	a.pd = pd;
	ret = rdma_create_qp_ex(cid, &a);
	if (!ret) {
		qp_init_attr->cap = a.cap;
		qp_init_attr->send_cq = a.send_cq;
		qp_init_attr->recv_cq = a.recv_cq;
	}
	return ret;
}

SRD_EXPORT void rdma_destroy_qp(struct rdma_cm_id *cid)
{
	if (!cid || !cid->qp)
		return;
	ibv_destroy_qp(cid->qp);
	cid->qp = NULL;
	destroy_owned(cid);
}

SRD_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *cid, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq_init_attr a;

	if (!cid || !attr || !cid->verbs)
		return srd_fail(EINVAL);
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return srd_fail(EOPNOTSUPP);
	if ((!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) && !(attr->pd = id_pd(cid)))
		return -1;
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	cid->srq = ibv_create_srq(attr->pd, &a);
	if (!cid->srq)
		return -1;
	attr->attr = a.attr;
	return 0;
}

SRD_EXPORT int rdma_create_srq(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex a;
	int ret;

	if (!cid || !attr)
		return srd_fail(EINVAL);
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	a.pd = pd;
	a.comp_mask = pd ? IBV_SRQ_INIT_ATTR_PD : 0;
	ret = rdma_create_srq_ex(cid, &a);
	if (!ret)
		attr->attr = a.attr;
	return ret;
}

SRD_EXPORT void rdma_destroy_srq(struct rdma_cm_id *cid)
{
	if (!cid || !cid->srq)
		return;
	ibv_destroy_srq(cid->srq);
	cid->srq = NULL;
}

/* ---- connecting ---- */

SRD_EXPORT int rdma_connect(struct rdma_cm_id *cid, struct rdma_conn_param *conn_param)
{
	int err;

	if (!cid)
		return srd_fail(EINVAL);
	if (conn_param && conn_param->private_data_len && !conn_param->private_data)
		return srd_fail(EINVAL);
	if (!cid->qp && !conn_param)
		return srd_fail(EINVAL); /* no QP, and no conn_param->qp_num naming the program's */
	if ((err = srdgo_cm_connect(srd_id(cid)->h, cid->qp, conn_param)) != 0)
		return srd_fail(err);
	/* Without a QP on the id, the program moves its own QP on the
	   connect response and then calls rdma_establish. */
	return wait_event(cid, cid->qp ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_CONNECT_RESPONSE);
}

SRD_EXPORT int rdma_accept(struct rdma_cm_id *cid, struct rdma_conn_param *conn_param)
{
	int err;

	if (!cid)
		return srd_fail(EINVAL);
	if (conn_param && conn_param->private_data_len && !conn_param->private_data)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_accept(srd_id(cid)->h, cid->qp, conn_param)) != 0)
		return srd_fail(err);
	if (cid->qp_type == IBV_QPT_UD || (cid->qp && cid->qp->qp_type == IBV_QPT_UD))
		return 0;
	return wait_event(cid, RDMA_CM_EVENT_ESTABLISHED);
}

SRD_EXPORT int rdma_reject(struct rdma_cm_id *cid, const void *private_data, uint8_t private_data_len)
{
	int err;

	if (!cid)
		return srd_fail(EINVAL);
	if (private_data_len && !private_data)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_reject(srd_id(cid)->h, (void *)private_data, private_data_len)) != 0)
		return srd_fail(err);
	return 0;
}

SRD_EXPORT int rdma_disconnect(struct rdma_cm_id *cid)
{
	int err;

	if (!cid)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_disconnect(srd_id(cid)->h)) != 0)
		return srd_fail(err);
	return 0;
}

SRD_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;

	if (!listen || !id)
		return srd_fail(EINVAL);
	if (!srd_id(listen)->sync)
		return srd_fail(EINVAL); /* only for ids created without a channel */
	for (;;) {
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev);
	}
	*id = ev->id;
	/* The new id is synchronous too: a channel of its own. */
	if (rdma_migrate_id(ev->id, NULL)) {
		rdma_ack_cm_event(ev);
		return -1;
	}
	srd_id(ev->id)->sync = 1;
	ev->id->event = ev;
	return 0;
}

/* ---- events ---- */

SRD_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct srd_cm_evinfo info;
	struct srd_cm_event *e;
	uint64_t h;
	ssize_t n;
	int err;

	if (!channel || !event)
		return srd_fail(EINVAL);
	if (srd_forked)
		return srd_fail(ENODEV); /* the parent's pipe (forked.h) */
	for (;;) {
		n = read(channel->fd, &h, sizeof(h));
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (n < 0 && errno == EBADF)) {
			/* Another thread destroyed the channel while this one
			   waited (n == 0: the write end closed under a blocked
			   read) or just before it came back to wait (EBADF:
			   rping's event thread at exit, after handling the
			   DISCONNECT, while its main thread destroys the id and
			   the channel). With rdma-core the read stays blocked,
			   so it does here. */
			for (;;)
				pause();
		}
		if (n < 0)
			return -1; /* EAGAIN on a non-blocking channel */
		if (n != sizeof(h))
			return srd_fail(EIO);
		err = srdgo_cm_event((uintptr_t)h, &info);
		if (err == ENOENT)
			continue; /* for an id destroyed since */
		if (err)
			return srd_fail(err);
		break;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return srd_fail(ENOMEM);
	e->ev.id = &info.id->id;
	e->ev.event = info.event;
	e->ev.status = info.status;
	memcpy(e->pdata, info.pdata, info.pdata_len);
	if (info.child) {
		struct srd_cm_id *child = calloc(1, sizeof(*child));
		if (!child) {
			srdgo_cm_destroy_id(info.child);
			free(e);
			return srd_fail(ENOMEM);
		}
		child->h = info.child;
		child->id.verbs = info.verbs;
		child->id.channel = info.id->id.channel;
		child->id.context = info.id->id.context;
		child->id.ps = info.id->id.ps;
		child->id.qp_type = info.ud ? IBV_QPT_UD : IBV_QPT_RC;
		child->id.port_num = info.port_num;
		srd_sockaddr(&child->id.route.addr.src_storage, &info.src);
		srd_sockaddr(&child->id.route.addr.dst_storage, &info.dst);
		child->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
		srdgo_cm_child_bind(child->h, child);
		e->ev.id = &child->id;
		e->ev.listen_id = &info.id->id;
	}
	if (info.ud) {
		struct rdma_ud_param *u = &e->ev.param.ud;
		u->private_data = info.pdata_len ? e->pdata : NULL;
		u->private_data_len = info.pdata_len;
		u->qp_num = info.qp_num;
		u->qkey = info.qkey;
		if (info.event == RDMA_CM_EVENT_ESTABLISHED) {
			u->ah_attr.is_global = 1;
			u->ah_attr.port_num = info.port_num;
			u->ah_attr.dlid = 0;
			memcpy(u->ah_attr.grh.dgid.raw, info.dgid, 16);
			u->ah_attr.grh.sgid_index = info.sgid_index;
			u->ah_attr.grh.hop_limit = info.hop_limit;
		}
	} else {
		struct rdma_conn_param *c = &e->ev.param.conn;
		c->private_data = info.pdata_len ? e->pdata : NULL;
		c->private_data_len = info.pdata_len;
		c->responder_resources = info.responder_resources;
		c->initiator_depth = info.initiator_depth;
		c->retry_count = info.retry_count;
		c->rnr_retry_count = info.rnr_retry_count;
		c->flow_control = 1;
		c->qp_num = info.qp_num; /* the peer's QP */
	}
	*event = &e->ev;
	return 0;
}

SRD_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return srd_fail(EINVAL);
	if (event->id && event->id->event == event)
		event->id->event = NULL;
	free(event);
	return 0;
}

SRD_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	}
	return "UNKNOWN EVENT";
}

/* ---- options and what softrdma does not provide ---- */

SRD_EXPORT int rdma_set_option(struct rdma_cm_id *cid, int level, int optname, void *optval, size_t optlen)
{
	int err;

	if (!cid || (!optval && optlen))
		return srd_fail(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			/* Listeners share nothing with other ids of the
			   process; IPv6 ids take only IPv6 peers. */
			return optlen == sizeof(int) ? 0 : srd_fail(EINVAL);
		case RDMA_OPTION_ID_TOS:
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			/* The GRH traffic class of the connection (set before
			   rdma_connect: the REQ carries it to the peer), and
			   this side's QP ACK timeout code. */
			if (optlen != sizeof(uint8_t))
				return srd_fail(EINVAL);
			if ((err = srdgo_cm_set_option(srd_id(cid)->h, optname, *(uint8_t *)optval)) != 0)
				return srd_fail(err);
			return 0;
		}
		return srd_fail(EINVAL);
	}
	if (level == RDMA_OPTION_IB)
		return srd_fail(ENOSYS); /* explicit path records: RoCE resolves its own path from the addresses */
	return srd_fail(EINVAL);
}

SRD_EXPORT int rdma_notify(struct rdma_cm_id *cid, enum ibv_event_type event)
{
	if (!cid)
		return srd_fail(EINVAL);
	/* The CM establishes on the RTU (or its loss) by itself. */
	return event == IBV_EVENT_COMM_EST ? 0 : srd_fail(EINVAL);
}

/* rdma_establish answers the connect response of an id without a QP
   (the program moved its own with rdma_init_qp_attr): the RTU goes to
   the passive side, which gets ESTABLISHED; this side gets no event. */
SRD_EXPORT int rdma_establish(struct rdma_cm_id *cid)
{
	int err;

	if (!cid || cid->qp)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_establish(srd_id(cid)->h)) != 0)
		return srd_fail(err);
	return 0;
}

/* rdma_init_qp_attr fills the attributes and mask that move the
   program's QP to qp_attr->qp_state (INIT, RTR, RTS) for this id's
   connection: what the connect request (passive side) or response
   (active side) agreed, as the kernel's rdma_cm does. */
SRD_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *cid, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	int err;

	if (!cid || !qp_attr || !qp_attr_mask)
		return srd_fail(EINVAL);
	if ((err = srdgo_cm_init_qp_attr(srd_id(cid)->h, qp_attr, qp_attr_mask)) != 0)
		return srd_fail(err);
	return 0;
}

SRD_EXPORT int rdma_join_multicast(struct rdma_cm_id *cid, struct sockaddr *addr, void *context)
{
	(void)cid; (void)addr; (void)context;
	return srd_fail(ENOSYS);
}

SRD_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *cid, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	(void)cid; (void)attr; (void)context;
	return srd_fail(ENOSYS);
}

SRD_EXPORT int rdma_leave_multicast(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	(void)cid; (void)addr;
	return srd_fail(ENOSYS);
}

SRD_EXPORT int rdma_set_local_ece(struct rdma_cm_id *cid, struct ibv_ece *ece)
{
	if (!cid || !ece)
		return srd_fail(EINVAL);
	return srd_fail(EOPNOTSUPP);
}

SRD_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *cid, struct ibv_ece *ece)
{
	if (!cid || !ece)
		return srd_fail(EINVAL);
	return srd_fail(EOPNOTSUPP);
}

SRD_EXPORT int rdma_reject_ece(struct rdma_cm_id *cid, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(cid, private_data, private_data_len);
}

/* ---- endpoints ---- */

SRD_EXPORT int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res,
			      struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	int err;

	if (!out || !res)
		return srd_fail(EINVAL);
	if (create_id(NULL, &cid, NULL, res->ai_port_space ? res->ai_port_space : RDMA_PS_TCP,
		      res->ai_qp_type ? res->ai_qp_type : IBV_QPT_RC))
		return -1;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(cid, res->ai_src_addr))
			goto err;
	} else {
		if (rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000) ||
		    rdma_resolve_route(cid, 2000))
			goto err;
	}
	if (qp_init_attr) {
		if (!cid->verbs) {
			errno = EINVAL;
			goto err;
		}
		qp_init_attr->qp_type = cid->qp_type;
		if (rdma_create_qp(cid, pd, qp_init_attr))
			goto err;
	}
	*out = cid;
	return 0;
err:
	err = errno;
	rdma_destroy_ep(cid);
	return srd_fail(err);
}

SRD_EXPORT void rdma_destroy_ep(struct rdma_cm_id *cid)
{
	if (!cid)
		return;
	rdma_destroy_qp(cid);
	rdma_destroy_srq(cid);
	rdma_destroy_id(cid);
}
