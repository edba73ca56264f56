package device

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/provider/soft"
)

// Env is every SOFTRDMA_* environment variable the tools read, read in
// this one place: the library reads none, so a program that imports it
// behaves as its code says, and the tools map the variables to Config
// fields here. docs/tools.md lists them.
type Env struct {
	// Addr (SOFTRDMA_ADDR) is the local IP address a tool's device uses
	// when -d does not name another device.
	Addr string
	// Device (SOFTRDMA_DEVICE) names the shared-memory device the
	// rdma_cm tools use (shm0, ...); their flags have no -d.
	Device string
	// Log (SOFTRDMA_LOG=1) logs the device's QP errors, retransmissions
	// and drops on stderr, as --log does.
	Log bool
	// Trace (SOFTRDMA_TRACE=FILE) writes a runtime/trace of the command.
	Trace string
	// CPUProfile (SOFTRDMA_CPUPROFILE=FILE) writes a CPU profile of the
	// command (go tool pprof reads it).
	CPUProfile string
	// Counters (SOFTRDMA_COUNTERS=FILE) writes the softrdma devices'
	// counters to FILE when the tool ends ("name value" lines, one block
	// per device), for scripts that compare runs (retransmissions, drops).
	Counters string
	// NoProgress (SOFTRDMA_NO_PROGRESS set to anything) turns the
	// progress bar off even on a terminal.
	NoProgress bool

	// The switches of provider/soft's Config, for A/B measurements
	// without a rebuild.
	SpinPolls         int  // SOFTRDMA_SPIN_POLLS=N: Config.SpinPolls
	NoInlinePoll      bool // SOFTRDMA_NO_INLINE_POLL=1: Config.NoInlinePoll
	NoDeferredAck     bool // SOFTRDMA_NO_DEFERRED_ACK=1: Config.NoDeferredAck
	NoGather          bool // SOFTRDMA_NO_GATHER=1: Config.NoGather
	NoSplitWrites     bool // SOFTRDMA_NO_SPLIT_WRITES=1: Config.NoSplitWrites
	SplitWritesAlways bool // SOFTRDMA_SPLIT_WRITES=always: Config.SplitWritesAlways
	// CC (SOFTRDMA_CC=dcqcn|delay|off) sets Config.CC.Algorithm; CCSet says
	// the variable was given.
	CC    soft.CCAlgorithm
	CCSet bool

	// EventSpin (SOFTRDMA_EVENT_SPIN=DURATION, 0 for none) is how long the
	// C library's ibv_get_cq_event receives for the device before it
	// blocks (clib); EventSpinSet says the variable was given.
	EventSpin    time.Duration
	EventSpinSet bool
}

// ReadEnv reads the variables through getenv (os.Getenv in the tools, a
// map in tests). A value it cannot parse is an error that names the
// variable, rather than a setting silently ignored.
func ReadEnv(getenv func(string) string) (Env, error) {
	e := Env{
		Addr:       getenv("SOFTRDMA_ADDR"),
		Device:     getenv("SOFTRDMA_DEVICE"),
		Trace:      getenv("SOFTRDMA_TRACE"),
		CPUProfile: getenv("SOFTRDMA_CPUPROFILE"),
		Counters:   getenv("SOFTRDMA_COUNTERS"),
		NoProgress: getenv("SOFTRDMA_NO_PROGRESS") != "",
	}
	if v := getenv("SOFTRDMA_SPIN_POLLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Env{}, fmt.Errorf("SOFTRDMA_SPIN_POLLS=%q: want an integer (a negative one never polls)", v)
		}
		e.SpinPolls = n
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{
		{"SOFTRDMA_LOG", &e.Log},
		{"SOFTRDMA_NO_INLINE_POLL", &e.NoInlinePoll},
		{"SOFTRDMA_NO_DEFERRED_ACK", &e.NoDeferredAck},
		{"SOFTRDMA_NO_GATHER", &e.NoGather},
		{"SOFTRDMA_NO_SPLIT_WRITES", &e.NoSplitWrites},
	} {
		switch v := getenv(b.name); v {
		case "", "0":
		case "1":
			*b.dst = true
		default:
			return Env{}, fmt.Errorf("%s=%q: want 1 (on) or 0 (off)", b.name, v)
		}
	}
	switch v := getenv("SOFTRDMA_CC"); v {
	case "":
	case "dcqcn":
		e.CC, e.CCSet = soft.CCDCQCN, true
	case "off":
		e.CC, e.CCSet = soft.CCOff, true
	case "delay":
		e.CC, e.CCSet = soft.CCDelay, true
	default:
		return Env{}, fmt.Errorf("SOFTRDMA_CC=%q: want dcqcn (congestion control, the default), delay or off", v)
	}
	if v := getenv("SOFTRDMA_EVENT_SPIN"); v != "" {
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 || d > time.Second {
			return Env{}, fmt.Errorf("SOFTRDMA_EVENT_SPIN=%q: want a duration from 0 (never spin) to 1s, such as 50us", v)
		}
		e.EventSpin, e.EventSpinSet = d, true
	}
	switch v := getenv("SOFTRDMA_SPLIT_WRITES"); v {
	case "":
	case "always":
		e.SplitWritesAlways = true
	default:
		return Env{}, fmt.Errorf("SOFTRDMA_SPLIT_WRITES=%q: the only value is \"always\" (split WRITEs to every peer)", v)
	}
	return e, nil
}

// LoadEnv reads the process's environment.
func LoadEnv() (Env, error) { return ReadEnv(os.Getenv) }

// Tune sets cfg's switches that the environment turns on. It leaves a
// switch the code already set as it is.
func (e *Env) Tune(cfg *soft.Config) {
	if cfg.SpinPolls == 0 {
		cfg.SpinPolls = e.SpinPolls
	}
	cfg.NoInlinePoll = cfg.NoInlinePoll || e.NoInlinePoll
	cfg.NoDeferredAck = cfg.NoDeferredAck || e.NoDeferredAck
	cfg.NoGather = cfg.NoGather || e.NoGather
	cfg.NoSplitWrites = cfg.NoSplitWrites || e.NoSplitWrites
	cfg.SplitWritesAlways = cfg.SplitWritesAlways || e.SplitWritesAlways
	if e.CCSet && cfg.CC.Algorithm == soft.CCDCQCN {
		cfg.CC.Algorithm = e.CC
	}
}
