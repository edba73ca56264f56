//go:build !race

package roce

const raceEnabled = false
