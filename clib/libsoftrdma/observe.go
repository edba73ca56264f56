//go:build cgo && clib

package main

/*
int srd_observe_atexit(void);
*/
import "C"

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"

	"github.com/softrdma/softrdma/internal/tools/device"
)

// SOFTRDMA_CPUPROFILE=FILE, SOFTRDMA_TRACE=FILE and SOFTRDMA_COUNTERS=FILE
// in a C program's environment observe the process as they observe a Go
// tool's command: a CPU profile (runtime/pprof, for go tool pprof), a
// runtime trace (go tool trace), and the soft devices' counters when the
// process is done with them ("device NAME", then "name value" lines):
//
//	first ibv_open_device ─▶ start the profile and the trace (FILE with the PID)
//	last ibv_close_device ─┐
//	exit() (atexit hook)  ─┴▶ stop both, write the counters: once
//
// A C program may exit without closing its devices (librdmacm never
// closes the ones it opens), hence the exit hook; one that closes them
// gets its files then, even if it is killed later. Devices opened after
// that are not in them: a process writes each file once, so a second
// write never truncates the first. Several processes started with one
// environment (a server and a client) each write their own files:
// perProcess puts the PID in the names.
var observe struct {
	mu      sync.Mutex
	started bool // observing began (or failed to) once
	done    bool // the files were written
	stops   []func()
	devices int // open contexts: ibv_open_device minus ibv_close_device
}

// perProcess is the file a process with PID pid writes for a variable's
// value: every "%p" in value replaced by the PID, or, without one, value
// followed by "." and the PID.
func perProcess(value string, pid int) string {
	p := strconv.Itoa(pid)
	if strings.Contains(value, "%p") {
		return strings.ReplaceAll(value, "%p", p)
	}
	return value + "." + p
}

// observeStart starts what the environment asks for, if nothing was
// started before. A file that cannot be created is reported on stderr
// and that observation skipped: the variables are an observer's, not a
// reason to fail ibv_open_device. The counters' file name is given to
// the opener, which keeps the soft devices it opens and writes their
// counters at its Close.
func observeStart(env *device.Env) {
	observe.mu.Lock()
	defer observe.mu.Unlock()
	if observe.started {
		return
	}
	observe.started = true
	pid := os.Getpid()
	for _, o := range []struct {
		name, file string
		start      func(io.Writer) error
		stop       func()
	}{
		{"SOFTRDMA_CPUPROFILE", env.CPUProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"SOFTRDMA_TRACE", env.Trace, trace.Start, trace.Stop},
	} {
		if o.file == "" {
			continue
		}
		name := perProcess(o.file, pid)
		f, err := os.Create(name)
		if err == nil {
			if err = o.start(f); err != nil {
				f.Close()
				os.Remove(name)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "softrdma: %s: %v (not written)\n", o.name, err)
			continue
		}
		observe.stops = append(observe.stops, func() {
			o.stop() // returns once everything is written
			if err := f.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "softrdma: %s: %v\n", o.name, err)
			}
		})
	}
	if env.Counters != "" {
		env.Counters = perProcess(env.Counters, pid)
	}
	if len(observe.stops) == 0 && env.Counters == "" {
		return
	}
	if C.srd_observe_atexit() != 0 {
		fmt.Fprintln(os.Stderr, "softrdma: atexit failed: SOFTRDMA_CPUPROFILE, SOFTRDMA_TRACE and SOFTRDMA_COUNTERS are written only when the last device is closed")
	}
}

// observeOpened counts a device context that ibv_open_device opened.
func observeOpened() {
	observe.mu.Lock()
	observe.devices++
	observe.mu.Unlock()
}

// observeClosed counts a closed device context and writes the files when
// it was the last.
func observeClosed() {
	observe.mu.Lock()
	defer observe.mu.Unlock()
	observe.devices--
	if observe.devices == 0 {
		observeStopLocked()
	}
}

// srdgo_observe_exit is the exit hook (observe.c registers it with
// atexit). It waits for files another thread is writing, so exit never
// cuts one short.
//
//export srdgo_observe_exit
func srdgo_observe_exit() {
	defer func() { recover() }()
	observe.mu.Lock()
	defer observe.mu.Unlock()
	observeStopLocked()
}

// observeStopLocked stops the profile and the trace and writes the
// counters (Opener.Close), once. Precondition: observe.mu held.
func observeStopLocked() {
	if !observe.started || observe.done {
		return
	}
	observe.done = true
	for _, stop := range observe.stops {
		stop()
	}
	observe.stops = nil
	if opener != nil && opener.Env.Counters != "" {
		opener.Close()
	}
}
