//go:build !amd64 || race

package memmove

const useMovsb = false

func movsb(dst, src *byte, n int) { panic("memmove: REP MOVSB without amd64") }

func addr(b []byte) uintptr { return 0 }
