// Package verbs is softrdma's RDMA programming interface, modelled on
// libibverbs so that an RDMA programmer feels at home: devices and ports with
// GID tables, protection domains (PD), memory regions (MR) with local and
// remote keys, completion queues (CQ) with polling, blocking waits and
// completion channels, queue pairs (QP) of type RC, UC and UD with the
// RESET → INIT → RTR → RTS state machine, shared receive queues (SRQ) and
// address handles (AH); and the work requests that move data: SEND, RDMA
// WRITE, RDMA READ and atomics.
//
// The package owns the public types and the provider interfaces. Providers
// implement them: provider/soft runs the RoCEv2 protocol in software over UDP;
// others may wrap hardware. A program finds devices with [Devices], opens one
// with [Device.Open] and works through the returned [Context].
//
// Naming follows libibverbs with Go conventions: ibv_post_send is
// [QP.PostSend], ibv_poll_cq is [CQ.Poll], struct ibv_qp_attr is [QPAttr],
// IBV_QP_PATH_MTU is [QPAttrPathMTU], IBV_WC_REM_ACCESS_ERR is
// [WCRemAccessErr], and so on.
//
// Errors: a misuse of the API returns a Go error that wraps one of the
// sentinel errors ([ErrInvalidArgument], [ErrInvalidState], [ErrNotSupported],
// [ErrQueueFull], [ErrInUse], [ErrDestroyed]) and says what to change. A work
// request that fails on the wire is not a Go error: it completes with a
// [WCStatus] other than [WCSuccess].
package verbs
