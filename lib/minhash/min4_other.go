//go:build !amd64 || purego

package minhash

// min4 sets out[i] to the least ab[i]*s + ab[4+i] (mod 2^64) over the
// shingle hashes sh, for i < 4 (all ones when sh is empty).
func min4(sh []uint64, ab *[8]uint64, out *[4]uint64) { min4Go(sh, ab, out) }
