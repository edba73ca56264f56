package memmove

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCopyLikeCopy checks Copy against the built-in copy for lengths
// around both thresholds, offsets that misalign either side, short
// destinations and sources, and overlapping ranges in both directions.
func TestCopyLikeCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 4095, minMovsb, minMovsb + 1, 65536, 65537, maxMovsb - 1, maxMovsb, maxMovsb + 1}
	for _, n := range sizes {
		for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {7, 13}} {
			for _, short := range []int{0, 1, 100} {
				buf := make([]byte, 2*n+64)
				for i := range buf {
					buf[i] = byte(r.Uint32())
				}
				src := buf[off[0] : off[0]+n]
				dstLen := max(n-short, 0)
				want := make([]byte, dstLen+32)
				got := make([]byte, dstLen+32)
				copy(want, bytes.Repeat([]byte{0xa5}, len(want)))
				copy(got, want)
				wn := copy(want[off[1]%16:][:dstLen], src)
				gn := Copy(got[off[1]%16:][:dstLen], src)
				if wn != gn || !bytes.Equal(want, got) {
					t.Fatalf("n=%d off=%v short=%d: Copy returned %d (copy %d) or bytes differ", n, off, short, gn, wn)
				}
			}
		}
	}
}

func TestCopyOverlap(t *testing.T) {
	for _, n := range []int{minMovsb, 65536} {
		for _, shift := range []int{-4096, -1, 1, 64, 4096} {
			base := make([]byte, n+8192)
			for i := range base {
				base[i] = byte(i * 7)
			}
			want := bytes.Clone(base)
			so, do := 4096, 4096+shift
			copy(want[do:do+n], want[so:so+n])
			Copy(base[do:do+n], base[so:so+n])
			if !bytes.Equal(want, base) {
				t.Fatalf("n=%d shift=%d: overlapping Copy differs from copy", n, shift)
			}
		}
	}
}

// BenchmarkCopy compares Copy with the built-in copy; 16 buffer pairs
// are cycled so that the larger sizes leave the cache as a stream would.
func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{2 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		const k = 16
		src, dst := make([][]byte, k), make([][]byte, k)
		for i := range k {
			src[i], dst[i] = make([]byte, n), make([]byte, n)
		}
		for _, f := range []struct {
			name string
			fn   func(d, s []byte) int
		}{{"builtin", func(d, s []byte) int { return copy(d, s) }}, {"Copy", Copy}} {
			b.Run(fmt.Sprintf("%s/%d", f.name, n), func(b *testing.B) {
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					f.fn(dst[i%k], src[i%k])
					i++
				}
			})
		}
	}
}
