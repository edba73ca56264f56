package wire

// RoCEv2 lets the sender pick the UDP source port to spread flows over
// receive queues (IBTA annex A17: any port in the dynamic range 0xC000-
// 0xFFFF). Receivers must not filter on it; these helpers reproduce the
// choices of Linux 6.1 rxe so that captures of softrdma look like rxe's.

// FlowLabel returns the 20-bit flow label Linux derives for traffic between
// two QPs when the address handle has none (rdma_calc_flow_label). It is
// symmetric: both ends of a connection compute the same label.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn&0xFFFFFF) * uint64(rqpn&0xFFFFFF)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v) & 0xFFFFF
}

// FlowLabelSourcePort folds a 20-bit flow label into a UDP source port in
// 0xC000-0xFFFF (rdma_flow_label_to_udp_sport).
func FlowLabelSourcePort(flowLabel uint32) uint16 {
	low := flowLabel & 0x3FFF
	low ^= (flowLabel & 0xFC000) >> 14
	return uint16(low | 0xC000)
}

// SourcePort returns the UDP source port rxe uses for an RC or UC QP lqpn
// connected to rqpn: FlowLabelSourcePort(FlowLabel(lqpn, rqpn)). Both ends
// of a connection send from the same port.
func SourcePort(lqpn, rqpn uint32) uint16 {
	return FlowLabelSourcePort(FlowLabel(lqpn, rqpn))
}

// UDSourcePort returns the UDP source port rxe uses for a UD QP: 0xC000
// plus a 14-bit multiplicative hash of the QPN (hash_32 in rxe_qp.c).
func UDSourcePort(qpn uint32) uint16 {
	return uint16(0xC000 + (qpn*0x61C88647)>>(32-14))
}
