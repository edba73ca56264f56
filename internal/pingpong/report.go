package pingpong

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// LocalAddressLine returns the line ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_srq_pingpong (once per QP) print for the local address, newline
// included:
//
//	"  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"
//
// where the GID is formatted as glibc's inet_ntop(AF_INET6) does (FormatGID).
func LocalAddressLine(d Dest) string {
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// UDLocalAddressLine is LocalAddressLine as ibv_ud_pingpong prints it: with
// a colon, not a comma, before "GID".
func UDLocalAddressLine(d Dest) string {
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// RemoteAddressLine returns the line all four programs print for the peer's
// address (once per QP for ibv_srq_pingpong), newline included:
//
//	"  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"
func RemoteAddressLine(d Dest) string {
	return fmt.Sprintf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// ResultLines returns the two summary lines every pingpong variant prints at
// the end of a run of iters round trips of size-byte messages that took
// elapsed:
//
//	"%lld bytes in %.2f seconds = %.2f Mbit/sec\n"
//	"%d iters in %.2f seconds = %.2f usec/iter\n"
//
// The arithmetic follows the C code exactly: bytes = size*iters*2; the
// elapsed time is a whole number of microseconds (gettimeofday) held in a C
// float, so it is truncated to microseconds and rounded to float32 here, and
// usec/iter is computed in float32.
func ResultLines(size, iters int, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := float64(usec) / 1000000.
	mbit := float64(bytes) * 8. / float64(usec)
	perIter := usec / float32(iters) // float arithmetic: x/0 is ±Inf or NaN, as in C
	return fmt.Sprintf("%d bytes in %s seconds = %s Mbit/sec\n%d iters in %s seconds = %s usec/iter\n",
		bytes, cFloat(secs, 2), cFloat(mbit, 2), iters, cFloat(secs, 2), cFloat(float64(perIter), 2))
}

// cFloat formats v as C's printf("%.*f") does, including "inf" and "-nan".
func cFloat(v float64, prec int) string {
	switch {
	case math.IsNaN(v):
		if math.Signbit(v) { // glibc prints the sign; x86's 0/0 is negative
			return "-nan"
		}
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}
