package pingpong

import "strconv"

// FormatGID formats a GID as glibc's inet_ntop(AF_INET6, ...) does, which is
// what the pingpong programs print: lowercase hex groups without leading
// zeros, the first longest run of two or more zero groups compressed to
// "::", and the last 32 bits in dotted decimal when the address is
// IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible (::a.b.c.d, first 96 bits
// zero, but not :: or ::1 style addresses whose zero run is longer). A RoCEv2
// GID for 10.77.0.3 prints as "::ffff:10.77.0.3"; a zero GID as "::".
//
// net/netip differs for IPv4-compatible addresses ("::a4d:3"), hence this.
func FormatGID(gid [16]byte) string {
	var words [8]uint16
	for i := range words {
		words[i] = uint16(gid[2*i])<<8 | uint16(gid[2*i+1])
	}
	// Find the first longest run of zero words (length >= 2).
	bestBase, bestLen := -1, 0
	curBase, curLen := -1, 0
	for i, w := range words {
		if w == 0 {
			if curBase < 0 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase >= 0 && (bestBase < 0 || curLen > bestLen) {
			bestBase, bestLen = curBase, curLen
		}
		curBase = -1
	}
	if curBase >= 0 && (bestBase < 0 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase >= 0 && bestLen < 2 {
		bestBase = -1
	}

	b := make([]byte, 0, len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"))
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && words[5] == 0xffff)) {
			for j := 12; j < 16; j++ {
				if j != 12 {
					b = append(b, '.')
				}
				b = strconv.AppendUint(b, uint64(gid[j]), 10)
			}
			return string(b)
		}
		b = strconv.AppendUint(b, uint64(words[i]), 16)
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		b = append(b, ':')
	}
	return string(b)
}
