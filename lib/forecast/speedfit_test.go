package forecast

import (
	"math"
	"testing"
)

// The one least-squares fit of latency on length, that the forecast and
// the fleet both use: the line where the answers say one, the line through
// the origin as the fallback, and neither where they say nothing.
func TestSpeedFit(t *testing.T) {
	type answer struct{ tokens, seconds float64 }
	tests := []struct {
		name      string
		answers   []answer
		decay     float64 // 0: Add
		minSpread float64
		n         float64
		v, q      float64 // the line (0, 0: none)
		origin    float64 // v through the origin (0: none)
	}{
		{name: "none", n: 0},
		{name: "on a line: 50 tok/s after 1 s", answers: []answer{{100, 3}, {200, 5}, {300, 7}},
			n: 3, v: 50, q: 1, origin: (100*100 + 200*200 + 300*300) / (100*3 + 200*5 + 300*7.0)},
		{name: "no overhead", answers: []answer{{10, 1}, {40, 4}}, n: 2, v: 10, q: 0, origin: 10},
		{name: "a negative overhead is the caller's to refuse", answers: []answer{{100, 1}, {200, 3}},
			n: 2, v: 50, q: -1, origin: 50000.0 / 700},
		{name: "one length: no slope", answers: []answer{{64, 2}, {64, 4}}, n: 2,
			origin: 2 * 64 * 64 / (64*2 + 64*4.0)},
		{name: "longer answers faster: no speed", answers: []answer{{100, 4}, {200, 2}}, n: 2,
			origin: 50000.0 / 800},
		{name: "spread under the minimum", answers: []answer{{100, 2}, {101, 3}}, minSpread: 0.01, n: 2,
			origin: (100*100 + 101*101) / (100*2 + 101*3.0)},
		{name: "the same spread with none asked", answers: []answer{{100, 2}, {101, 3}}, n: 2, v: 1, q: -98,
			origin: (100*100 + 101*101) / (100*2 + 101*3.0)},
		{name: "nothing written", answers: []answer{{0, 1}, {0, 2}}, n: 2},
		{name: "decayed: the older answer counts half", answers: []answer{{100, 3}, {200, 5}}, decay: 0.5,
			n: 1.5, v: 50, q: 1, origin: (0.5*100*100 + 200*200) / (0.5*100*3 + 200*5.0)},
		{name: "decay of 1 is Add", answers: []answer{{100, 3}, {200, 5}, {300, 7}}, decay: 1,
			n: 3, v: 50, q: 1, origin: (100*100 + 200*200 + 300*300) / (100*3 + 200*5 + 300*7.0)},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s SpeedFit
			for _, a := range tt.answers {
				if tt.decay == 0 {
					s.Add(a.tokens, a.seconds)
				} else {
					s.AddDecayed(a.tokens, a.seconds, tt.decay)
				}
			}
			if !near(s.N(), tt.n) {
				t.Errorf("N = %v, want %v", s.N(), tt.n)
			}
			v, q, ok := s.Line(tt.minSpread)
			if ok != (tt.v > 0) || !near(v, tt.v) || !near(q, tt.q) {
				t.Errorf("Line = %v, %v, %v; want %v, %v", v, q, ok, tt.v, tt.q)
			}
			slope, sq, ok := s.Slope(tt.minSpread)
			if ok != (tt.v > 0) || ok && (!near(slope, 1/tt.v) || !near(sq, tt.q)) {
				t.Errorf("Slope = %v, %v, %v; want %v, %v", slope, sq, ok, 1/tt.v, tt.q)
			}
			var tokens, seconds float64
			for _, a := range tt.answers {
				w := tt.decay
				if w == 0 {
					w = 1
				}
				tokens, seconds = tokens*w+a.tokens, seconds*w+a.seconds
			}
			if !near(s.Tokens(), tokens) || !near(s.Seconds(), seconds) {
				t.Errorf("Tokens, Seconds = %v, %v; want %v, %v", s.Tokens(), s.Seconds(), tokens, seconds)
			}
			o, ok := s.Origin()
			if ok != (tt.origin > 0) || !near(o, tt.origin) {
				t.Errorf("Origin = %v, %v; want %v", o, ok, tt.origin)
			}
		})
	}
}

// Decay 1 is plain addition, bit for bit: the forecast's undecayed fit
// and the fleet's decayed one are one arithmetic.
func TestSpeedFitDecayOneIsAdd(t *testing.T) {
	var a, b SpeedFit
	for i := 1; i <= 1000; i++ {
		x, y := float64(i%97+1), 0.3+float64(i%13)/7
		a.Add(x, y)
		b.AddDecayed(x, y, 1)
	}
	if a != b {
		t.Errorf("Add %+v, AddDecayed(1) %+v", a, b)
	}
}
