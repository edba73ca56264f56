//go:build clib

/*
 * libibverbs.so.1's exported functions and the context ops table.
 *
 * Every function here checks its arguments the way rdma-core's libibverbs
 * does, allocates the public struct the program sees (laid out by the
 * installed <infiniband/verbs.h>), and calls one Go function (srdgo_*,
 * exports.go) that does the work on softrdma's verbs API. The Go functions
 * return an errno value; this file turns it into the convention of each
 * libibverbs function (NULL with errno set, -1 with errno set, or the errno
 * value returned).
 *
 * The data path: the program's inline ibv_post_send / ibv_post_recv /
 * ibv_poll_cq / ibv_req_notify_cq call through ibv_context.ops, which
 * point at the srd_* trampolines below, one Go call each.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>

#include "ibverbs.h"
#include "srderrno.h"
#include "_cgo_export.h"
#include "forked.h"

/* The Go side reads these structs through cgo's view of the same header;
 * the build fails here if a layout the Go code assumes differs. */
_Static_assert(sizeof(struct ibv_sge) == 16, "ibv_sge is {u64 addr; u32 length; u32 lkey}");
_Static_assert(offsetof(struct ibv_sge, lkey) == 12, "ibv_sge.lkey");
_Static_assert(offsetof(struct ibv_send_wr, wr) == 40, "ibv_send_wr.wr union");
_Static_assert(offsetof(struct ibv_qp_ex, qp_base) == 0, "ibv_qp_ex starts with ibv_qp");
_Static_assert(offsetof(struct verbs_context, context) + sizeof(struct ibv_context) == sizeof(struct verbs_context),
	       "ibv_context ends verbs_context");

/* ---- fork() ---- */

/* srd_forked marks a child of fork(), where the Go runtime cannot run
 * (forked.h says what the entry points do there). */
volatile int srd_forked;

static void srd_atfork_child(void)
{
	srd_forked = 1;
}

__attribute__((constructor)) static void srd_fork_init(void)
{
	pthread_atfork(NULL, NULL, srd_atfork_child);
}

/* ---- devices ---- */

static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct srd_device **devs; /* kept for the life of the process, as rdma-core keeps its */
static int ndevs;

static int load_devices(void)
{
	int n, i;

	if (devs)
		return 0;
	n = srdgo_dev_count();
	if (n < 0)
		return -n;
	devs = calloc(n + 1, sizeof(*devs));
	if (!devs)
		return ENOMEM;
	for (i = 0; i < n; i++) {
		struct srd_device *d = calloc(1, sizeof(*d));
		uint64_t guid = 0;

		if (!d)
			return ENOMEM;
		d->index = i;
		d->dev.node_type = IBV_NODE_CA;
		d->dev.transport_type = IBV_TRANSPORT_IB;
		srdgo_dev_info(i, d->dev.name, sizeof(d->dev.name), &guid);
		d->guid = guid;
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
		snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", d->dev.name);
		devs[i] = d;
		ndevs = i + 1;
	}
	return 0;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;
	int err, i;

	if (num_devices)
		*num_devices = 0;
	pthread_mutex_lock(&dev_mu);
	err = load_devices();
	if (err) {
		pthread_mutex_unlock(&dev_mu);
		return srd_fail_ptr(err);
	}
	list = calloc(ndevs + 1, sizeof(*list));
	if (!list) {
		pthread_mutex_unlock(&dev_mu);
		return srd_fail_ptr(ENOMEM);
	}
	for (i = 0; i < ndevs; i++)
		list[i] = &devs[i]->dev;
	if (num_devices)
		*num_devices = ndevs;
	pthread_mutex_unlock(&dev_mu);
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	if (!device)
		return srd_fail_ptr(EINVAL);
	return device->name;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	if (!device)
		return 0;
	return htobe64(SRD_CONTAINER(device, struct srd_device, dev)->guid);
}

int ibv_get_device_index(struct ibv_device *device)
{
	if (!device)
		return -1;
	return SRD_CONTAINER(device, struct srd_device, dev)->index;
}

/* ---- ops trampolines ---- */

/*
 * The idle policy of a C busy poller, the one softrdma's Go pollers follow
 * (internal/spin): every SRD_YIELD_EVERY consecutive empty receive
 * attempts of a thread, sched_yield gives the CPU to other runnable
 * threads, and returns at once when there are none. C programs such as
 * perftest spin on ibv_poll_cq without ever yielding; on a machine with fewer CPUs than
 * busy threads (the peer process, the device's receive loop, other load)
 * such a spinner keeps the CPU for its whole time slice while the thread
 * that would complete its work waits for it: milliseconds per message.
 */
#define SRD_YIELD_EVERY 64
static __thread unsigned srd_empty_polls;

/* srd_cq_poll polls q's completions in Go: ibv_poll_cq's work, the
 * arguments checked. */
int srd_cq_poll(struct srd_cq *q, int n, struct ibv_wc *wc)
{
	int got, tries = 1;

	got = srdgo_poll_cq(q->h, n, wc, &tries);
	if (got != 0 || n == 0) {
		srd_empty_polls = 0;
		return got;
	}
	/* One call may have received several times (emptyPollTries). */
	srd_empty_polls += tries;
	if (srd_empty_polls >= SRD_YIELD_EVERY) {
		srd_empty_polls = 0;
		sched_yield();
	}
	return 0;
}

static int srd_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct srd_cq *q = SRD_CONTAINER(cq, struct srd_cq, cq);

	if (n < 0 || (n > 0 && !wc))
		return -EINVAL;
	if (q->x)
		return srd_cqx_poll(q, n, wc);
	return srd_cq_poll(q, n, wc);
}

static int srd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return srdgo_req_notify_cq(SRD_CONTAINER(cq, struct srd_cq, cq)->h, solicited_only);
}

static int srd_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct ibv_send_wr *dummy;

	if (!bad)
		bad = &dummy;
	*bad = NULL;
	if (!wr)
		return 0;
	return srd_qp_post_send(SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base), wr, bad);
}

static int srd_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	if (!bad)
		bad = &dummy;
	*bad = NULL;
	if (!wr)
		return 0;
	return srd_qp_post_recv(SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base), wr, bad);
}

static int srd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *dummy;

	if (!bad)
		bad = &dummy;
	*bad = NULL;
	if (!wr)
		return 0;
	return srdgo_post_srq_recv(SRD_CONTAINER(srq, struct srd_srq, srq)->h, wr, bad);
}

/*
 * Memory windows. The Go object is the window; ibv_mw's rkey is the
 * program's copy, which ibv_bind_mw advances as rdma-core's rxe provider
 * does (a type 2 bind posted with IBV_WR_BIND_MW leaves it alone: the
 * program keeps the rkey it chose). Posted binds name the window by its
 * object, so a stale ibv_mw rkey does not fail them as it does on rxe.
 */
static struct ibv_mw *srd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct srd_mw *m;
	GoUintptr h = 0;
	GoUint32 rkey = 0;
	int err;

	if (!pd)
		return srd_fail_ptr(EINVAL);
	m = calloc(1, sizeof(*m));
	if (!m)
		return srd_fail_ptr(ENOMEM);
	err = srdgo_alloc_mw(SRD_CONTAINER(pd, struct srd_pd, pd)->h, (int)type, &h, &rkey);
	if (err) {
		free(m);
		return srd_fail_ptr(err);
	}
	m->h = h;
	m->mw.context = pd->context;
	m->mw.pd = pd;
	m->mw.rkey = rkey;
	m->mw.handle = (uint32_t)h;
	m->mw.type = type;
	return &m->mw;
}

static int srd_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	struct ibv_send_wr wr, *bad = NULL;
	int err;

	if (!qp || !mw || !bind)
		return EINVAL;
	if (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = bind->bind_info;
	err = qp->context->ops.post_send(qp, &wr, &bad);
	if (err)
		return err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}

static int srd_dealloc_mw(struct ibv_mw *mw)
{
	struct srd_mw *m;
	int err;

	if (!mw)
		return EINVAL;
	m = SRD_CONTAINER(mw, struct srd_mw, mw);
	err = srdgo_dealloc_mw(m->h);
	if (err)
		return err;
	free(m);
	return 0;
}

/* The offsets srdgo_post_send reads ibv_send_wr's bind_mw at. */
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.mw) == 80, "ibv_send_wr.bind_mw.mw");
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.rkey) == 88, "ibv_send_wr.bind_mw.rkey");
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.bind_info.mr) == 96, "ibv_send_wr.bind_mw.bind_info.mr");
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.bind_info.addr) == 104, "bind_info.addr");
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.bind_info.length) == 112, "bind_info.length");
_Static_assert(offsetof(struct ibv_send_wr, bind_mw.bind_info.mw_access_flags) == 120, "bind_info.mw_access_flags");

static int srd_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;
	int err;

	if (!ctx || !attr)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	err = srdgo_query_port(srd_ctx_of(ctx)->h, port, &a);
	if (err)
		return err;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

struct ibv_qp *srd_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
int srd_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			struct ibv_device_attr_ex *attr, size_t len);

/* ---- context ---- */

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct srd_ctx *c;
	struct ibv_context *ctx;
	int fds[2], err;
	GoUintptr h = 0;

	if (!device)
		return srd_fail_ptr(EINVAL);
	if (!(c = srd_alloc_pipe(sizeof(*c), fds)))
		return NULL;
	err = srdgo_open(SRD_CONTAINER(device, struct srd_device, dev)->index, fds[1], &h);
	if (err) {
		close(fds[0]);
		close(fds[1]);
		free(c);
		return srd_fail_ptr(err);
	}
	c->h = h;
	c->async_wfd = fds[1];
	c->vctx.sz = sizeof(c->vctx);
	c->vctx.query_port = srd_query_port_ex;
	c->vctx.create_qp_ex = srd_create_qp_ex;
	c->vctx.query_device_ex = srd_query_device_ex;
	c->vctx.create_cq_ex = srd_create_cq_ex;
	ctx = &c->vctx.context;
	ctx->device = device;
	/* No kernel command channel, but a real descriptor: programs dup it
	 * (rdma-core's tests do, before ibv_import_device, which is not
	 * supported) and would fail on -1 with EBADF instead. */
	ctx->cmd_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ctx->async_fd = fds[0];
	ctx->num_comp_vectors = 1;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->ops.poll_cq = srd_poll_cq;
	ctx->ops.req_notify_cq = srd_req_notify_cq;
	ctx->ops.post_send = srd_post_send;
	ctx->ops.post_recv = srd_post_recv;
	ctx->ops.post_srq_recv = srd_post_srq_recv;
	ctx->ops.alloc_mw = srd_alloc_mw;
	ctx->ops.bind_mw = srd_bind_mw;
	ctx->ops.dealloc_mw = srd_dealloc_mw;
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	struct srd_ctx *c;

	if (!ctx)
		return EINVAL;
	c = srd_ctx_of(ctx);
	srdgo_close(c->h);
	close(c->async_wfd);
	close(ctx->async_fd);
	if (ctx->cmd_fd >= 0)
		close(ctx->cmd_fd);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return 0;
}

struct srd_async_rec {
	uint32_t type;
	uint32_t port;
	uint64_t element;
};

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct srd_async_rec r;
	ssize_t n;

	if (!ctx || !event)
		return srd_fail(EINVAL);
	if (srd_forked)
		return srd_fail(ENODEV); /* the parent's pipe (forked.h) */
	n = read(ctx->async_fd, &r, sizeof(r));
	if (n != sizeof(r)) {
		if (n >= 0)
			errno = EIO; /* a short read; else read's errno (EAGAIN) */
		return -1;
	}
	event->event_type = r.type;
	switch (r.type) {
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
		event->element.port_num = r.port;
		break;
	default:
		event->element.qp = (struct ibv_qp *)(uintptr_t)r.element;
		break;
	}
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	if (!ctx || !attr)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	return srdgo_query_device(srd_ctx_of(ctx)->h, attr);
}

int srd_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;
	int err;

	if (!ctx || !attr || len < sizeof(attr->orig_attr))
		return EINVAL;
	if (input && input->comp_mask)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	err = srdgo_query_device(srd_ctx_of(ctx)->h, &a.orig_attr);
	if (err)
		return err;
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
	a.max_dm_size = 0;
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The symbol programs built before the port_attr grew call (verbs.h's
 * inline ibv_query_port calls query_port in verbs_context instead). Its
 * struct is ibv_port_attr up to link_layer. */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	struct ibv_port_attr a;
	int err;

	if (!ctx || !attr)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	err = srdgo_query_port(srd_ctx_of(ctx)->h, port, &a);
	if (err)
		return err;
	memcpy(attr, &a, offsetof(struct ibv_port_attr, flags));
	return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	int err;

	if (!ctx || !gid || index < 0)
		return srd_fail(EINVAL);
	err = srdgo_query_gid(srd_ctx_of(ctx)->h, port, index, gid->raw);
	if (err)
		return srd_fail(err);
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	int err;

	if (!ctx || !entry || flags || entry_size < sizeof(e) || port > 255)
		return EINVAL;
	memset(&e, 0, sizeof(e));
	err = srdgo_query_gid(srd_ctx_of(ctx)->h, port, index, e.gid.raw);
	if (err)
		return err;
	if (!e.gid.global.subnet_prefix && !e.gid.global.interface_id)
		return ENODATA;
	e.gid_index = index;
	e.port_num = port;
	e.gid_type = IBV_GID_TYPE_ROCE_V2;
	e.ndev_ifindex = srdgo_ifindex(srd_ctx_of(ctx)->h);
	memcpy(entry, &e, sizeof(e));
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct ibv_port_attr pa;
	size_t n = 0;
	int i, err;

	if (!ctx || (!entries && max_entries) || flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	memset(&pa, 0, sizeof(pa));
	err = srdgo_query_port(srd_ctx_of(ctx)->h, 1, &pa);
	if (err)
		return -err;
	for (i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry *e = (struct ibv_gid_entry *)((char *)entries + n * entry_size);

		if (n >= max_entries)
			return -EINVAL;
		if (_ibv_query_gid_ex(ctx, 1, i, e, 0, entry_size) == 0)
			n++;
	}
	return n;
}

/* The GID type as rdma-core's sysfs reading reports it: 0 is RoCE v1 / IB,
 * 1 RoCE v2. Every softrdma GID is RoCE v2. */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, uint32_t *type)
{
	union ibv_gid g;

	if (!ctx || !type)
		return srd_fail(EINVAL);
	if (srdgo_query_gid(srd_ctx_of(ctx)->h, port, index, g.raw))
		return srd_fail(EINVAL);
	*type = 1;
	return 0;
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	if (!ctx || !pkey || index < 0)
		return srd_fail(EINVAL);
	if (port != 1 || index != 0)
		return srd_fail(EINVAL);
	*pkey = htobe16(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	if (!ctx || port != 1)
		return -EINVAL;
	return be16toh(pkey) == 0xffff ? 0 : -ENOENT;
}

/* ---- PD, MR ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct srd_pd *p;
	GoUintptr h = 0;
	int err;

	if (!ctx)
		return srd_fail_ptr(EINVAL);
	p = calloc(1, sizeof(*p));
	if (!p)
		return srd_fail_ptr(ENOMEM);
	err = srdgo_alloc_pd(srd_ctx_of(ctx)->h, &h);
	if (err) {
		free(p);
		return srd_fail_ptr(err);
	}
	p->h = h;
	p->pd.context = ctx;
	p->pd.handle = (uint32_t)h;
	return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct srd_pd *p;
	int err;

	if (!pd)
		return EINVAL;
	p = SRD_CONTAINER(pd, struct srd_pd, pd);
	err = srdgo_dealloc_pd(p->h);
	if (err)
		return err;
	free(p);
	return 0;
}

#define SRD_ACCESS_KNOWN (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
			  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | \
			  IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE)

/* srd_mr_access_err checks a region's access flags as ibv_reg_mr does:
 * 0, or the errno. */
static int srd_mr_access_err(unsigned int access)
{
	if (access & ~SRD_ACCESS_KNOWN)
		return EINVAL;
	/* Remote write or atomic access needs local write (IBTA 10.6.3.1). */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	if (access & (IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND))
		return EOPNOTSUPP;
	return 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	struct srd_mr *m;
	GoUintptr h = 0;
	GoUint32 lkey = 0, rkey = 0;
	int err;

	if (!pd || (!addr && length))
		return srd_fail_ptr(EINVAL);
	if ((err = srd_mr_access_err(access)))
		return srd_fail_ptr(err);
	/* Only identity iovas: the engine addresses memory by virtual address. */
	if (iova != (uintptr_t)addr)
		return srd_fail_ptr(EOPNOTSUPP);
	m = calloc(1, sizeof(*m));
	if (!m)
		return srd_fail_ptr(ENOMEM);
	err = srdgo_reg_mr(SRD_CONTAINER(pd, struct srd_pd, pd)->h, addr, length,
			   access & 0x1f, &h, &lkey, &rkey);
	if (err) {
		free(m);
		return srd_fail_ptr(err);
	}
	m->h = h;
	m->access = access;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = (uint32_t)h;
	m->mr.lkey = lkey;
	m->mr.rkey = rkey;
	return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access)
{
	return srd_fail_ptr(EOPNOTSUPP);
}

/* ibv_rereg_mr changes a region's PD and access in place, keeping its
 * keys, as rxe does; new memory (IBV_REREG_MR_CHANGE_TRANSLATION) is
 * refused with EOPNOTSUPP, as rxe refuses it: deregister and register
 * again. On failure the region stays as it was. */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct srd_mr *m;
	struct ibv_pd *npd;
	unsigned int nacc;
	int err;

	/* libibverbs' own checks (verbs.c), then the provider's. */
	if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) || ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		errno = EOPNOTSUPP;
		return IBV_REREG_MR_ERR_CMD;
	}
	m = SRD_CONTAINER(mr, struct srd_mr, mr);
	npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
	nacc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (unsigned int)access : m->access;
	if ((err = srd_mr_access_err(nacc))) {
		errno = err;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (npd->context != mr->context) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	err = srdgo_rereg_mr(m->h, SRD_CONTAINER(npd, struct srd_pd, pd)->h, nacc & 0x1f);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	m->access = nacc;
	mr->pd = npd;
	return 0;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct srd_mr *m;
	int err;

	if (!mr)
		return EINVAL;
	m = SRD_CONTAINER(mr, struct srd_mr, mr);
	err = srdgo_dereg_mr(m->h);
	if (err)
		return err;
	free(m);
	return 0;
}

/* ---- completion channels and CQs ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct srd_channel *c;
	GoUintptr h = 0;
	int fds[2], err;

	if (!ctx)
		return srd_fail_ptr(EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return srd_fail_ptr(ENOMEM);
	if (pipe2(fds, O_CLOEXEC)) {
		err = errno;
		free(c);
		return srd_fail_ptr(err);
	}
	err = srdgo_create_channel(srd_ctx_of(ctx)->h, fds[1], &c->pending, &c->spin_ns, &c->hand, &c->hand_cq, &h);
	if (err) {
		close(fds[0]);
		close(fds[1]);
		free(c);
		return srd_fail_ptr(err);
	}
	c->h = h;
	c->wfd = fds[1];
	c->ch.context = ctx;
	c->ch.fd = fds[0];
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct srd_channel *c;
	int err;

	if (!channel)
		return EINVAL;
	/* As rdma-core: not while CQs still report to it. */
	if (__atomic_load_n(&channel->refcnt, __ATOMIC_RELAXED))
		return EBUSY;
	c = SRD_CONTAINER(channel, struct srd_channel, ch);
	err = srdgo_destroy_channel(c->h);
	if (err)
		return err;
	close(c->wfd);
	close(c->ch.fd);
	free(c);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct srd_cq *q = srd_cq_create(ctx, cqe, cq_context, channel, comp_vector, NULL);

	return q ? &q->cq : NULL;
}

/* srd_cq_create makes the CQ of ibv_create_cq and, with x, of
 * ibv_create_cq_ex, which then owns x (ibv_destroy_cq frees it); NULL
 * and errno if it cannot, x still the caller's. */
struct srd_cq *srd_cq_create(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector, struct srd_cqx *x)
{
	struct srd_cq *q;
	GoUintptr h = 0;
	GoInt32 actual = 0;
	int err;

	if (!ctx || cqe <= 0 || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors)
		return srd_fail_ptr(EINVAL);
	/* A channel belongs to its context (the kernel refuses another's):
	 * its events could never be told apart from its own CQs'. */
	if (channel && channel->context != ctx)
		return srd_fail_ptr(EINVAL);
	q = calloc(1, sizeof(*q));
	if (!q)
		return srd_fail_ptr(ENOMEM);
	q->cq.context = ctx;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	err = srdgo_create_cq(srd_ctx_of(ctx)->h, cqe,
			      channel ? SRD_CONTAINER(channel, struct srd_channel, ch)->h : 0,
			      &q->cq, &h, &actual);
	if (err) {
		pthread_mutex_destroy(&q->cq.mutex);
		pthread_cond_destroy(&q->cq.cond);
		free(q);
		return srd_fail_ptr(err);
	}
	q->h = h;
	q->cq.handle = (uint32_t)h;
	q->cq.cqe = actual;
	q->x = x;
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
	return q;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	int32_t actual = 0;
	int err;

	if (!cq || cqe <= 0)
		return EINVAL;
	err = srdgo_resize_cq(SRD_CONTAINER(cq, struct srd_cq, cq)->h, cqe, &actual);
	if (err)
		return err;
	cq->cqe = actual;
	return 0;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct srd_cq *q;
	int err;

	if (!cq)
		return EINVAL;
	q = SRD_CONTAINER(cq, struct srd_cq, cq);
	err = srdgo_destroy_cq(q->h);
	if (err)
		return err;
	if (cq->channel)
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_RELAXED);
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	srd_cqx_free(q);
	free(q);
	return 0;
}

/*
 * The channel's pipe carries one pointer per event: the ibv_cq it is for.
 * A blocking read waits as the kernel's completion channel does; a
 * program that set O_NONBLOCK gets EAGAIN.
 *
 * A thread reads a record only after it has claimed one (srd_event_claim):
 * the provider counts a record in c->pending once it is in the pipe, and
 * a claim takes one from the count. So a thread that claimed never blocks
 * in read, and two threads waiting on one channel never take each
 * other's record and leave one asleep without the device's receive loop
 * brought back for it.
 *
 * srd_event_spin is ibv_get_cq_event's wait before it blocks, as CQ.Wait
 * spins before it sleeps: for up to c->spin_ns it receives for the
 * device on the calling thread (srdgo_channel_progress), and the event
 * it raises there lands in the pipe with nothing to wake. It reports
 * whether it claimed a record. A thread blocked in the kernel is woken in
 * tens of microseconds across a VM's CPUs, and twice per round trip a
 * ping-pong paid it: a blocking ib_send_lat over the library took 4-5
 * times the Go tool's time. While the thread receives, the device's
 * receive loop steps aside, as it does for a program that busy-polls;
 * the thread brings it back before it blocks (srdgo_channel_block).
 */
static int srd_event_claim(struct srd_channel *c)
{
	uint32_t n = __atomic_load_n(&c->pending, __ATOMIC_ACQUIRE);

	while (n)
		if (__atomic_compare_exchange_n(&c->pending, &n, n - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return 1;
	return 0;
}

/* srd_hand_take takes the event handed to the spinning thread, if there
 * is one, and ends the offer. */
static struct ibv_cq *srd_hand_take(struct srd_channel *c)
{
	struct ibv_cq *q;

	if (__atomic_load_n(&c->hand, __ATOMIC_ACQUIRE) != SRD_HAND_FULL)
		return NULL;
	q = (struct ibv_cq *)(uintptr_t)c->hand_cq;
	__atomic_store_n(&c->hand, SRD_HAND_IDLE, __ATOMIC_RELEASE);
	return q;
}

/* srd_hand_close withdraws the offer: NULL, or the event handed before
 * the provider saw it withdrawn (it is the caller's). */
static struct ibv_cq *srd_hand_close(struct srd_channel *c)
{
	uint32_t open = SRD_HAND_OPEN;
	struct ibv_cq *q;

	if (__atomic_compare_exchange_n(&c->hand, &open, SRD_HAND_IDLE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return NULL;
	while (!(q = srd_hand_take(c)))
		; /* BUSY: the provider is storing it */
	return q;
}

/* SRD_SPIN_MAX caps the spin (ns). */
#define SRD_SPIN_MAX 1000000

static int64_t srd_ns_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

/* srd_spin_limit is how long a wait spins. A channel whose events come
 * within SRD_SPIN_MAX on average (a bandwidth test waiting for the
 * completion of a window of sends: 300-500 us on loopback) spins for
 * twice its average wait, so that most waits end without the sleep and
 * the wake-up through the kernel, which cost 15-35 us each and a third
 * of such a test's rate; a channel that waits longer spins only the
 * base (spin_ns), since its sleep costs little against the wait. */
static int64_t srd_spin_limit(struct srd_channel *c)
{
	int64_t w = __atomic_load_n(&c->wait_ns, __ATOMIC_RELAXED);

	if (w <= 0 || w > SRD_SPIN_MAX || 2 * w <= c->spin_ns)
		return c->spin_ns;
	return 2 * w < SRD_SPIN_MAX ? 2 * w : SRD_SPIN_MAX;
}

/* srd_wait_done adds a wait of ns, begun at the spin, to the average. */
static void srd_wait_done(struct srd_channel *c, int64_t ns)
{
	int64_t w = __atomic_load_n(&c->wait_ns, __ATOMIC_RELAXED);

	__atomic_store_n(&c->wait_ns, w ? w + (ns - w) / 8 : ns, __ATOMIC_RELAXED);
}

/* srd_event_spin receives for the device on the calling thread until an
 * event is there: 1 if it claimed a record of the pipe, 2 if the event
 * was handed to it (*q), 0 if the spin ran out. One spinning thread at a
 * time holds the hand-off's offer; the others claim from the pipe. t0
 * is when the wait began. */
static int srd_event_spin(struct srd_channel *c, struct ibv_cq **q, const struct timespec *t0)
{
	uint32_t idle = SRD_HAND_IDLE;
	int64_t limit;
	int open;
	unsigned i;

	if (!c->spin_ns)
		return 0;
	limit = srd_spin_limit(c);
	open = __atomic_compare_exchange_n(&c->hand, &idle, SRD_HAND_OPEN, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	for (i = 1;; i++) {
		srdgo_channel_progress(c->h);
		if (open && (*q = srd_hand_take(c)))
			return 2;
		if (srd_event_claim(c)) {
			struct ibv_cq *late = open ? srd_hand_close(c) : NULL;

			/* An event handed after the record was written goes
			 * behind it, into the pipe, as the provider would
			 * have written it (events of one CQ cannot pass each
			 * other: a CQ raises one per arming). */
			if (late) {
				uint64_t p = (uintptr_t)late;

				if (write(c->wfd, &p, sizeof(p)) == sizeof(p))
					__atomic_add_fetch(&c->pending, 1, __ATOMIC_RELEASE);
			}
			return 1;
		}
		if (i % 16 == 0 && srd_ns_since(t0) >= limit)
			break;
		if (i % SRD_YIELD_EVERY == 0)
			sched_yield();
	}
	if (open && (*q = srd_hand_close(c)))
		return 2;
	return 0;
}

/* srd_event_block sleeps until it claims a record, the device's receive
 * loop receiving meanwhile; -1 and errno if the wait fails (EINTR: a
 * signal that would have ended a blocking read, srd_wait_readable). */
static int srd_event_block(struct srd_channel *c)
{
	struct pollfd p = {.fd = c->ch.fd, .events = POLLIN};
	int ret = 0, err = 0;

	srdgo_channel_block(c->h, 1);
	while (!srd_event_claim(c)) {
		if (srd_wait_readable(&p) < 0) {
			err = errno;
			ret = -1;
			break;
		}
		/* Readable, and claimed by another thread first, or about to
		 * be counted: it reads or counts it at once. */
		if (!__atomic_load_n(&c->pending, __ATOMIC_ACQUIRE))
			sched_yield();
	}
	srdgo_channel_block(c->h, 0);
	errno = err;
	return ret;
}

/* srd_event_drain claims a record for a non-blocking read if the pipe
 * holds one it can have: one written and not yet counted is counted in a
 * moment (a program that saw the descriptor readable must get its
 * event, not EAGAIN). It reports whether there is none. */
static int srd_event_drain(struct srd_channel *c)
{
	struct pollfd p = {.fd = c->ch.fd, .events = POLLIN};

	while (!srd_event_claim(c)) {
		if (poll(&p, 1, 0) != 1)
			return 1;
		sched_yield();
	}
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct srd_channel *c;
	uint64_t p;
	ssize_t n;

	if (!channel || !cq || !cq_context)
		return srd_fail(EINVAL);
	/* The pipe is shared with the parent: a child must not take its
	 * records (forked.h). */
	if (srd_forked)
		return srd_fail(ENODEV);
	c = SRD_CONTAINER(channel, struct srd_channel, ch);
	if (!srd_event_claim(c)) {
		struct ibv_cq *q = NULL;
		struct timespec t0;
		int got;

		/* A program that made the descriptor non-blocking does not
		 * wait here: it drains the events poll() announced, to
		 * EAGAIN. */
		if (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) {
			if (srd_event_drain(c))
				return srd_fail(EAGAIN);
		} else {
			clock_gettime(CLOCK_MONOTONIC, &t0);
			got = srd_event_spin(c, &q, &t0);
			if (!got && srd_event_block(c))
				return -1;
			if (c->spin_ns)
				srd_wait_done(c, srd_ns_since(&t0));
			if (got == 2) {
				*cq = q;
				*cq_context = q->cq_context;
				return 0;
			}
		}
	}
	n = read(channel->fd, &p, sizeof(p));
	if (n != sizeof(p)) {
		if (n >= 0)
			errno = EIO; /* a short read; else read's errno */
		return -1;
	}
	*cq = (struct ibv_cq *)(uintptr_t)p;
	*cq_context = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- SRQ ---- */

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct srd_srq *s;
	GoUintptr h = 0;
	int err;

	if (!pd || !attr)
		return srd_fail_ptr(EINVAL);
	s = calloc(1, sizeof(*s));
	if (!s)
		return srd_fail_ptr(ENOMEM);
	err = srdgo_create_srq(SRD_CONTAINER(pd, struct srd_pd, pd)->h, attr, &h);
	if (err) {
		free(s);
		return srd_fail_ptr(err);
	}
	s->h = h;
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	s->srq.handle = (uint32_t)h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (!srq || !attr)
		return EINVAL;
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	return srdgo_modify_srq(SRD_CONTAINER(srq, struct srd_srq, srq)->h, attr, mask);
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return EINVAL;
	return srdgo_query_srq(SRD_CONTAINER(srq, struct srd_srq, srq)->h, attr);
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct srd_srq *s;
	int err;

	if (!srq)
		return EINVAL;
	s = SRD_CONTAINER(srq, struct srd_srq, srq);
	err = srdgo_destroy_srq(s->h);
	if (err)
		return err;
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(s);
	return 0;
}

/* ---- QP ---- */

void srd_qp_ex_init(struct srd_qp *q, uint64_t send_ops_flags);

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, int ex, uint64_t send_ops)
{
	struct srd_qp *q;
	GoUintptr h = 0;
	GoUint32 qpn = 0;
	int err;

	if (!pd || !attr || !attr->send_cq || (!attr->recv_cq && !attr->srq))
		return srd_fail_ptr(EINVAL);
	switch (attr->qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_UD:
		break;
	default:
		return srd_fail_ptr(EOPNOTSUPP);
	}
	q = calloc(1, sizeof(*q));
	if (!q)
		return srd_fail_ptr(ENOMEM);
	err = srdgo_create_qp(SRD_CONTAINER(pd, struct srd_pd, pd)->h, attr,
			      SRD_CONTAINER(attr->send_cq, struct srd_cq, cq)->h,
			      attr->recv_cq ? SRD_CONTAINER(attr->recv_cq, struct srd_cq, cq)->h : 0,
			      attr->srq ? SRD_CONTAINER(attr->srq, struct srd_srq, srq)->h : 0,
			      &q->qpx.qp_base, &h, &qpn);
	if (err) {
		free(q);
		return srd_fail_ptr(err);
	}
	q->h = h;
	q->qpx.qp_base.context = pd->context;
	q->qpx.qp_base.qp_context = attr->qp_context;
	q->qpx.qp_base.pd = pd;
	q->qpx.qp_base.send_cq = attr->send_cq;
	q->qpx.qp_base.recv_cq = attr->recv_cq;
	q->qpx.qp_base.srq = attr->srq;
	q->qpx.qp_base.handle = (uint32_t)h;
	q->qpx.qp_base.qp_num = qpn;
	q->qpx.qp_base.state = IBV_QPS_RESET;
	q->qpx.qp_base.qp_type = attr->qp_type;
	pthread_mutex_init(&q->qpx.qp_base.mutex, NULL);
	pthread_cond_init(&q->qpx.qp_base.cond, NULL);
	if (ex) {
		q->ex = 1;
		srd_qp_ex_init(q, send_ops);
	}
	srd_sring_init(q, &attr->cap);
	srd_rring_init(q, &attr->cap, attr->srq != NULL);
	return &q->qpx.qp_base;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return create_qp(pd, attr, 0, 0);
}

#define SRD_QP_INIT_ATTR_KNOWN (IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS)
#define SRD_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
		      IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
		      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV | \
		      IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV)

struct ibv_qp *srd_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a;
	uint64_t ops = 0;

	if (!ctx || !attr)
		return srd_fail_ptr(EINVAL);
	if ((attr->comp_mask & ~SRD_QP_INIT_ATTR_KNOWN) || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd)
		return srd_fail_ptr(EOPNOTSUPP);
	/* Create flags (scatter FCS, CVLAN stripping, ...) are for raw
	 * packet QPs and NIC offloads: none is supported, no flags is fine. */
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		return srd_fail_ptr(EOPNOTSUPP);
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = attr->send_ops_flags;
		if (ops & ~SRD_SEND_OPS)
			return srd_fail_ptr(EOPNOTSUPP);
	}
	memcpy(&a, attr, sizeof(a)); /* ibv_qp_init_attr is ibv_qp_init_attr_ex's prefix */
	{
		struct ibv_qp *qp = create_qp(attr->pd, &a, (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0, ops);

		if (qp)
			attr->cap = a.cap;
		return qp;
	}
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct srd_qp *q;

	if (!qp)
		return NULL;
	q = SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base);
	return q->ex ? &q->qpx : NULL;
}

#define SRD_QP_ATTR_KNOWN ((1 << 21) - 1)

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	GoInt32 state = -1;
	int err;

	if (!qp || !attr)
		return EINVAL;
	if ((unsigned int)mask & ~SRD_QP_ATTR_KNOWN)
		return EINVAL;
	err = srdgo_modify_qp(SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base)->h, attr, mask, &state);
	if (err)
		return err;
	if (state >= 0)
		qp->state = state;
	if (state == IBV_QPS_RESET) {
		if (qp->send_cq)
			srd_cqx_clean(SRD_CONTAINER(qp->send_cq, struct srd_cq, cq), qp->qp_num);
		if (qp->recv_cq && qp->recv_cq != qp->send_cq)
			srd_cqx_clean(SRD_CONTAINER(qp->recv_cq, struct srd_cq, cq), qp->qp_num);
	}
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	int err;

	if (!qp || !attr || !init)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	err = srdgo_query_qp(SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base)->h, attr, init);
	if (err)
		return err;
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	init->qp_type = qp->qp_type;
	qp->state = attr->qp_state;
	return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct srd_qp *q;
	int err;

	if (!qp)
		return EINVAL;
	q = SRD_CONTAINER(qp, struct srd_qp, qpx.qp_base);
	err = srdgo_destroy_qp(q->h);
	if (err)
		return err;
	srd_sring_free(q);
	srd_rring_free(q);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q);
	return 0;
}

/* ---- AH ---- */

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct srd_ah *a;
	GoUintptr h = 0;
	int err;

	if (!pd || !attr)
		return srd_fail_ptr(EINVAL);
	a = calloc(1, sizeof(*a));
	if (!a)
		return srd_fail_ptr(ENOMEM);
	err = srdgo_create_ah(SRD_CONTAINER(pd, struct srd_pd, pd)->h, attr, &h);
	if (err) {
		free(a);
		return srd_fail_ptr(err);
	}
	a->h = h;
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->ah.handle = (uint32_t)h;
	return &a->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct srd_ah *a;
	int err;

	if (!ah)
		return EINVAL;
	a = SRD_CONTAINER(ah, struct srd_ah, ah);
	err = srdgo_destroy_ah(a->h);
	if (err)
		return err;
	free(a);
	return 0;
}

/* srd_gid_index_of returns the index of the port's GID that a packet was
 * sent to (an IPv4 address when v4, else a GID), so a reply leaves from
 * the address the peer used, as rdma-core's ibv_init_ah_from_wc does; 0
 * if none matches. */
static uint8_t srd_gid_index_of(struct ibv_context *ctx, uint8_t port, const unsigned char *dst, int v4)
{
	union ibv_gid want, g;
	int i;

	memset(&want, 0, sizeof(want));
	if (v4) {
		want.raw[10] = want.raw[11] = 0xff;
		memcpy(&want.raw[12], dst, 4);
	} else {
		memcpy(want.raw, dst, 16);
	}
	for (i = 0; i < 256; i++) {
		if (ibv_query_gid(ctx, port, i, &g))
			break;
		if (!memcmp(g.raw, want.raw, 16))
			return i;
	}
	return 0;
}

/* The GRH a UD receive buffer starts with: for RoCEv2 over IPv4, 20 bytes
 * then the IPv4 header (source address at offset 20+12); for IPv6 the
 * IPv6 header (source at offset 8). */
int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	const unsigned char *b = (const unsigned char *)grh;

	if (!ctx || !wc || !ah_attr)
		return srd_fail(EINVAL);
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port;
	if (wc->wc_flags & IBV_WC_GRH) {
		if (!grh)
			return srd_fail(EINVAL);
		ah_attr->is_global = 1;
		if ((b[20] >> 4) == 4) {
			memset(ah_attr->grh.dgid.raw, 0, 10);
			ah_attr->grh.dgid.raw[10] = 0xff;
			ah_attr->grh.dgid.raw[11] = 0xff;
			memcpy(&ah_attr->grh.dgid.raw[12], b + 20 + 12, 4);
			ah_attr->grh.hop_limit = 0xff;
		} else {
			memcpy(ah_attr->grh.dgid.raw, grh->sgid.raw, 16);
			ah_attr->grh.hop_limit = grh->hop_limit;
		}
		ah_attr->grh.sgid_index = srd_gid_index_of(ctx, port, (b[20] >> 4) == 4 ? b + 20 + 16 : grh->dgid.raw, (b[20] >> 4) == 4);
	}
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;

	if (!pd)
		return srd_fail_ptr(EINVAL);
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* ---- multicast and the rest ---- */

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return qp && gid ? EOPNOTSUPP : EINVAL;
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return qp && gid ? EOPNOTSUPP : EINVAL;
}

static int fork_inited;

int ibv_fork_init(void)
{
	/* Registered memory is plain process memory the engine reads and
	 * writes with the CPU: after fork() the parent keeps working and the
	 * child sees copy-on-write copies (docs/clib.md). */
	fork_inited = 1;
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

struct ibv_context *ibv_import_device(int cmd_fd)
{
	return srd_fail_ptr(EOPNOTSUPP);
}

struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t pd_handle)
{
	return srd_fail_ptr(EOPNOTSUPP);
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	return srd_fail_ptr(EOPNOTSUPP);
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
}

struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t dm_handle)
{
	return srd_fail_ptr(EOPNOTSUPP);
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t eth_mac[6], uint16_t *vid)
{
	return EOPNOTSUPP;
}

void ibv_register_driver(const char *name, void *init_func)
{
}

/* sysfs helpers rdma-core exports for its own libraries and tools. */

const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	int fd, len;

	if (!dir || !file || !buf || !size)
		return srd_fail(EINVAL);
	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len < 0)
		return -1;
	if ((size_t)len == size)
		len--;
	buf[len] = '\0';
	if (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	return len;
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fnfmt, ...)
{
	return srd_fail(ENOENT);
}
