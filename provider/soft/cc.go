package soft

import (
	"time"

	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/transport"
)

// CCAlgorithm selects a device's congestion control.
type CCAlgorithm uint8

const (
	// CCDCQCN is DCQCN, as RoCE NICs run it (the default): packets leave
	// ECN-capable, a receiver answers packets a switch marked Congestion
	// Experienced with CNPs (BTH opcode 0x81), and a sender's QP that
	// gets CNPs paces its requests at a rate that DCQCN cuts and
	// recovers. docs/congestion.md says how.
	CCDCQCN CCAlgorithm = iota
	// CCOff sends packets not ECN-capable, sends no CNPs and ignores
	// those it gets, as Linux rxe does.
	CCOff
	// CCDelay is a delay-based alternative in the spirit of Swift: each
	// QP measures round trips and paces at a rate that falls when they
	// exceed TargetDelay and grows while they do not. It needs no ECN
	// and no CNPs (packets still leave ECN-capable, so marking switches
	// do not drop them).
	CCDelay
)

// String returns "dcqcn", "off" or "delay".
func (a CCAlgorithm) String() string { return roce.CCAlgorithm(a).String() }

// CongestionControl configures congestion control (Config.CC). Its zero
// value is DCQCN with the DCQCN paper's parameters (SIGCOMM 2015); each
// zero field takes its default. Rates are in bits per second. The names
// in parentheses are the matching mlx5 parameters
// (/sys/class/net/<if>/ecn/roce_rp and roce_np).
type CongestionControl struct {
	Algorithm CCAlgorithm
	// TClass is the IP traffic class byte (DSCP << 2) of packets whose
	// address vector names none (GRH.TrafficClass 0). With DCQCN the
	// ECN bits of every packet are ECT(0).
	TClass uint8
	// CNPTClass is the traffic class byte of CNPs; default 0xC0 (DSCP
	// 48, cnp_dscp).
	CNPTClass uint8
	// LineRate is the rate a QP starts from at its first CNP and is
	// released at once it recovers; default 100 Gbit/s. Set it to the
	// interface's speed.
	LineRate int64
	// MinRate is the lowest rate a cut goes to (rpg_min_rate); default
	// 1 Mbit/s.
	MinRate int64
	// CNPInterval is the least time between two CNPs for one QP
	// (min_time_between_cnps); default 50 µs.
	CNPInterval time.Duration
	// AlphaG is the gain g of α's moving average (dce_tcp_g); default
	// 1/256.
	AlphaG float64
	// InitialAlpha is α at a QP's first CNP (initial_alpha_value);
	// default 1.
	InitialAlpha float64
	// AlphaPeriod is how often α decays without CNPs (dce_tcp_rtt);
	// default 55 µs.
	AlphaPeriod time.Duration
	// RateTimer is the rate increase timer (rpg_time_reset); default
	// 55 µs.
	RateTimer time.Duration
	// ByteCounter is the rate increase byte counter (rpg_byte_reset);
	// default 10 MB.
	ByteCounter int64
	// FastRecovery is how many increase events of each kind are fast
	// recovery (rpg_threshold); default 5.
	FastRecovery int
	// AIRate is the additive increase step (rpg_ai_rate); default
	// 40 Mbit/s.
	AIRate int64
	// HAIRate is the hyper increase step (rpg_hai_rate); default
	// 400 Mbit/s.
	HAIRate int64
	// PaceBurst is how many bytes a paced QP may send back to back;
	// default 16 KiB.
	PaceBurst int

	// CCDelay's parameters: the round trip above which a QP slows down
	// (default 25 µs), the rate it adds per round trip below it
	// (default 50 Mbit/s), the decrease's scale β (default 0.8) and its
	// largest fraction (default 0.5).
	TargetDelay      time.Duration
	DelayAIRate      int64
	DelayBeta        float64
	DelayMaxDecrease float64
}

// engine returns the engine's form of c.
func (c *CongestionControl) engine() roce.CCConfig {
	return roce.CCConfig{
		Algorithm: roce.CCAlgorithm(c.Algorithm), TClass: c.TClass, CNPTClass: c.CNPTClass,
		LineRate: c.LineRate, MinRate: c.MinRate, CNPInterval: c.CNPInterval, AlphaG: c.AlphaG,
		InitialAlpha: c.InitialAlpha, AlphaPeriod: c.AlphaPeriod, RateTimer: c.RateTimer,
		ByteCounter: c.ByteCounter, FastRecovery: c.FastRecovery, AIRate: c.AIRate, HAIRate: c.HAIRate,
		PaceBurst: c.PaceBurst, TargetDelay: c.TargetDelay, DelayAIRate: c.DelayAIRate, DelayBeta: c.DelayBeta,
		DelayMaxDecrease: c.DelayMaxDecrease,
	}
}

// socketTClass is the traffic class the device's UDP sockets send with:
// that of most of its packets, so that they need no per-message control
// message.
func (c *CongestionControl) socketTClass() uint8 {
	tc := c.TClass &^ transport.ECNMask
	if c.Algorithm != CCOff {
		tc |= transport.ECNECT0
	}
	return tc
}

// QPRate is one QP's congestion control state (Device.QPRates).
type QPRate struct {
	QPN uint32
	// Limited says CNPs cut the QP's rate and it has not recovered; its
	// requests are paced at Rate.
	Limited bool
	// Rate and Target are DCQCN's current and target rates, bits per
	// second (the line rate while not limited).
	Rate, Target int64
	// Alpha is DCQCN's congestion estimate, 0 to 1.
	Alpha float64
	// Since is when the QP became limited.
	Since time.Time
}

// QPRates returns the congestion control state of every QP of the
// device, in no particular order.
func (d *Device) QPRates() []QPRate {
	var out []QPRate
	d.eng.EachQP(func(qp *roce.QP) {
		s := qp.CCState()
		out = append(out, QPRate{QPN: qp.QPNum(), Limited: s.Limited, Rate: s.Rate, Target: s.Target, Alpha: s.Alpha, Since: s.Since})
	})
	return out
}
