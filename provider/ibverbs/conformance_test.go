//go:build ibverbs && cgo && linux

package ibverbs

import (
	"strings"
	"testing"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs/verbstest"
)

// The verbs conformance suite against a kernel device: two contexts
// opened on it (SOFTRDMA_IBVERBS_DEVICE, the interop VM's rxe0), whose
// QPs reach each other through the device's loopback.
func TestConformance(t *testing.T) {
	openOrSkip(t) // skip the whole suite without a device
	verbstest.Run(t, func(t testing.TB) verbstest.Pair {
		a, b := openOrSkip(t), openOrSkip(t)
		p := verbstest.Pair{A: a, B: b, GIDIndex: roceIndex(t, a),
			Tune: func(p *cm.Params) {
				// rxe retries forever with a retry count of 7
				// (rxe_comp.c), which IBTA reserves for the RNR retry
				// count only; 6 keeps the cases that wait for
				// RETRY_EXC_ERR (a peer whose device closed) finite.
				p.RetryCnt = 6
			}}
		if strings.HasPrefix(a.Device().Name(), "rxe") {
			// What the kernel's rxe (Linux 6.1, the interop VM's)
			// does differently from the suite's rules. Each is the
			// kernel's behaviour: the provider passes completions and
			// events through as the device reports them.
			p.Lacks = map[verbstest.Feature]string{
				verbstest.ResponderAccessEvents: "rxe moves the responder QP to ERR after a remote access error without raising IBV_EVENT_QP_ACCESS_ERR",
				verbstest.LastWQEEvent:          "rxe raises no IBV_EVENT_QP_LAST_WQE_REACHED when a QP on an SRQ enters ERR",
				verbstest.LocalKeyStatus:        "rxe completes a request whose lkey names no region of the PD with LOC_QP_OP_ERR",
				verbstest.LengthNAKStatus:       "rxe completes a SEND longer than its receive with REM_OP_ERR, and the receive with LOC_QP_OP_ERR",
				verbstest.LengthErrEvent:        "rxe moves the responder QP to ERR after a SEND longer than its receive without raising IBV_EVENT_QP_REQ_ERR",
				verbstest.FlushPostedInErr:      "rxe leaves a receive posted to a QP in ERR queued instead of flushing it",
				verbstest.SendInvRefused:        "rxe invalidates the rkey of an ibv_reg_mr region on SEND_WITH_INV instead of refusing it",
				verbstest.WindowBounds:          "rxe checks an access through a memory window against the region's range only (rxe_resp.c check_rkey)",
				verbstest.InvalidateFlag:        "rxe's receive of a SEND_WITH_INV has IBV_WC_IP_CSUM_OK where IBV_WC_WITH_INV belongs (the kernel's IB_WC_WITH_INVALIDATE bit)",
			}
		}
		return p
	})
}
