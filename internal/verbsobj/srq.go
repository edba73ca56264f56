package verbsobj

import "github.com/softrdma/softrdma/verbs"

// CheckSRQInit validates CreateSRQ's attributes against the device's
// limits and returns the SGE count each WQE gets room for (at least 1).
// The limit in attr is ignored, as the IBTA says and ibv_create_srq(3)
// documents: only Modify arms it.
func CheckSRQInit(attr *verbs.SRQInitAttr, maxWR, maxSGE uint32) (uint32, error) {
	if attr == nil || attr.MaxWR == 0 || attr.MaxWR > maxWR {
		return 0, verbs.Errorf("CreateSRQ", verbs.ErrInvalidArgument, "MaxWR must be 1..%d", maxWR)
	}
	if attr.MaxSGE > maxSGE {
		return 0, verbs.Errorf("CreateSRQ", verbs.ErrInvalidArgument, "MaxSGE %d: at most %d", attr.MaxSGE, maxSGE)
	}
	return max(attr.MaxSGE, 1), nil
}

// SRQLimit is an SRQ's limit (low watermark) and its arming. It is not
// safe for concurrent use: the SRQ's lock guards it.
type SRQLimit struct {
	limit uint32
}

// Get returns the armed limit, 0 if disarmed (SRQAttr.SRQLimit).
func (l *SRQLimit) Get() uint32 { return l.limit }

// Modify applies SRQ.Modify's attributes to an SRQ of maxWR WQEs.
// Resizing is not supported; a limit above maxWR is invalid (rxe:
// EINVAL); a limit of 0 disarms.
func (l *SRQLimit) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask, maxWR uint32) error {
	if mask&^(verbs.SRQAttrMaxWR|verbs.SRQAttrLimit) != 0 {
		return verbs.Errorf("ModifySRQ", verbs.ErrInvalidArgument, "unknown attribute mask bits %#x", uint32(mask&^(verbs.SRQAttrMaxWR|verbs.SRQAttrLimit)))
	}
	if mask&verbs.SRQAttrMaxWR != 0 {
		return verbs.Errorf("ModifySRQ", verbs.ErrNotSupported, "resizing an SRQ is not supported; create a new one")
	}
	if mask&verbs.SRQAttrLimit == 0 {
		return nil
	}
	if attr == nil {
		return verbs.Errorf("ModifySRQ", verbs.ErrInvalidArgument, "attr is nil")
	}
	if attr.SRQLimit > maxWR {
		return verbs.Errorf("ModifySRQ", verbs.ErrInvalidArgument, "SRQLimit %d exceeds the SRQ's MaxWR %d", attr.SRQLimit, maxWR)
	}
	l.limit = attr.SRQLimit
	return nil
}

// Took is called after a WQE left the SRQ with queued WQEs still posted.
// It reports whether the SRQ limit event fires: the count fell below the
// armed limit (IBTA 10.2.9.3). The limit is then disarmed until Modify
// sets it again, so the event fires once.
func (l *SRQLimit) Took(queued uint32) bool {
	if l.limit == 0 || queued >= l.limit {
		return false
	}
	l.limit = 0
	return true
}
