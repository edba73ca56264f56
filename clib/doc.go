// Package clib holds softrdma's C library: libibverbs.so.1, which
// rdma-core's C programs load in place of rdma-core's own to run on
// softrdma's devices, unmodified and without a kernel RDMA device. The
// library's code is in clib/libsoftrdma (built only with the clib build
// tag, by build.sh); this package has only its test, which runs Debian's
// rdma-core programs over it (test.sh) when SOFTRDMA_CLIB_TEST=1.
// docs/clib.md says how to build and use the library.
package clib
