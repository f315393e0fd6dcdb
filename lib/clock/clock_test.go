package clock

import "testing"

// other is a Clock that is not Real.
type other struct{ Clock }

func TestOr(t *testing.T) {
	if Or(nil) != Real {
		t.Error("Or(nil) is not the real clock")
	}
	c := other{Real}
	if Or(c) != Clock(c) {
		t.Error("Or(c) is not c")
	}
}
