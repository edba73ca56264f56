package clib

import (
	"os"
	"os/exec"
	"testing"
)

// TestDebianPrograms builds the library and runs Debian's unmodified
// rdma-core programs over it in pairs on loopback (test.sh). It needs Go
// with cgo, a C compiler, libibverbs-dev, ibverbs-utils and perftest, so
// it runs only when SOFTRDMA_CLIB_TEST=1 (CI sets it after installing
// them).
func TestDebianPrograms(t *testing.T) {
	if os.Getenv("SOFTRDMA_CLIB_TEST") != "1" {
		t.Skip("set SOFTRDMA_CLIB_TEST=1 to build libibverbs.so.1 and run rdma-core's programs over it (docs/clib.md)")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "test.sh", dir)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("clib/test.sh: %v (its lines above say which programs failed)", err)
	}
}
