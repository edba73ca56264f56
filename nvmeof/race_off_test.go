//go:build !race

package nvmeof_test

const raceEnabled = false
