package testbin

import (
	"os"
	"testing"
)

// LongEnv is the switch of the long test tier: set to 1, `go test ./...`
// also runs the suites that take minutes or need more than Go (a real
// Ollama server, a Slurm cluster, chaos runs at CI size, long simulated
// runs, sweeps over the real datasets). .ci/run sets it.
const LongEnv = "TOKENMILL_TEST_LONG"

// IsLong reports whether the long tier is on, for a test that runs in
// both tiers at two sizes.
func IsLong() bool { return os.Getenv(LongEnv) == "1" }

// Long skips t outside the long tier, saying what the test is and how to
// run it.
func Long(t testing.TB, what string) {
	t.Helper()
	if IsLong() {
		return
	}
	if v, set := os.LookupEnv(LongEnv); set {
		t.Skipf("long tier (%s): run with %s=1, not %q", what, LongEnv, v)
	}
	t.Skipf("long tier (%s): run with %s=1", what, LongEnv)
}

// Size is short in the default tier and long in the long one.
func Size[T any](short, long T) T {
	if IsLong() {
		return long
	}
	return short
}
