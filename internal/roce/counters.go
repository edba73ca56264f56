package roce

import "sync/atomic"

// Counters are the device's statistics. The first group mirrors the names
// of rxe's hw_counters (/sys/class/infiniband/rxe0/ports/1/hw_counters) so
// the two can be compared side by side; the rest count what softrdma drops
// and why. All fields are updated atomically and safe to read at any time.
type Counters struct {
	SentPkts            atomic.Uint64 // sent_pkts
	RcvdPkts            atomic.Uint64 // rcvd_pkts
	DuplicateRequest    atomic.Uint64 // duplicate_request
	OutOfSeqRequest     atomic.Uint64 // out_of_seq_request
	RcvdRNRErr          atomic.Uint64 // rcvd_rnr_err
	SendRNRErr          atomic.Uint64 // send_rnr_err
	RcvdSeqErr          atomic.Uint64 // rcvd_seq_err
	RetryExceededErr    atomic.Uint64 // retry_exceeded_err
	RetryRNRExceededErr atomic.Uint64 // retry_rnr_exceeded_err
	CompleterRetryErr   atomic.Uint64 // completer_retry_err
	SendErr             atomic.Uint64 // send_err
	RDMASends           atomic.Uint64 // rdma_sends
	RDMARecvs           atomic.Uint64 // rdma_recvs

	Timeouts           atomic.Uint64 // local ACK timeouts that led to a retransmission
	Retransmits        atomic.Uint64 // packets sent again by go-back-N
	DropICRC           atomic.Uint64 // ICRC checked and wrong
	DropICRCUnverified atomic.Uint64 // ICRC not checkable and AcceptUnverifiedICRC off
	DropMalformed      atomic.Uint64 // headers that do not parse
	DropUnknownQP      atomic.Uint64 // no QP with the destination QPN
	DropQPState        atomic.Uint64 // QP not in a state that receives
	DropWrongSource    atomic.Uint64 // RC/UC packet not from the QP's peer
	DropWrongTransport atomic.Uint64 // opcode of another transport (RC opcode to a UD QP, ...)
	DropPKey           atomic.Uint64 // P_Key mismatch
	DropQKey           atomic.Uint64 // UD Q_Key mismatch
	DropNoMADHandler   atomic.Uint64 // a MAD for QP1 with no handler installed
	MADsRcvd           atomic.Uint64 // MADs handed to QP1's handler
	MADsAnswered       atomic.Uint64 // MADs nobody handles, answered as the kernel does (REJ, SIDR_REP, bad class)
	EventsDropped      atomic.Uint64 // asynchronous events the application's channel had no room for
	DropNoRecvWQE      atomic.Uint64 // UD/UC message with no receive WQE posted
	DropOutOfWindow    atomic.Uint64 // responses outside the PSNs in flight (duplicates or forgeries)
	DropBadReplay      atomic.Uint64 // duplicate READs or atomics that do not match the request they repeat
	DropBadInvalidate  atomic.Uint64 // SEND_WITH_INV naming a key it may not invalidate
	DropTooLong        atomic.Uint64 // READs longer than allowed, UD payloads beyond the path MTU
	DropAuth           atomic.Uint64 // protected QP: the packet's tag does not check (forged or modified)
	DropReplay         atomic.Uint64 // protected QP: the packet's sequence number was seen before
	DropUnexpected     atomic.Uint64 // responses that match no outstanding request
	DropUC             atomic.Uint64 // UC packets dropped because of a PSN gap
	DropEarlyDuplicate atomic.Uint64 // RC "duplicate" requests before any request came in: nothing can be repeated yet
	NAKsSent           atomic.Uint64 // NAKs other than RNR and sequence
	NAKsRcvd           atomic.Uint64
	CQOverrun          atomic.Uint64 // completions lost because a CQ was full
	KeepaliveProbes    atomic.Uint64 // probes sent to the peers of idle RC QPs (Config.Keepalive)
	KeepaliveFailures  atomic.Uint64 // probes whose retries ran out: the QP went to ERR
	FeedTaken          atomic.Uint64 // send requests a QP took from its send feed (feed.go) rather than from PostSend
	FeedRefused        atomic.Uint64 // of those, requests the QP refused: each completed in error

	// Congestion control (cc.go).
	CEPktsRcvd     atomic.Uint64 // packets for RC/UC/UD QPs that arrived marked CE (mlx5: np_ecn_marked_roce_packets)
	CNPsSent       atomic.Uint64 // CNPs sent (np_cnp_sent)
	CNPsRcvd       atomic.Uint64 // CNPs that cut a QP's rate (rp_cnp_handled)
	CNPsIgnored    atomic.Uint64 // CNPs for a QP without congestion control (rp_cnp_ignored)
	CCRateCuts     atomic.Uint64 // rate decreases
	CCLimitedQPs   atomic.Uint64 // QPs rate-limited now (a gauge)
	CCLimitedNanos atomic.Uint64 // total time QPs spent rate-limited, counted as each recovers, in ns
}

// Counter is one named counter value.
type Counter struct {
	Name  string
	Value uint64
}

// Snapshot returns every counter with its name, in a stable order.
func (c *Counters) Snapshot() []Counter {
	return []Counter{
		{"sent_pkts", c.SentPkts.Load()},
		{"rcvd_pkts", c.RcvdPkts.Load()},
		{"duplicate_request", c.DuplicateRequest.Load()},
		{"out_of_seq_request", c.OutOfSeqRequest.Load()},
		{"rcvd_rnr_err", c.RcvdRNRErr.Load()},
		{"send_rnr_err", c.SendRNRErr.Load()},
		{"rcvd_seq_err", c.RcvdSeqErr.Load()},
		{"retry_exceeded_err", c.RetryExceededErr.Load()},
		{"retry_rnr_exceeded_err", c.RetryRNRExceededErr.Load()},
		{"completer_retry_err", c.CompleterRetryErr.Load()},
		{"send_err", c.SendErr.Load()},
		{"rdma_sends", c.RDMASends.Load()},
		{"rdma_recvs", c.RDMARecvs.Load()},
		{"timeouts", c.Timeouts.Load()},
		{"retransmits", c.Retransmits.Load()},
		{"drop_icrc", c.DropICRC.Load()},
		{"drop_icrc_unverified", c.DropICRCUnverified.Load()},
		{"drop_malformed", c.DropMalformed.Load()},
		{"drop_unknown_qp", c.DropUnknownQP.Load()},
		{"drop_qp_state", c.DropQPState.Load()},
		{"drop_wrong_source", c.DropWrongSource.Load()},
		{"drop_wrong_transport", c.DropWrongTransport.Load()},
		{"drop_pkey", c.DropPKey.Load()},
		{"drop_qkey", c.DropQKey.Load()},
		{"drop_no_mad_handler", c.DropNoMADHandler.Load()},
		{"mads_rcvd", c.MADsRcvd.Load()},
		{"mads_answered", c.MADsAnswered.Load()},
		{"events_dropped", c.EventsDropped.Load()},
		{"drop_no_recv_wqe", c.DropNoRecvWQE.Load()},
		{"drop_out_of_window", c.DropOutOfWindow.Load()},
		{"drop_bad_replay", c.DropBadReplay.Load()},
		{"bad_invalidate", c.DropBadInvalidate.Load()},
		{"drop_too_long", c.DropTooLong.Load()},
		{"drop_auth", c.DropAuth.Load()},
		{"drop_replay", c.DropReplay.Load()},
		{"drop_unexpected", c.DropUnexpected.Load()},
		{"drop_uc", c.DropUC.Load()},
		{"drop_early_duplicate", c.DropEarlyDuplicate.Load()},
		{"naks_sent", c.NAKsSent.Load()},
		{"naks_rcvd", c.NAKsRcvd.Load()},
		{"cq_overrun", c.CQOverrun.Load()},
		{"keepalive_probes", c.KeepaliveProbes.Load()},
		{"keepalive_failures", c.KeepaliveFailures.Load()},
		{"feed_taken", c.FeedTaken.Load()},
		{"feed_refused", c.FeedRefused.Load()},
		{"np_ecn_marked_roce_packets", c.CEPktsRcvd.Load()},
		{"np_cnp_sent", c.CNPsSent.Load()},
		{"rp_cnp_handled", c.CNPsRcvd.Load()},
		{"rp_cnp_ignored", c.CNPsIgnored.Load()},
		{"cc_rate_cuts", c.CCRateCuts.Load()},
		{"cc_limited_qps", c.CCLimitedQPs.Load()},
		{"cc_limited_ns", c.CCLimitedNanos.Load()},
	}
}
