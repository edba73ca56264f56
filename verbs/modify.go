package verbs

import "fmt"

// transition lists, for one QP state transition, the attributes each QP type
// must supply and may supply (IBTA 11.2.5.2, table 93; the same table as
// Linux's ib_modify_qp_is_ok in drivers/infiniband/core/verbs.c).
type transition struct {
	valid    bool
	required [3]QPAttrMask // indexed by typeIndex: RC, UC, UD
	optional [3]QPAttrMask
}

func typeIndex(t QPType) int {
	switch t {
	case QPTypeRC:
		return 0
	case QPTypeUC:
		return 1
	case QPTypeUD:
		return 2
	}
	return -1
}

const (
	rcUCRTSOptional = QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState
)

var transitions = func() (t [7][7]transition) {
	always := func(from, to QPState) { t[from][to].valid = true }
	for from := QPStateReset; from <= QPStateErr; from++ {
		always(from, QPStateReset)
		always(from, QPStateErr)
	}
	t[QPStateReset][QPStateInit] = transition{valid: true,
		required: [3]QPAttrMask{
			QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
			QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
			QPAttrPKeyIndex | QPAttrPort | QPAttrQKey,
		}}
	t[QPStateInit][QPStateInit] = transition{valid: true,
		optional: [3]QPAttrMask{
			QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
			QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
			QPAttrPKeyIndex | QPAttrPort | QPAttrQKey,
		}}
	t[QPStateInit][QPStateRTR] = transition{valid: true,
		required: [3]QPAttrMask{
			QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
			0,
		},
		optional: [3]QPAttrMask{
			QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			QPAttrPKeyIndex | QPAttrQKey,
		}}
	t[QPStateRTR][QPStateRTS] = transition{valid: true,
		required: [3]QPAttrMask{
			QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxQPRdAtomic,
			QPAttrSQPSN,
			QPAttrSQPSN,
		},
		optional: [3]QPAttrMask{
			rcUCRTSOptional | QPAttrMinRNRTimer,
			rcUCRTSOptional,
			QPAttrCurState | QPAttrQKey,
		}}
	rtsOptional := [3]QPAttrMask{
		rcUCRTSOptional | QPAttrMinRNRTimer,
		rcUCRTSOptional,
		QPAttrCurState | QPAttrQKey,
	}
	t[QPStateRTS][QPStateRTS] = transition{valid: true, optional: rtsOptional}
	t[QPStateSQD][QPStateRTS] = transition{valid: true, optional: rtsOptional}
	t[QPStateRTS][QPStateSQD] = transition{valid: true, optional: [3]QPAttrMask{
		QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify}}
	t[QPStateSQD][QPStateSQD] = transition{valid: true, optional: [3]QPAttrMask{
		QPAttrPort | QPAttrAV | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic |
			QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState,
		QPAttrAV | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState,
		QPAttrPKeyIndex | QPAttrQKey,
	}}
	// SQE → RTS exists for UC and UD only: an RC send queue error moves
	// the whole QP to ERR.
	t[QPStateSQE][QPStateRTS] = transition{valid: true, optional: [3]QPAttrMask{
		0, QPAttrCurState | QPAttrAccessFlags, QPAttrCurState | QPAttrQKey}}
	return t
}()

// CheckModify validates a Modify call the way libibverbs and the kernel do:
// cur is the QP's current state, typ its type, and attr/mask the arguments.
// It returns the state the QP moves to. A provider calls it before applying
// anything, so an invalid call changes nothing.
func CheckModify(cur QPState, typ QPType, attr *QPAttr, mask QPAttrMask) (QPState, error) {
	const op = "ModifyQP"
	if attr == nil {
		return cur, Errorf(op, ErrInvalidArgument, "attr is nil")
	}
	ti := typeIndex(typ)
	if ti < 0 {
		return cur, Errorf(op, ErrInvalidArgument, "unknown QP type %v", typ)
	}
	if mask&^(qpAttrMaskLast-1) != 0 {
		return cur, Errorf(op, ErrInvalidArgument, "unknown attribute mask bits %v", mask&^(qpAttrMaskLast-1))
	}
	if mask&QPAttrCurState != 0 && attr.CurQPState != cur {
		return cur, Errorf(op, ErrInvalidState, "CUR_STATE says %v but the QP is in %v", attr.CurQPState, cur)
	}
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.QPState
	}
	if cur > QPStateErr || next > QPStateErr {
		return cur, Errorf(op, ErrInvalidArgument, "unknown QP state %v", next)
	}
	tr := &transitions[cur][next]
	if !tr.valid || (cur == QPStateSQE && next == QPStateRTS && typ == QPTypeRC) {
		return cur, Errorf(op, ErrInvalidState, "%v QP cannot move from %v to %v", typ, cur, next)
	}
	req, opt := tr.required[ti], tr.optional[ti]
	if missing := req &^ mask; missing != 0 {
		return cur, Errorf(op, ErrInvalidArgument, "%v → %v on a %v QP requires %v; set them in attr and the mask", cur, next, typ, missing)
	}
	if extra := mask &^ (req | opt | QPAttrState); extra != 0 {
		return cur, Errorf(op, ErrInvalidArgument, "%v → %v on a %v QP does not allow %v; remove them from the mask", cur, next, typ, extra)
	}
	if err := checkValues(attr, mask); err != nil {
		return cur, err
	}
	return next, nil
}

func checkValues(attr *QPAttr, mask QPAttrMask) error {
	const op = "ModifyQP"
	bad := func(field string, v any, want string) error {
		return &Error{Op: op, Err: ErrInvalidArgument, Detail: fmt.Sprintf("%s = %v: %s", field, v, want)}
	}
	if mask&QPAttrPathMTU != 0 && !attr.PathMTU.Valid() {
		return bad("PathMTU", attr.PathMTU, "use one of MTU256 … MTU4096")
	}
	if mask&QPAttrPort != 0 && attr.PortNum != 1 {
		return bad("PortNum", attr.PortNum, "softrdma devices have one port, number 1")
	}
	if mask&QPAttrRQPSN != 0 && attr.RQPSN > 0xFFFFFF {
		return bad("RQPSN", attr.RQPSN, "PSNs are 24 bits")
	}
	if mask&QPAttrSQPSN != 0 && attr.SQPSN > 0xFFFFFF {
		return bad("SQPSN", attr.SQPSN, "PSNs are 24 bits")
	}
	if mask&QPAttrDestQPN != 0 && attr.DestQPNum > 0xFFFFFF {
		return bad("DestQPNum", attr.DestQPNum, "QP numbers are 24 bits")
	}
	if mask&QPAttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return bad("MinRNRTimer", attr.MinRNRTimer, "RNR timer codes are 0..31")
	}
	if mask&QPAttrTimeout != 0 && attr.Timeout > 31 {
		return bad("Timeout", attr.Timeout, "timeout codes are 0..31")
	}
	if mask&QPAttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return bad("RetryCnt", attr.RetryCnt, "retry counts are 0..7")
	}
	if mask&QPAttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return bad("RNRRetry", attr.RNRRetry, "RNR retry counts are 0..7 (7 retries forever)")
	}
	if mask&QPAttrAccessFlags != 0 && attr.QPAccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return bad("QPAccessFlags", attr.QPAccessFlags, "only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ and REMOTE_ATOMIC apply to a QP")
	}
	return nil
}
