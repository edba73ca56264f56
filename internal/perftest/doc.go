// Package perftest implements what softrdma's perftest-compatible benchmarks
// need to interoperate with linux-rdma perftest 4.5 (ib_write_bw, ib_read_lat,
// ...; checked against 4.5-0.18, protocol version "6.06", the Debian 12
// package): the out-of-band TCP exchange byte for byte, perftest's statistics
// (peak/average bandwidth, latency median, stdev and percentiles with all of
// their quirks), and its report text and --out_json files.
//
// It depends only on the standard library and verbs (for [MTU], which is
// verbs.MTU) and moves plain values; the caller owns the queue pairs and
// the clock.
//
// # The exchange
//
// Every step is a symmetric swap of equal-sized messages: the client writes
// then reads, the server reads then writes. Over one TCP connection to port
// 18515 (rdma_cm off):
//
//	versions  16 bytes   "6.06" NUL-padded (strncpy into char[16])
//	sys data   4 bytes   page size ("cycle buffer"), big-endian int32 (4096)
//	           4 bytes   cache line size, big-endian int32 (64)
//	MTU        2 bytes   "%d" of the ibv_mtu enum and its NUL: "3\x00" = 1024
//	keys     108 bytes   one per QP, "%04x:%04x:%06x:%06x:%08x:%016llx:" LID,
//	                     out_reads, QPN, PSN, rkey, vaddr, then the 16 GID
//	                     bytes as "%02x:" each, then "%08x:" SRQN and a NUL
//	                     (59 bytes "...:%016llx:%08x\x00" without a GID, used
//	                     only on InfiniBand without -x)
//	barrier  108 bytes   a key exchange of QP 0's key again (ctx_hand_shake)
//	reports  8 bytes ×5  bandwidth report: size, iterations (uint64), peak,
//	                     average, message rate (float64), all big-endian, each
//	                     its own swap (×9 with --report-per-port)
//	close    barrier, then each side writes "done\x00" (5 bytes), which
//	         nobody reads, and closes
//
// The order of barriers and report swaps depends on the test; Session knows
// it (see ExchangeKeys, BeforeRun, AfterRun and Finish). For one QP and
// RUN_REGULAR (no -a), K = keys, B = barrier, R = report swap, C = close:
//
//	write/read/atomic BW   K K B | client: run, B R C | server: B R C (no run)
//	  with -b (duplex)     K K B | B run R | C
//	send BW (either -b)    K B K | B run [R if -b] | C
//	write lat              B K K B | run | nothing: no close at all
//	read/atomic lat        B K K B | client: run, C | server: C (no run)
//	send lat               K B K | B run | C
//
// With N QPs, each K above is N key swaps (one per QP); the leading B of the
// latency tests and every other B carry QP 0's key. The QPs are moved to RTR
// and RTS between the first and the second K.
//
// # Over rdma_cm (-R)
//
// With -R perftest connects the exchange itself through rdma_cm (an RC QP
// on port 18515, port space TCP) and runs the same steps as SEND/RECV
// messages, one SEND each way per swap (NewCMSession, Messenger). Keys and
// barriers are struct pingpong_dest in binary (DestBinarySize, 56 bytes,
// big-endian), "done" is not sent, and the GID types are not compared.
// Between the MTU swap and the first key the test's QPs connect through
// rdma_cm, between two barriers of an all-zero key (ConnectQPs, X):
//
//	write BW   VSSM X K K B | B R C     (C is the barrier alone)
//	send lat   VSSM X K B K | B | C
//
// The server of a non-duplex write/read/atomic BW test has no results of its
// own: its report swap sends uninitialized stack memory and it prints the
// client's report. perftest 4.5 refuses peers older than 5.70, and its
// --dont_xchg_versions makes it refuse every peer (the remote version stays
// empty), so the version swap is effectively mandatory.
package perftest
