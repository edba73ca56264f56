//go:build cgo && clib

// Command libsoftrdma is built with -buildmode=c-archive and linked by
// clib/build.sh into libibverbs.so.1: rdma-core's libibverbs ABI (the C
// files of this directory, compiled against the installed
// <infiniband/verbs.h>) over softrdma's verbs API and providers, so
// unmodified C programs run on softrdma's devices. The same library
// carries the entry points librdmacm.so.1 forwards to, so a process holds
// one Go runtime however many of the two libraries it loads.
//
// docs/clib.md says how to build and use it, and what works.
package main

func main() {}
