package soft

import "time"

// Clock is where a device's driver gets the time and its timers: the
// engine's deadlines (roce.Config.Clock and SetTimer), the timer that
// sends ACKs a busy poller left waiting, and the receive loop's checks
// while it has stepped aside for busy pollers. Config.Clock sets it; nil
// means the system clock. A test gives a virtual clock and moves it by
// hand, so every timeout the driver and the engine have happens exactly
// when the test says.
//
// A Clock must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a virtual clock,
	// in the goroutine that moves the time past it) once d has passed,
	// as time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer that Clock.AfterFunc made. Stop and Reset behave as
// time.Timer's do for a timer made by time.AfterFunc.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether the call
	// stopped it (false: it had already fired or been stopped).
	Stop() bool
	// Reset makes the timer fire after d, whether or not it was active;
	// it reports whether it was.
	Reset(d time.Duration) bool
}

// systemClock is the Clock of the time package.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
