//go:build race

package rdmanet

// The race detector allocates on its own; allocation counts are
// checked without it.
const raceEnabled = true
