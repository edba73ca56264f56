//go:build !amd64 || purego

package wire

import "hash/crc32"

// crcUpdate is crc32.Update with the IEEE table.
func crcUpdate(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}
