//go:build race

package roce

// raceEnabled: the race detector is on. sync.Pool then drops a quarter of
// what it is given, so steady-state allocation counts mean nothing.
const raceEnabled = true
