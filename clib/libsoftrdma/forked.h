//go:build clib

/*
 * fork() without exec. A child gets the parent's memory but only the
 * thread that called fork(): the threads of the Go runtime the library
 * carries are not there, and a call that enters Go waits for them for
 * ever (rdma-core's own rdmacm tests hung in their children so). The
 * library marks the child (pthread_atfork, ibverbs.c) and its entry
 * points do not enter Go there:
 *
 *   - calls that would use a device fail with ENODEV, and
 *     ibv_get_device_list lists none (ibv_poll_cq returns -ENODEV);
 *   - calls that release an object (ibv_dealloc_pd, ibv_dereg_mr,
 *     ibv_destroy_*, ibv_close_device, rdma_destroy_id) free the child's
 *     copy of its C memory and succeed: the parent's object is the
 *     parent's, and stays as it was.
 *
 * ibv_get_cq_event, ibv_get_async_event and rdma_get_cm_event fail with
 * ENODEV too, before they read: their pipes are shared with the parent,
 * whose records a child would take. Rsockets calls are not covered. A child that needs RDMA execs a
 * program that loads the library afresh (docs/clib.md, "fork()").
 *
 * Each srdgo_ call is wrapped by a macro of its own name (a macro does
 * not expand inside its own expansion, so it calls the function).
 * Include this after the declarations (_cgo_export.h, rdmacm.h), in C
 * files only: never in a cgo preamble, where it would rename the
 * exports themselves.
 */
#ifndef SOFTRDMA_FORKED_H
#define SOFTRDMA_FORKED_H

#include <errno.h>

/* Set in a child of fork(): the Go runtime cannot run there. */
extern volatile int srd_forked;

#define SRD_UNFORKED(fail, call) (srd_forked ? (fail) : (call))

#define srdgo_cm_register_ctx(...) SRD_UNFORKED(ENODEV, srdgo_cm_register_ctx(__VA_ARGS__))
#define srdgo_cm_create_id(...) SRD_UNFORKED(ENODEV, srdgo_cm_create_id(__VA_ARGS__))
#define srdgo_cm_set_fd(...) SRD_UNFORKED(ENODEV, srdgo_cm_set_fd(__VA_ARGS__))
#define srdgo_cm_child_bind(...) SRD_UNFORKED(ENODEV, srdgo_cm_child_bind(__VA_ARGS__))
#define srdgo_cm_bind(...) SRD_UNFORKED(ENODEV, srdgo_cm_bind(__VA_ARGS__))
#define srdgo_cm_resolve_addr(...) SRD_UNFORKED(ENODEV, srdgo_cm_resolve_addr(__VA_ARGS__))
#define srdgo_cm_resolve_route(...) SRD_UNFORKED(ENODEV, srdgo_cm_resolve_route(__VA_ARGS__))
#define srdgo_cm_listen(...) SRD_UNFORKED(ENODEV, srdgo_cm_listen(__VA_ARGS__))
#define srdgo_cm_connect(...) SRD_UNFORKED(ENODEV, srdgo_cm_connect(__VA_ARGS__))
#define srdgo_cm_accept(...) SRD_UNFORKED(ENODEV, srdgo_cm_accept(__VA_ARGS__))
#define srdgo_cm_reject(...) SRD_UNFORKED(ENODEV, srdgo_cm_reject(__VA_ARGS__))
#define srdgo_cm_disconnect(...) SRD_UNFORKED(ENODEV, srdgo_cm_disconnect(__VA_ARGS__))
#define srdgo_cm_event(...) SRD_UNFORKED(ENODEV, srdgo_cm_event(__VA_ARGS__))
#define srdgo_cm_establish(...) SRD_UNFORKED(ENODEV, srdgo_cm_establish(__VA_ARGS__))
#define srdgo_cm_init_qp_attr(...) SRD_UNFORKED(ENODEV, srdgo_cm_init_qp_attr(__VA_ARGS__))
#define srdgo_cm_set_option(...) SRD_UNFORKED(ENODEV, srdgo_cm_set_option(__VA_ARGS__))
#define srdgo_open(...) SRD_UNFORKED(ENODEV, srdgo_open(__VA_ARGS__))
#define srdgo_query_device(...) SRD_UNFORKED(ENODEV, srdgo_query_device(__VA_ARGS__))
#define srdgo_query_port(...) SRD_UNFORKED(ENODEV, srdgo_query_port(__VA_ARGS__))
#define srdgo_query_gid(...) SRD_UNFORKED(ENODEV, srdgo_query_gid(__VA_ARGS__))
#define srdgo_alloc_pd(...) SRD_UNFORKED(ENODEV, srdgo_alloc_pd(__VA_ARGS__))
#define srdgo_reg_mr(...) SRD_UNFORKED(ENODEV, srdgo_reg_mr(__VA_ARGS__))
#define srdgo_rereg_mr(...) SRD_UNFORKED(ENODEV, srdgo_rereg_mr(__VA_ARGS__))
#define srdgo_alloc_mw(...) SRD_UNFORKED(ENODEV, srdgo_alloc_mw(__VA_ARGS__))
#define srdgo_create_channel(...) SRD_UNFORKED(ENODEV, srdgo_create_channel(__VA_ARGS__))
#define srdgo_create_cq(...) SRD_UNFORKED(ENODEV, srdgo_create_cq(__VA_ARGS__))
#define srdgo_resize_cq(...) SRD_UNFORKED(ENODEV, srdgo_resize_cq(__VA_ARGS__))
#define srdgo_req_notify_cq(...) SRD_UNFORKED(ENODEV, srdgo_req_notify_cq(__VA_ARGS__))
#define srdgo_create_srq(...) SRD_UNFORKED(ENODEV, srdgo_create_srq(__VA_ARGS__))
#define srdgo_modify_srq(...) SRD_UNFORKED(ENODEV, srdgo_modify_srq(__VA_ARGS__))
#define srdgo_query_srq(...) SRD_UNFORKED(ENODEV, srdgo_query_srq(__VA_ARGS__))
#define srdgo_post_srq_recv(...) SRD_UNFORKED(ENODEV, srdgo_post_srq_recv(__VA_ARGS__))
#define srdgo_create_ah(...) SRD_UNFORKED(ENODEV, srdgo_create_ah(__VA_ARGS__))
#define srdgo_create_qp(...) SRD_UNFORKED(ENODEV, srdgo_create_qp(__VA_ARGS__))
#define srdgo_modify_qp(...) SRD_UNFORKED(ENODEV, srdgo_modify_qp(__VA_ARGS__))
#define srdgo_query_qp(...) SRD_UNFORKED(ENODEV, srdgo_query_qp(__VA_ARGS__))
#define srdgo_post_send(...) SRD_UNFORKED(ENODEV, srdgo_post_send(__VA_ARGS__))
#define srdgo_post_recv(...) SRD_UNFORKED(ENODEV, srdgo_post_recv(__VA_ARGS__))
#define srdgo_qp_set_feed(...) SRD_UNFORKED(ENODEV, srdgo_qp_set_feed(__VA_ARGS__))
#define srdgo_qp_set_rfeed(...) SRD_UNFORKED(ENODEV, srdgo_qp_set_rfeed(__VA_ARGS__))
#define srdgo_dealloc_pd(...) SRD_UNFORKED(0, srdgo_dealloc_pd(__VA_ARGS__))
#define srdgo_dereg_mr(...) SRD_UNFORKED(0, srdgo_dereg_mr(__VA_ARGS__))
#define srdgo_dealloc_mw(...) SRD_UNFORKED(0, srdgo_dealloc_mw(__VA_ARGS__))
#define srdgo_destroy_channel(...) SRD_UNFORKED(0, srdgo_destroy_channel(__VA_ARGS__))
#define srdgo_destroy_cq(...) SRD_UNFORKED(0, srdgo_destroy_cq(__VA_ARGS__))
#define srdgo_destroy_srq(...) SRD_UNFORKED(0, srdgo_destroy_srq(__VA_ARGS__))
#define srdgo_destroy_ah(...) SRD_UNFORKED(0, srdgo_destroy_ah(__VA_ARGS__))
#define srdgo_destroy_qp(...) SRD_UNFORKED(0, srdgo_destroy_qp(__VA_ARGS__))
#define srdgo_close(...) SRD_UNFORKED((void)0, srdgo_close(__VA_ARGS__))
#define srdgo_cm_destroy_id(...) SRD_UNFORKED((void)0, srdgo_cm_destroy_id(__VA_ARGS__))
#define srdgo_cm_close_fd(...) SRD_UNFORKED((void)0, srdgo_cm_close_fd(__VA_ARGS__))
#define srdgo_channel_progress(...) SRD_UNFORKED((void)0, srdgo_channel_progress(__VA_ARGS__))
#define srdgo_channel_block(...) SRD_UNFORKED((void)0, srdgo_channel_block(__VA_ARGS__))
#define srdgo_take_feed(...) SRD_UNFORKED((void)0, srdgo_take_feed(__VA_ARGS__))
#define srdgo_take_rfeed(...) SRD_UNFORKED((void)0, srdgo_take_rfeed(__VA_ARGS__))
#define srdgo_dev_info(...) SRD_UNFORKED((void)0, srdgo_dev_info(__VA_ARGS__))
#define srdgo_dev_count(...) SRD_UNFORKED(0, srdgo_dev_count(__VA_ARGS__))
#define srdgo_poll_cq(...) SRD_UNFORKED(-ENODEV, srdgo_poll_cq(__VA_ARGS__))
#define srdgo_ifindex(...) SRD_UNFORKED(0, srdgo_ifindex(__VA_ARGS__))

#endif
