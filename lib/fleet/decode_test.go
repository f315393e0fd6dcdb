package fleet

import (
	"math"
	"testing"
)

// An endpoint's answer speed and effective concurrency: the line once
// answers weighing eight are in (nine, decayed), through the origin when they are all of one
// length, nothing before, and answers without tokens or time left out.
func TestDecodeFit(t *testing.T) {
	type answer struct{ tokens, latency float64 }
	repeat := func(n int, a ...answer) []answer {
		var out []answer
		for i := 0; i < n; i++ {
			out = append(out, a...)
		}
		return out
	}
	// through is v through the origin over answers, weighted as the fit
	// weighs them: each by decodeDecay for every answer after it.
	through := func(as []answer) float64 {
		var sxx, sxy float64
		for _, a := range as {
			sxx, sxy = sxx*decodeDecay+a.tokens*a.tokens, sxy*decodeDecay+a.tokens*a.latency
		}
		return sxx / sxy
	}
	within := repeat(5, answer{100, 3}, answer{100.5, 3.5})
	faster := repeat(5, answer{100, 4}, answer{200, 2})
	tests := []struct {
		name    string
		answers []answer
		speed   float64
	}{
		{"none", nil, 0},
		{"eight answers weigh too little, decayed", repeat(4, answer{100, 3}, answer{200, 5}), 0},
		{"on a line: 50 tok/s after a 1 s wait", repeat(5, answer{100, 3}, answer{200, 5}), 50},
		{"one length: through the origin", repeat(9, answer{100, 4}), 25},
		{"lengths within 1%: through the origin", within, through(within)},
		{"empty and timeless answers left out", append(repeat(5, answer{100, 3}, answer{200, 5}), answer{0, 9}, answer{50, 0}, answer{-1, 1}), 50},
		{"longer answers faster: through the origin", faster, through(faster)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d decodeFit
			for _, a := range tt.answers {
				d.add(a.tokens, a.latency)
			}
			if got := d.speed(); math.Abs(got-tt.speed) > 1e-9*max(1, tt.speed) {
				t.Errorf("speed %v, want %v", got, tt.speed)
			}
			want := 0.0
			if tt.speed > 0 {
				want = 1000 / tt.speed
			}
			if got := d.effective(1000); math.Abs(got-want) > 1e-9*max(1, want) {
				t.Errorf("effective at 1000 tok/s %v, want %v", got, want)
			}
			if got := d.effective(0); got != 0 {
				t.Errorf("effective at no output %v, want 0", got)
			}
		})
	}
}
