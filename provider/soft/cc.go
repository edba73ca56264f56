package soft

import (
	"time"

	"github.com/softrdma/softrdma/congestion"
	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/transport"
)

// CCAlgorithm selects a device's congestion control (Config.CC); see the
// congestion package.
type CCAlgorithm = congestion.Algorithm

const (
	// CCDCQCN is DCQCN, as RoCE NICs run it (the default).
	CCDCQCN = congestion.DCQCN
	// CCOff sends packets not ECN-capable, sends no CNPs and ignores
	// those it gets, as Linux rxe does.
	CCOff = congestion.Off
	// CCDelay is the delay-based alternative (congestion.Delay).
	CCDelay = congestion.Delay
)

// CongestionControl configures a device's congestion control
// (Config.CC); its zero value is DCQCN with the paper's parameters.
type CongestionControl = congestion.Config

// socketTClass is the traffic class the device's UDP sockets send with:
// that of most of its packets, so that they need no per-message control
// message.
func socketTClass(c *CongestionControl) uint8 {
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
