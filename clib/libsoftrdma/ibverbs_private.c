//go:build clib

/*
 * rdma-core's private provider ABI (IBVERBS_PRIVATE_34). The kernel
 * providers' libraries (libmlx5, libefa, ...) that perftest and others
 * link against call these to talk to a kernel device; softrdma lists no
 * such device, so they are never called for real: each fails with
 * EOPNOTSUPP (or returns NULL), and verbs_register_driver_34, which those
 * libraries call when they load, registers nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

bool verbs_allow_disassociate_destroy;

void *_verbs_init_and_alloc_context(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_register_driver_34(void *ops)
{
}

void __verbs_log(void *ctx, int level, const char *fmt, ...)
{
}

void verbs_set_ops(void *ctx, const void *ops)
{
}

void verbs_uninit_context(void *ctx)
{
}

int execute_ioctl(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_advise_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_dm(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_mw(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_alloc_pd(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_attach_mcast(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_close_xrcd(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_ah(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_counters(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_cq_ex(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_flow_action_esp(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_qp_ex2(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_rwq_ind_table(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_srq_ex(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_create_wq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_mw(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dealloc_pd(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_dereg_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_ah(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_counters(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_cq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_flow_action(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_qp(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_rwq_ind_table(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_srq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_destroy_wq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_detach_mcast(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_free_dm(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_get_context(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_cq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_flow_action_esp(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_qp_ex(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_srq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_modify_wq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_qp(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_open_xrcd(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_context(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_device_any(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_port(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_qp(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_query_srq(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_read_counters(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dm_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_dmabuf_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_reg_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_rereg_mr(void)
{
	return EOPNOTSUPP;
}

int ibv_cmd_resize_cq(void)
{
	return EOPNOTSUPP;
}

int verbs_init_cq(void)
{
	return EOPNOTSUPP;
}

int verbs_open_device(void)
{
	return EOPNOTSUPP;
}

