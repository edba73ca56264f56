package main

import "syscall"

// ptYield gives the CPU to other runnable threads — the devices' receive
// loops, or the peer process — for a busy-polling benchmark on a machine
// with few CPUs: sched_yield(2), which returns at once when nothing else
// waits.
func ptYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
