package forecast

import (
	"math"
	"testing"
)

// RunTime against cases worked out by hand: answers all c tokens long
// leave residuals uniform on (0, c), so the largest of s of them averages
// c*s/(s+1) and one of them c/2.
func TestRunTime(t *testing.T) {
	const c = 1000.0
	d := PointMass{c}
	tests := []struct {
		name string
		run  Run
		want float64
	}{
		{"bulk and drain", Run{Answers: 10_000, TokPerSec: 2000, Speed: 20, Lengths: d, Limit: 2048, Mean: c},
			10_000*c/2000 + c*(100.0/101-0.5)/20},
		{"the drain runs on the answers left, not the slots", Run{Answers: 9, TokPerSec: 2000, Speed: 20, Lengths: d, Limit: 2048, Mean: c},
			9*c/2000 + c*(9.0/10-0.5)/20},
		{"in flight only: the longest answer left", Run{InFlight: []float64{100, 900, 400}, TokPerSec: 2000, Speed: 20, Lengths: d, Limit: 2048, Mean: c},
			(c - 100) / 20},
		{"nothing left", Run{TokPerSec: 2000, Speed: 20, Lengths: d, Limit: 2048, Mean: c}, 0},
		{"no rate", Run{Answers: 10, Speed: 20, Lengths: d, Limit: 2048, Mean: c}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secs, lo, hi := RunTime(tt.run)
			// The drain and the longest answer are integrated in steps of
			// limit/512 and limit/256 tokens.
			step := 8 / tt.run.Speed
			if math.Abs(secs-tt.want) > 0.01*tt.want+step {
				t.Errorf("RunTime %v, want %v", secs, tt.want)
			}
			if lo > secs+step || hi < secs-step {
				t.Errorf("range %v-%v does not hold the estimate %v", lo, hi, secs)
			}
		})
	}
	// Spread in the lengths widens the range, not the estimate's bulk.
	narrow := Run{Answers: 10_000, TokPerSec: 2000, Speed: 20, Lengths: LogNormal{math.Log(600), 1}, Limit: 8192, Mean: 1000}
	wide := narrow
	wide.SE, wide.SD = 30, 1200
	s1, lo1, hi1 := RunTime(narrow)
	s2, lo2, hi2 := RunTime(wide)
	if s1 != s2 || !(lo2 < lo1 && hi2 > hi1) {
		t.Errorf("narrow %v (%v-%v), wide %v (%v-%v)", s1, lo1, hi1, s2, lo2, hi2)
	}
}
