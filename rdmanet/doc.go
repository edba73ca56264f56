// Package rdmanet carries net.Conn and net.Listener over RDMA with
// librdmacm's rsocket protocol, so Go programs speak sockets over any
// softrdma provider and C programs that use rsocket (rstream, riostream,
// anything run under librspreload) are their peers.
//
// [Listen], [Dial] and [Dialer.DialContext] have Go's socket shapes; a
// [Conn] supports deadlines, half-close ([Conn.CloseWrite]), and a Close
// that wakes blocked Reads and Writes. The connection is set up with
// rdma_cm's protocol ([cm]); rsocket's connection data (struct
// rs_conn_data: version, flags, credits, the target SGL and the first
// half of the receive ring) rides in the REQ's and REP's private data.
// Data moves as RDMA WRITE WITH IMMEDIATE into the peer's receive ring,
// the immediate naming the operation and length; credits and fresh ring
// halves come back as RS_OP_SGL messages, shutdown and disconnect as
// RS_OP_CTRL, exactly as rsocket.c does, byte for byte. Everything the
// peer sends is checked: more messages than credits, more bytes than the
// ring space granted, or an unknown operation closes the connection.
//
// For event loops, [Conn.TryRead] and [Conn.TryWrite] never wait (they
// return [ErrWouldBlock]), [Conn.Ready] says what Read and Write would do
// now, and [Conn.SetNotify] names a function to call when that may have
// changed: softrdma's librdmacm builds rsocket's non-blocking calls and
// rpoll on them.
//
// [Connect] sets a connection up without the CM, over a stream both
// programs already have: for providers that carry no CM traffic (the
// shared-memory provider), or when an address exchange exists anyway.
// The data path is the same; a C rsocket peer cannot connect that way.
//
// rdmanet imports verbs and cm.
package rdmanet
