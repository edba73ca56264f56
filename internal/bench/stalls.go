package bench

// Stalls counts the protocol events that slow a measurement down without
// failing it: a receiver without a posted receive WQE answers a SEND with
// an RNR NAK and the sender waits min_rnr_timer before resending; a lost
// packet or ACK costs a local ACK timeout or a sequence NAK and a go-back-N
// retransmission. A row whose rate collapsed shows here why.
//
// The values are the growth of the devices' counters (summed over both
// ends) while the row ran; see Delta.
type Stalls struct {
	RNRNAKsSent uint64 // RNR NAKs the responders sent (send_rnr_err)
	RNRNAKsRcvd uint64 // RNR NAKs the requesters received (rcvd_rnr_err)
	SeqNAKsRcvd uint64 // PSN sequence-error NAKs received (rcvd_seq_err)
	Timeouts    uint64 // local ACK timeouts (timeouts)
	Retransmits uint64 // packets sent again by go-back-N (retransmits)
}

// Counters is a set of named device counters, as a device's
// Counters.Snapshot lists them (rxe's names: send_rnr_err, retransmits,
// ...), summed over the devices of a run.
type Counters map[string]uint64

// Add adds one counter, so that the snapshots of both devices sum into one
// set.
func (c Counters) Add(name string, v uint64) { c[name] += v }

// Delta returns the stalls counted between before and after.
func Delta(before, after Counters) Stalls {
	d := func(name string) uint64 { return after[name] - before[name] }
	return Stalls{
		RNRNAKsSent: d("send_rnr_err"),
		RNRNAKsRcvd: d("rcvd_rnr_err"),
		SeqNAKsRcvd: d("rcvd_seq_err"),
		Timeouts:    d("timeouts"),
		Retransmits: d("retransmits"),
	}
}

// Any reports whether anything stalled.
func (s Stalls) Any() bool { return s != Stalls{} }
