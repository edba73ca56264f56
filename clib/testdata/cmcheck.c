/*
 * cmcheck: librdmacm's API through softrdma's librdmacm.so.1, in one
 * process on one device address: misuse gets -1 and rdma-core's errno;
 * events block on the channel's fd and poll() sees them; a connection
 * request carries private data, a reject carries its own back, an
 * accepted connection gets ESTABLISHED on both sides and DISCONNECTED on
 * both after rdma_disconnect; rdma_migrate_id moves events; synchronous
 * endpoints (rdma_create_ep, rdma_get_request) connect; QPs the program
 * creates and moves itself (rdma_init_qp_attr, rdma_establish) connect,
 * with the TOS and ACK timeout set on the id.
 *
 * usage: cmcheck ADDR (an IPv4 address of a softrdma device: 127.0.0.1)
 * Prints one line per failed check and exits 1 if any failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

static int fails;

#define CHECK(cond, ...) do { if (!(cond)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define ERRNO(call, want) do { errno = 0; int r_ = (call); CHECK(r_ == -1 && errno == (want), "%s = %d errno %d (%s), want -1 errno %d (%s)", #call, r_, errno, strerror(errno), want, strerror(want)); } while (0)

static const char *addr;

static struct sockaddr_in sin_of(const char *a, int port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof(s));
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	inet_pton(AF_INET, a, &s.sin_addr);
	return s;
}

/* next waits (poll() first, 5 s at most) for the channel's next event
   and checks its type; the caller acks it. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, 5000) != 1) {
		CHECK(0, "no event within 5 s (waiting for %s)", rdma_event_str(want));
		return NULL;
	}
	if (rdma_get_cm_event(ch, &ev)) {
		CHECK(0, "rdma_get_cm_event: %s", strerror(errno));
		return NULL;
	}
	CHECK(ev->event == want, "event %s status %d, want %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	return ev;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return a;
}

static void misuse(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in s = sin_of("203.0.113.7", 0);
	struct rdma_cm_event *ev;
	struct ibv_qp_init_attr qa = qp_attr();
	uint8_t tos = 1;

	CHECK(ch != NULL, "rdma_create_event_channel: %s", strerror(errno));
	ERRNO(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	ERRNO(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x999), EPROTONOSUPPORT);
	ERRNO(rdma_bind_addr(NULL, (struct sockaddr *)&s), EINVAL);
	ERRNO(rdma_listen(NULL, 1), EINVAL);
	ERRNO(rdma_accept(NULL, NULL), EINVAL);
	ERRNO(rdma_connect(NULL, NULL), EINVAL);
	ERRNO(rdma_disconnect(NULL), EINVAL);
	ERRNO(rdma_destroy_id(NULL), EINVAL);
	ERRNO(rdma_get_cm_event(NULL, &ev), EINVAL);
	ERRNO(rdma_get_cm_event(ch, NULL), EINVAL);
	ERRNO(rdma_ack_cm_event(NULL), EINVAL);
	ERRNO(rdma_create_qp(NULL, NULL, &qa), EINVAL);
	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	ERRNO(rdma_bind_addr(id, NULL), EINVAL);
	ERRNO(rdma_bind_addr(id, (struct sockaddr *)&s), EADDRNOTAVAIL); /* no device has it */
	ERRNO(rdma_resolve_route(id, 100), EINVAL);                       /* no address resolved */
	ERRNO(rdma_connect(id, NULL), EINVAL);                            /* no route */
	ERRNO(rdma_accept(id, NULL), EINVAL);                             /* not a request */
	ERRNO(rdma_reject(id, NULL, 0), EINVAL);
	ERRNO(rdma_reject(id, NULL, 4), EINVAL);                          /* length without data */
	ERRNO(rdma_disconnect(id), EINVAL);                               /* not connected */
	ERRNO(rdma_create_qp(id, NULL, &qa), EINVAL);                     /* no device yet */
	ERRNO(rdma_create_qp(id, NULL, NULL), EINVAL);
	CHECK(!rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)), "TOS: %s", strerror(errno));
	ERRNO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(int)), EINVAL);
	tos = 0; /* an ACK timeout of 0 (never) is refused, as is one over 5 bits */
	ERRNO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &tos, sizeof(tos)), EINVAL);
	tos = 32;
	ERRNO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &tos, sizeof(tos)), EINVAL);
	ERRNO(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &tos, sizeof(tos)), ENOSYS);
	ERRNO(rdma_set_option(id, 77, 0, &tos, sizeof(tos)), EINVAL);
	ERRNO(rdma_join_multicast(id, (struct sockaddr *)&s, NULL), ENOSYS);
	ERRNO(rdma_establish(id), EINVAL);                                /* no connect response */
	ERRNO(rdma_init_qp_attr(id, NULL, NULL), EINVAL);
	struct ibv_qp_attr qpa = { .qp_state = IBV_QPS_INIT };
	int qpmask = 0;
	ERRNO(rdma_init_qp_attr(id, &qpa, &qpmask), EINVAL);               /* no device yet */
	CHECK(rdma_get_src_port(NULL) == 0 && rdma_get_dst_port(id) == 0, "ports of no address");
	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED"), "rdma_event_str");
	CHECK(!strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT"), "rdma_event_str(99)");
	ERRNO(rsocket(AF_INET, SOCK_DGRAM, 0), EOPNOTSUPP); /* datagram rsockets: not provided */

	/* A non-blocking channel with nothing in it. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "poll() on an empty channel");
	CHECK(!rdma_destroy_id(id), "rdma_destroy_id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
}

static void addrinfo(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_UDP;
	ret = rdma_getaddrinfo(addr, "7471", &hints, &res);
	CHECK(ret == 0 && res && res->ai_src_addr && !res->ai_dst_addr, "rdma_getaddrinfo passive: %d", ret);
	if (ret == 0) {
		CHECK(((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7471), "ai_src_addr port");
		CHECK(res->ai_qp_type == IBV_QPT_UD && res->ai_port_space == RDMA_PS_UDP, "UD from the UDP port space");
		rdma_freeaddrinfo(res);
	}
	memset(&hints, 0, sizeof(hints));
	res = NULL;
	ret = rdma_getaddrinfo(addr, NULL, &hints, &res);
	CHECK(ret == 0 && res && res->ai_dst_addr && res->ai_qp_type == IBV_QPT_RC, "rdma_getaddrinfo active: %d", ret);
	if (ret == 0)
		rdma_freeaddrinfo(res);
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) != 0, "rdma_getaddrinfo of nothing");
	CHECK(rdma_getaddrinfo("not an address", "1", &(struct rdma_addrinfo){ .ai_flags = RAI_NUMERICHOST }, &res) != 0,
	      "rdma_getaddrinfo of a bad numeric host");
}

/* connect_one resolves, creates a QP and connects client to port with
   private data; it returns the client's channel event of the answer. */
static struct rdma_cm_event *connect_one(struct rdma_event_channel *cch, struct rdma_cm_id *client, int port,
					 const char *pdata, struct rdma_event_channel *sch, struct rdma_cm_event **req)
{
	struct sockaddr_in dst = sin_of(addr, port);
	struct rdma_conn_param cp;
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_cm_event *ev;

	CHECK(!rdma_resolve_addr(client, NULL, (struct sockaddr *)&dst, 2000), "rdma_resolve_addr: %s", strerror(errno));
	if ((ev = next(cch, RDMA_CM_EVENT_ADDR_RESOLVED)))
		rdma_ack_cm_event(ev);
	CHECK(client->verbs != NULL, "no device after ADDR_RESOLVED");
	CHECK(rdma_get_dst_port(client) == htons(port), "rdma_get_dst_port");
	CHECK(!rdma_resolve_route(client, 2000), "rdma_resolve_route: %s", strerror(errno));
	if ((ev = next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		rdma_ack_cm_event(ev);
	CHECK(!rdma_create_qp(client, NULL, &qa), "rdma_create_qp: %s", strerror(errno));
	CHECK(client->qp && client->pd && client->send_cq, "rdma_create_qp made no QP, PD or CQs");
	memset(&cp, 0, sizeof(cp));
	cp.private_data = pdata;
	cp.private_data_len = strlen(pdata) + 1;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	CHECK(!rdma_connect(client, &cp), "rdma_connect: %s", strerror(errno));
	*req = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	if (*req) {
		CHECK((*req)->listen_id != NULL && (*req)->id != (*req)->listen_id, "a request's ids");
		CHECK((*req)->param.conn.private_data_len >= strlen(pdata) + 1 &&
		      !memcmp((*req)->param.conn.private_data, pdata, strlen(pdata) + 1), "request private data");
		CHECK((*req)->param.conn.initiator_depth == 1, "initiator depth %d", (*req)->param.conn.initiator_depth);
		CHECK((*req)->id->verbs != NULL, "no device on the request's id");
	}
	return NULL;
}

static void connections(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_event_channel *mch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *c1, *c2, *sid;
	struct sockaddr_in s = sin_of(addr, 0);
	struct rdma_cm_event *ev, *req;
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_conn_param ap;
	int port;

	CHECK(sch && cch && mch, "channels");
	CHECK(!rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_bind_addr(listen, (struct sockaddr *)&s), "rdma_bind_addr: %s", strerror(errno));
	CHECK(!rdma_listen(listen, 4), "rdma_listen: %s", strerror(errno));
	port = ntohs(rdma_get_src_port(listen));
	CHECK(port != 0, "port 0 got no port");
	ERRNO(rdma_listen(listen, 4), EINVAL);

	/* A rejected request: the client sees the reject's private data. */
	CHECK(!rdma_create_id(cch, &c1, NULL, RDMA_PS_TCP), "rdma_create_id");
	connect_one(cch, c1, port, "hello", sch, &req);
	if (req) {
		CHECK(!rdma_reject(req->id, "no", 3), "rdma_reject: %s", strerror(errno));
		ERRNO(rdma_accept(req->id, NULL), EINVAL); /* answered already */
		sid = req->id;
		rdma_ack_cm_event(req);
		rdma_destroy_id(sid);
	}
	if ((ev = next(cch, RDMA_CM_EVENT_REJECTED))) {
		CHECK(ev->status == 28, "reject status %d, want 28 (consumer defined)", ev->status);
		CHECK(ev->param.conn.private_data && !memcmp(ev->param.conn.private_data, "no", 3), "reject private data");
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_qp(c1);
	rdma_destroy_id(c1);

	/* An accepted one, with events moved to another channel. */
	CHECK(!rdma_create_id(cch, &c2, NULL, RDMA_PS_TCP), "rdma_create_id");
	connect_one(cch, c2, port, "again", sch, &req);
	if (!req)
		return;
	sid = req->id;
	CHECK(!rdma_create_qp(sid, NULL, &qa), "rdma_create_qp on the request: %s", strerror(errno));
	memset(&ap, 0, sizeof(ap));
	ap.private_data = "welcome";
	ap.private_data_len = 8;
	ap.responder_resources = ap.initiator_depth = 1;
	CHECK(!rdma_accept(sid, &ap), "rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(req);
	if ((ev = next(cch, RDMA_CM_EVENT_ESTABLISHED))) {
		CHECK(ev->param.conn.private_data && !memcmp(ev->param.conn.private_data, "welcome", 8), "accept private data");
		rdma_ack_cm_event(ev);
	}
	if ((ev = next(sch, RDMA_CM_EVENT_ESTABLISHED)))
		rdma_ack_cm_event(ev);
	CHECK(!rdma_migrate_id(sid, mch), "rdma_migrate_id: %s", strerror(errno));
	CHECK(!rdma_disconnect(c2), "rdma_disconnect: %s", strerror(errno));
	if ((ev = next(cch, RDMA_CM_EVENT_DISCONNECTED)))
		rdma_ack_cm_event(ev);
	if ((ev = next(mch, RDMA_CM_EVENT_DISCONNECTED)))
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(sid);
	rdma_destroy_id(sid);
	rdma_destroy_qp(c2);
	rdma_destroy_id(c2);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(mch);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* ---- a QP the program creates and moves itself (rping -q) ---- */

/* own_side is a device's PD, CQ, buffer and an RC QP made with
   ibv_create_qp, outside rdma_cm. */
struct own_side {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	char buf[64];
};

static int own_open(struct own_side *o, struct ibv_context *verbs)
{
	struct ibv_qp_init_attr qa = qp_attr();

	memset(o, 0, sizeof(*o));
	o->pd = ibv_alloc_pd(verbs);
	o->cq = o->pd ? ibv_create_cq(verbs, 8, NULL, NULL, 0) : NULL;
	o->mr = o->cq ? ibv_reg_mr(o->pd, o->buf, sizeof(o->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	qa.send_cq = qa.recv_cq = o->cq;
	o->qp = o->mr ? ibv_create_qp(o->pd, &qa) : NULL;
	CHECK(o->qp != NULL, "own QP: %s", strerror(errno));
	return o->qp ? 0 : -1;
}

static void own_close(struct own_side *o)
{
	if (o->qp)
		ibv_destroy_qp(o->qp);
	if (o->mr)
		ibv_dereg_mr(o->mr);
	if (o->cq)
		ibv_destroy_cq(o->cq);
	if (o->pd)
		ibv_dealloc_pd(o->pd);
}

/* own_move moves the QP to INIT, RTR and RTS with rdma_init_qp_attr's
   attributes, keeping the RTR and RTS ones for the caller's checks. */
static void own_move(struct rdma_cm_id *id, struct own_side *o, struct ibv_qp_attr *rtr, struct ibv_qp_attr *rts)
{
	enum ibv_qp_state st[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_attr a;
	int i, mask;

	for (i = 0; i < 3; i++) {
		memset(&a, 0, sizeof(a));
		a.qp_state = st[i];
		if (rdma_init_qp_attr(id, &a, &mask)) {
			CHECK(0, "rdma_init_qp_attr(state %d): %s", st[i], strerror(errno));
			return;
		}
		CHECK(a.qp_state == st[i] && (mask & IBV_QP_STATE), "rdma_init_qp_attr(state %d) gave state %d mask %#x", st[i], a.qp_state, mask);
		CHECK(!ibv_modify_qp(o->qp, &a, mask), "ibv_modify_qp to %d with mask %#x: %s", st[i], mask, strerror(errno));
		if (i == 1)
			*rtr = a;
		if (i == 2)
			*rts = a;
	}
}

static int own_wait(struct own_side *o, enum ibv_wc_opcode want)
{
	struct ibv_wc wc;
	int i;

	for (i = 0; i < 5000; i++) {
		int n = ibv_poll_cq(o->cq, 1, &wc);
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == want, "completion status %d opcode %d, want opcode %d", wc.status, wc.opcode, want);
			return 0;
		}
		usleep(1000);
	}
	CHECK(0, "no completion within 5 s (want opcode %d)", want);
	return -1;
}

static void ownqp(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *client, *sid;
	struct sockaddr_in s = sin_of(addr, 0), dst;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_qp_attr crtr, crts, srtr, srts, a;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr, *bad_rwr;
	struct ibv_send_wr swr, *bad_swr;
	struct own_side cs, ss;
	struct pollfd p;
	uint8_t tos = 0x20, ack = 16;
	int port, mask;

	CHECK(!rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_bind_addr(listen, (struct sockaddr *)&s), "rdma_bind_addr: %s", strerror(errno));
	CHECK(!rdma_listen(listen, 4), "rdma_listen: %s", strerror(errno));
	port = ntohs(rdma_get_src_port(listen));
	dst = sin_of(addr, port);

	CHECK(!rdma_create_id(cch, &client, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	CHECK(!rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), "TOS: %s", strerror(errno));
	CHECK(!rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, 1), "ACK_TIMEOUT: %s", strerror(errno));
	CHECK(!rdma_resolve_addr(client, NULL, (struct sockaddr *)&dst, 2000), "rdma_resolve_addr: %s", strerror(errno));
	if ((ev = next(cch, RDMA_CM_EVENT_ADDR_RESOLVED)))
		rdma_ack_cm_event(ev);
	CHECK(!rdma_resolve_route(client, 2000), "rdma_resolve_route: %s", strerror(errno));
	if ((ev = next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		rdma_ack_cm_event(ev);
	if (!client->verbs || own_open(&cs, client->verbs))
		return;
	/* Before connecting: the port's INIT attributes only. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	CHECK(!rdma_init_qp_attr(client, &a, &mask) && mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) &&
	      a.port_num == 1, "INIT before connecting: mask %#x port %d (%s)", mask, a.port_num, strerror(errno));
	CHECK(!ibv_modify_qp(cs.qp, &a, mask), "ibv_modify_qp to INIT: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTR;
	ERRNO(rdma_init_qp_attr(client, &a, &mask), EINVAL); /* no peer yet */
	ERRNO(rdma_connect(client, NULL), EINVAL);            /* no QP, none named */

	memset(&cp, 0, sizeof(cp));
	cp.private_data = "own";
	cp.private_data_len = 4;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = cp.rnr_retry_count = 7;
	cp.qp_num = cs.qp->qp_num;
	CHECK(!rdma_connect(client, &cp), "rdma_connect with qp_num: %s", strerror(errno));
	if (!(ev = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST)))
		return;
	sid = ev->id;
	CHECK(ev->param.conn.qp_num == cs.qp->qp_num, "request names QP %#x, want %#x", ev->param.conn.qp_num, cs.qp->qp_num);
	rdma_ack_cm_event(ev);
	if (own_open(&ss, sid->verbs))
		return;
	own_move(sid, &ss, &srtr, &srts);
	CHECK(srtr.dest_qp_num == cs.qp->qp_num, "server RTR to QP %#x, want %#x", srtr.dest_qp_num, cs.qp->qp_num);
	CHECK(srtr.ah_attr.is_global && srtr.ah_attr.grh.traffic_class == tos, "server path: global %d traffic class %#x, want %#x",
	      srtr.ah_attr.is_global, srtr.ah_attr.grh.traffic_class, tos);
	sge.addr = (uintptr_t)ss.buf;
	sge.length = sizeof(ss.buf);
	sge.lkey = ss.mr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	CHECK(!ibv_post_recv(ss.qp, &rwr, &bad_rwr), "ibv_post_recv: %s", strerror(errno));
	memset(&cp, 0, sizeof(cp));
	cp.private_data = "yours";
	cp.private_data_len = 6;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.qp_num = ss.qp->qp_num;
	CHECK(!rdma_accept(sid, &cp), "rdma_accept with qp_num: %s", strerror(errno));

	if ((ev = next(cch, RDMA_CM_EVENT_CONNECT_RESPONSE))) {
		CHECK(ev->param.conn.private_data && !memcmp(ev->param.conn.private_data, "yours", 6), "response private data");
		CHECK(ev->param.conn.qp_num == ss.qp->qp_num, "response names QP %#x, want %#x", ev->param.conn.qp_num, ss.qp->qp_num);
		rdma_ack_cm_event(ev);
	}
	own_move(client, &cs, &crtr, &crts);
	CHECK(crtr.dest_qp_num == ss.qp->qp_num, "client RTR to QP %#x, want %#x", crtr.dest_qp_num, ss.qp->qp_num);
	CHECK(crtr.ah_attr.grh.traffic_class == tos, "client traffic class %#x, want %#x", crtr.ah_attr.grh.traffic_class, tos);
	CHECK(crts.timeout == ack, "client ACK timeout %d, want %d", crts.timeout, ack);
	CHECK(crts.sq_psn == srtr.rq_psn && srts.sq_psn == crtr.rq_psn, "PSNs: client sends %#x expects %#x, server sends %#x expects %#x",
	      crts.sq_psn, crtr.rq_psn, srts.sq_psn, srtr.rq_psn);
	CHECK(!rdma_establish(client), "rdma_establish: %s", strerror(errno));
	ERRNO(rdma_establish(client), EINVAL); /* answered already */
	if ((ev = next(sch, RDMA_CM_EVENT_ESTABLISHED)))
		rdma_ack_cm_event(ev);
	/* The active side gets no event for rdma_establish (as with the
	   kernel: rping -q counts on it). */
	p.fd = cch->fd;
	p.events = POLLIN;
	CHECK(poll(&p, 1, 200) == 0, "an event on the active side after rdma_establish");

	/* The QPs carry a SEND. */
	strcpy(cs.buf, "moved myself");
	sge.addr = (uintptr_t)cs.buf;
	sge.length = 13;
	sge.lkey = cs.mr->lkey;
	memset(&swr, 0, sizeof(swr));
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	CHECK(!ibv_post_send(cs.qp, &swr, &bad_swr), "ibv_post_send: %s", strerror(errno));
	if (!own_wait(&ss, IBV_WC_RECV))
		CHECK(!strcmp(ss.buf, "moved myself"), "received %.13s", ss.buf);
	own_wait(&cs, IBV_WC_SEND);

	CHECK(!rdma_disconnect(client), "rdma_disconnect: %s", strerror(errno));
	if ((ev = next(cch, RDMA_CM_EVENT_DISCONNECTED)))
		rdma_ack_cm_event(ev);
	if ((ev = next(sch, RDMA_CM_EVENT_DISCONNECTED)))
		rdma_ack_cm_event(ev);
	rdma_destroy_id(sid);
	rdma_destroy_id(client);
	rdma_destroy_id(listen);
	own_close(&ss);
	own_close(&cs);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* nobody: a connection to a port nobody listens on is REJECTED with
   reason 8 (invalid service ID), after the library's grace second. */
static void nobody(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in dst = sin_of(addr, 1);
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_cm_event *ev;

	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id");
	CHECK(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), "rdma_resolve_addr: %s", strerror(errno));
	if ((ev = next(ch, RDMA_CM_EVENT_ADDR_RESOLVED)))
		rdma_ack_cm_event(ev);
	CHECK(!rdma_resolve_route(id, 2000), "rdma_resolve_route: %s", strerror(errno));
	if ((ev = next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		rdma_ack_cm_event(ev);
	CHECK(!rdma_create_qp(id, NULL, &qa), "rdma_create_qp: %s", strerror(errno));
	CHECK(!rdma_connect(id, NULL), "rdma_connect: %s", strerror(errno));
	ERRNO(rdma_connect(id, NULL), EINVAL); /* one connect at a time */
	if ((ev = next(ch, RDMA_CM_EVENT_REJECTED))) {
		CHECK(ev->status == 8, "status %d, want 8 (invalid service ID)", ev->status);
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* ---- synchronous endpoints ---- */

static struct rdma_cm_id *ep_listen;

static void *ep_server(void *arg)
{
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr qa = qp_attr();

	(void)arg;
	if (rdma_get_request(ep_listen, &id)) {
		CHECK(0, "rdma_get_request: %s", strerror(errno));
		return NULL;
	}
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST, "rdma_get_request's event");
	CHECK(!rdma_create_qp(id, NULL, &qa), "rdma_create_qp: %s", strerror(errno));
	CHECK(!rdma_accept(id, NULL), "rdma_accept (synchronous): %s", strerror(errno));
	return id;
}

static void endpoints(void)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_cm_id *client;
	pthread_t t;
	void *sid = NULL;
	char port[8];

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	snprintf(port, sizeof(port), "%d", 20000 + getpid() % 20000);
	if (rdma_getaddrinfo(addr, port, &hints, &res)) {
		CHECK(0, "rdma_getaddrinfo");
		return;
	}
	CHECK(!rdma_create_ep(&ep_listen, res, NULL, NULL), "rdma_create_ep passive: %s", strerror(errno));
	rdma_freeaddrinfo(res);
	CHECK(!rdma_listen(ep_listen, 1), "rdma_listen: %s", strerror(errno));
	pthread_create(&t, NULL, ep_server, NULL);
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(addr, port, &hints, &res)) {
		CHECK(0, "rdma_getaddrinfo");
		return;
	}
	CHECK(!rdma_create_ep(&client, res, NULL, &qa), "rdma_create_ep active: %s", strerror(errno));
	rdma_freeaddrinfo(res);
	CHECK(client->qp != NULL, "rdma_create_ep made no QP");
	CHECK(!rdma_connect(client, NULL), "rdma_connect (synchronous): %s", strerror(errno));
	pthread_join(t, &sid);
	rdma_disconnect(client);
	rdma_destroy_ep(client);
	if (sid)
		rdma_destroy_ep(sid);
	rdma_destroy_ep(ep_listen);
}

int main(int argc, char **argv)
{
	addr = argc > 1 ? argv[1] : "127.0.0.1";
	setvbuf(stdout, NULL, _IONBF, 0);
	misuse();
	addrinfo();
	connections();
	ownqp();
	nobody();
	endpoints();
	printf("cmcheck: %d failed\n", fails);
	return fails != 0;
}
