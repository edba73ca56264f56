//go:build race

package nvmeof_test

// raceEnabled: under the race detector sync.Pool drops items, so the
// allocation tests skip (CI runs them again without it).
const raceEnabled = true
