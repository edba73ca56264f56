package cm

import (
	"errors"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// fakeQP records the Modify calls and follows the state they set.
type fakeQP struct {
	verbs.QP
	typ   verbs.QPType
	state verbs.QPState
	calls []call
	fail  verbs.QPState // Modify to this state fails
}

type call struct {
	attr verbs.QPAttr
	mask verbs.QPAttrMask
}

var errFake = errors.New("refused")

func (q *fakeQP) QPNum() uint32        { return 0x11 }
func (q *fakeQP) Type() verbs.QPType   { return q.typ }
func (q *fakeQP) State() verbs.QPState { return q.state }
func (q *fakeQP) Modify(a *verbs.QPAttr, m verbs.QPAttrMask) error {
	q.calls = append(q.calls, call{*a, m})
	if a.QPState == q.fail {
		return errFake
	}
	if _, err := verbs.CheckModify(q.state, q.typ, a, m); err != nil {
		return err
	}
	q.state = a.QPState
	return nil
}

func TestConnectMasks(t *testing.T) {
	local := Endpoint{QPN: 0x11, PSN: 0x111, GID: verbs.GID{15: 1}}
	remote := Endpoint{QPN: 0x22, PSN: 0x222, GID: verbs.GID{15: 2}, LID: 7}
	const (
		initRC = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
		initUD = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey
		rtrUC  = verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		rtrRC  = rtrUC | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		rtsUC  = verbs.QPAttrState | verbs.QPAttrSQPSN
		rtsRC  = rtsUC | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	)
	for _, tt := range []struct {
		typ  verbs.QPType
		want []verbs.QPAttrMask
	}{
		{verbs.QPTypeRC, []verbs.QPAttrMask{initRC, rtrRC, rtsRC}},
		{verbs.QPTypeUC, []verbs.QPAttrMask{initRC, rtrUC, rtsUC}},
		{verbs.QPTypeUD, []verbs.QPAttrMask{initUD, verbs.QPAttrState, rtsUC}},
	} {
		qp := &fakeQP{typ: tt.typ}
		if err := Connect(qp, local, remote, nil); err != nil {
			t.Fatalf("%v: %v", tt.typ, err)
		}
		if qp.state != verbs.QPStateRTS || len(qp.calls) != 3 {
			t.Fatalf("%v: state %v after %d calls", tt.typ, qp.state, len(qp.calls))
		}
		for i, c := range qp.calls {
			if c.mask != tt.want[i] {
				t.Errorf("%v step %d: mask %v, want %v", tt.typ, i, c.mask, tt.want[i])
			}
		}
		if tt.typ == verbs.QPTypeUD {
			continue
		}
		d := DefaultParams()
		rtr, rts := qp.calls[1].attr, qp.calls[2].attr
		wantAV := verbs.AHAttr{IsGlobal: true, DLID: 7, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: remote.GID, HopLimit: 64}}
		if rtr.PathMTU != verbs.MTU1024 || rtr.DestQPNum != 0x22 || rtr.RQPSN != 0x222 || rtr.AHAttr != wantAV ||
			rtr.MaxDestRdAtomic != d.MaxDestRdAtomic || rtr.MinRNRTimer != 12 {
			t.Errorf("%v RTR attr %+v", tt.typ, rtr)
		}
		if rts.SQPSN != 0x111 || rts.Timeout != 14 || rts.RetryCnt != 7 || rts.RNRRetry != 7 || rts.MaxRdAtomic != 1 {
			t.Errorf("%v RTS attr %+v", tt.typ, rts)
		}
	}
}

func TestGRH(t *testing.T) {
	for _, always := range []bool{false, true} {
		qp := &fakeQP{typ: verbs.QPTypeRC, state: verbs.QPStateInit}
		p := DefaultParams()
		p.AlwaysGRH = always
		if err := ReadyToReceive(qp, Endpoint{QPN: 2, LID: 3}, &p); err != nil {
			t.Fatal(err)
		}
		if got := qp.calls[0].attr.AHAttr.IsGlobal; got != always {
			t.Errorf("zero GID, AlwaysGRH %v: IsGlobal %v", always, got)
		}
	}
}

// TestStepError: the error names the QP and the transition and unwraps to
// the provider's error; Connect skips INIT for a QP already there.
func TestStepError(t *testing.T) {
	qp := &fakeQP{typ: verbs.QPTypeRC, state: verbs.QPStateInit, fail: verbs.QPStateRTS}
	err := Connect(qp, Endpoint{}, Endpoint{QPN: 2, GID: verbs.GID{15: 1}}, nil)
	var se *StepError
	if !errors.As(err, &se) || !errors.Is(err, errFake) || se.From != verbs.QPStateRTR || se.To != verbs.QPStateRTS {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "QP 0x11") || !strings.Contains(err.Error(), "RTR → RTS") {
		t.Errorf("message %q", err)
	}
	if len(qp.calls) != 2 {
		t.Errorf("%d Modify calls from INIT, want 2", len(qp.calls))
	}
}
