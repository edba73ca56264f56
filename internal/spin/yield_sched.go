//go:build linux || freebsd

package spin

import "syscall"

// OSYield gives the CPU to another runnable thread, if any (sched_yield).
// It is a raw system call: the goroutine keeps its P, which a yield that
// returns in microseconds does not need to hand over.
func OSYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
