//go:build !race

package rdmanet

const raceEnabled = false
