//go:build !purego

package minhash

// min4 is in min4_amd64.s.
//
//go:noescape
func min4(sh []uint64, ab *[8]uint64, out *[4]uint64)
