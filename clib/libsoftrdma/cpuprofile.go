//go:build cgo && clib

package main

/*
int srd_cpuprofile_atexit(void);
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
)

// SOFTRDMA_CPUPROFILE=FILE in a C program's environment writes a CPU
// profile (runtime/pprof, for go tool pprof) of the process, as the Go
// tools do for a command:
//
//	first ibv_open_device ─▶ StartCPUProfile(FILE with the PID)
//	last ibv_close_device ─┐
//	exit() (atexit hook)  ─┴▶ StopCPUProfile, close the file: once
//
// A C program may exit without closing its devices (librdmacm never
// closes the ones it opens), hence the exit hook; one that closes them
// gets its profile then, even if it is killed later. Devices opened after
// the profile was written are not in it: a process writes one profile, so
// a second one never truncates the first. Several processes started with
// one environment (a server and a client) each write their own file:
// cpuProfileName puts the PID in the name.
var cpuProfile struct {
	mu      sync.Mutex
	started bool     // the profile was started (or failed to start) once
	f       *os.File // the profile being written; nil when none is
	devices int      // open contexts: ibv_open_device minus ibv_close_device
}

// cpuProfileName is the file a process with PID pid writes for
// SOFTRDMA_CPUPROFILE=value: every "%p" in value replaced by the PID, or,
// without one, value followed by "." and the PID.
func cpuProfileName(value string, pid int) string {
	p := strconv.Itoa(pid)
	if strings.Contains(value, "%p") {
		return strings.ReplaceAll(value, "%p", p)
	}
	return value + "." + p
}

// cpuProfileStart starts the process's profile if file (the variable's
// value) is set and no profile was started before. A file that cannot be
// created is reported on stderr, and the program runs unprofiled: the
// variable is an observer's, not a reason to fail ibv_open_device.
func cpuProfileStart(file string) {
	if file == "" {
		return
	}
	cpuProfile.mu.Lock()
	defer cpuProfile.mu.Unlock()
	if cpuProfile.started {
		return
	}
	cpuProfile.started = true
	name := cpuProfileName(file, os.Getpid())
	f, err := os.Create(name)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
			os.Remove(name)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: SOFTRDMA_CPUPROFILE: %v (the process is not profiled)\n", err)
		return
	}
	cpuProfile.f = f
	if C.srd_cpuprofile_atexit() != 0 {
		fmt.Fprintf(os.Stderr, "softrdma: SOFTRDMA_CPUPROFILE: atexit failed: %s is written only when the last device is closed\n", name)
	}
}

// cpuProfileOpened counts a device context that ibv_open_device opened.
func cpuProfileOpened() {
	cpuProfile.mu.Lock()
	cpuProfile.devices++
	cpuProfile.mu.Unlock()
}

// cpuProfileClosed counts a closed device context and writes the profile
// when it was the last.
func cpuProfileClosed() {
	cpuProfile.mu.Lock()
	defer cpuProfile.mu.Unlock()
	cpuProfile.devices--
	if cpuProfile.devices == 0 {
		cpuProfileStopLocked()
	}
}

// srdgo_cpuprofile_exit is the exit hook (cpuprofile.c registers it with
// atexit). It waits for a profile another thread is writing, so exit
// never cuts a profile short.
//
//export srdgo_cpuprofile_exit
func srdgo_cpuprofile_exit() {
	defer func() { recover() }()
	cpuProfile.mu.Lock()
	defer cpuProfile.mu.Unlock()
	cpuProfileStopLocked()
}

// cpuProfileStopLocked stops the profile and closes its file; StopCPUProfile
// returns once every sample is written. Precondition: cpuProfile.mu held.
func cpuProfileStopLocked() {
	f := cpuProfile.f
	if f == nil {
		return
	}
	cpuProfile.f = nil
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "softrdma: SOFTRDMA_CPUPROFILE: %v\n", err)
	}
}
