// Package congestion holds the settings of congestion control for
// softrdma's RoCEv2 devices: which algorithm runs and its parameters.
//
// The default, DCQCN (Zhu et al., "Congestion Control for Large-Scale
// RDMA Deployments", SIGCOMM 2015), is what RoCE NICs run: packets leave
// ECN-capable, a receiver answers packets that a switch marked Congestion
// Experienced with CNPs (BTH opcode 0x81), and a QP that gets CNPs paces
// its requests at a rate DCQCN cuts and recovers. docs/congestion.md says
// how it works and how it was measured.
//
// The package only describes; provider/soft's Config.CC takes a Config
// and the engine runs it. It imports nothing but the standard library, so
// the engine and every provider can share one definition.
package congestion

import "time"

// Algorithm selects a device's congestion control.
type Algorithm uint8

const (
	// DCQCN: packets leave ECN-capable (ECT(0)), CE marks are answered
	// with CNPs, and CNPs cut the QP's rate (the default).
	DCQCN Algorithm = iota
	// Off: packets leave not ECN-capable (a congested switch drops
	// them), no CNPs are sent and CNPs received are ignored, as Linux
	// rxe does.
	Off
	// Delay is a delay-based alternative in the spirit of Swift: each QP
	// measures round trips and paces at a rate that falls when they
	// exceed Config.TargetDelay and grows while they do not. It needs no
	// ECN and no CNPs; packets still leave ECN-capable so that marking
	// switches do not drop them, marks are counted and CNPs ignored.
	Delay
)

// String returns "dcqcn", "off" or "delay".
func (a Algorithm) String() string {
	switch a {
	case DCQCN:
		return "dcqcn"
	case Off:
		return "off"
	case Delay:
		return "delay"
	}
	return "congestion.Algorithm(?)"
}

// Config configures congestion control. Its zero value is DCQCN with the
// paper's parameters; each zero field takes its default (the constants
// below). Rates are in bits per second. The names in parentheses are the
// matching mlx5 parameters (/sys/class/net/<if>/ecn/roce_rp and roce_np).
type Config struct {
	Algorithm Algorithm
	// TClass is the IP traffic class byte (DSCP in its top six bits) of
	// packets whose address vector names none (GRH.TrafficClass 0). With
	// DCQCN and Delay the ECN bits of every data packet are ECT(0),
	// whatever the address vector says; with Off the byte goes out as
	// given.
	TClass uint8
	// CNPTClass is the traffic class byte of CNPs (cnp_dscp); default
	// 0xC0, DSCP 48. Its ECN bits are set to ECT(0) too.
	CNPTClass uint8
	// LineRate is the rate a QP starts from at its first CNP and is
	// released at once it recovers; default 100 Gbit/s. Set it to the
	// interface's speed.
	LineRate int64
	// MinRate is the lowest rate a cut goes to (rpg_min_rate); default
	// 1 Mbit/s.
	MinRate int64
	// CNPInterval is the least time between two CNPs for one QP (the
	// paper's N, min_time_between_cnps); default 50 µs.
	CNPInterval time.Duration
	// AlphaG is the gain g of α's moving average; default 1/256 (mlx5's
	// dce_tcp_g 1019/1024 is 1 − g with g ≈ 1/205).
	AlphaG float64
	// InitialAlpha is α at a QP's first CNP (initial_alpha_value);
	// default 1.
	InitialAlpha float64
	// AlphaPeriod is how often α decays without CNPs (the paper's K,
	// dce_tcp_rtt); default 55 µs.
	AlphaPeriod time.Duration
	// RateTimer is the rate increase timer (the paper's T,
	// rpg_time_reset); default 55 µs.
	RateTimer time.Duration
	// ByteCounter is the rate increase byte counter (the paper's B,
	// rpg_byte_reset in bytes); default 10 MB.
	ByteCounter int64
	// FastRecovery is how many increase events of each kind are fast
	// recovery (the paper's F, rpg_threshold); default 5.
	FastRecovery int
	// AIRate is the additive increase step (R_AI, rpg_ai_rate); default
	// 40 Mbit/s.
	AIRate int64
	// HAIRate is the hyper increase step (R_HAI, rpg_hai_rate); default
	// 400 Mbit/s.
	HAIRate int64
	// PaceBurst is how many bytes a paced QP may send back to back
	// before it waits for its next transmission time; default 16 KiB (a
	// few packets per system call, and a timer that fires a little late
	// still finds the rate's worth to send).
	PaceBurst int

	// Delay's parameters. TargetDelay is the round trip above which a QP
	// slows down; default 25 µs. DelayAIRate is the rate added per round
	// trip below the target; default 50 Mbit/s. DelayBeta scales a
	// decrease by how far the round trip is above the target; default
	// 0.8. DelayMaxDecrease is the largest fraction one decrease takes
	// off; default 0.5.
	TargetDelay      time.Duration
	DelayAIRate      int64
	DelayBeta        float64
	DelayMaxDecrease float64
}

// The defaults of Config's zero fields.
const (
	DefaultLineRate         = 100_000_000_000
	DefaultMinRate          = 1_000_000
	DefaultCNPInterval      = 50 * time.Microsecond
	DefaultAlphaG           = 1.0 / 256
	DefaultInitialAlpha     = 1.0
	DefaultAlphaPeriod      = 55 * time.Microsecond
	DefaultRateTimer        = 55 * time.Microsecond
	DefaultByteCounter      = 10_000_000
	DefaultFastRecovery     = 5
	DefaultAIRate           = 40_000_000
	DefaultHAIRate          = 400_000_000
	DefaultPaceBurst        = 16 << 10
	DefaultCNPTClass        = 0xC0
	DefaultTargetDelay      = 25 * time.Microsecond
	DefaultDelayAIRate      = 50_000_000
	DefaultDelayBeta        = 0.8
	DefaultDelayMaxDecrease = 0.5
)
