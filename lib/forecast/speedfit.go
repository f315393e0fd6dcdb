package forecast

// SpeedFit is the least-squares line latency = q + tokens/v over answers:
// v is the speed at which one answer is written (tokens per second), q
// what every answer pays whatever its length (prefill, the round trip, a
// wait in the server's queue). The forecast fits it over a run, each
// endpoint too; the fleet fits it with a decay, for an endpoint's
// effective concurrency. Each caller keeps its own rule for how many
// answers make a fit; the arithmetic is this one.
type SpeedFit struct{ n, sx, sy, sxx, sxy float64 }

// Add counts an answer of tokens written in seconds, at full weight.
func (s *SpeedFit) Add(tokens, seconds float64) { s.AddDecayed(tokens, seconds, 1) }

// AddDecayed counts an answer after weighing every earlier one by decay
// (0 < decay <= 1): the fit then follows the last 1/(1-decay) answers or
// so. A decay of 1 is Add.
func (s *SpeedFit) AddDecayed(tokens, seconds, decay float64) {
	s.n = s.n*decay + 1
	s.sx = s.sx*decay + tokens
	s.sy = s.sy*decay + seconds
	s.sxx = s.sxx*decay + tokens*tokens
	s.sxy = s.sxy*decay + tokens*seconds
}

// N is the answers' total weight: their count, less what decayed.
func (s *SpeedFit) N() float64 { return s.n }

// Line is the fitted line's v and q. ok is false when the slope is not
// positive (longer answers not slower: no speed), or when the lengths
// spread too little to say anything of it: when their variance is at most
// minSpread times their mean square (0 asks only that they differ).
func (s *SpeedFit) Line(minSpread float64) (v, q float64, ok bool) {
	slope, q, ok := s.Slope(minSpread)
	if !ok {
		return 0, 0, false
	}
	return 1 / slope, q, true
}

// Slope is the fitted line as seconds per token (1/v) and q, with ok as
// Line's.
func (s *SpeedFit) Slope(minSpread float64) (slope, q float64, ok bool) {
	den := s.n*s.sxx - s.sx*s.sx
	if !(den > minSpread*s.n*s.sxx) {
		return 0, 0, false
	}
	slope = (s.n*s.sxy - s.sx*s.sy) / den
	if !(slope > 0) {
		return 0, 0, false
	}
	return slope, (s.sy - slope*s.sx) / s.n, true
}

// Tokens and Seconds are the answers' tokens and seconds, summed as they
// are weighed.
func (s *SpeedFit) Tokens() float64  { return s.sx }
func (s *SpeedFit) Seconds() float64 { return s.sy }

// Origin is v of the line through the origin, q = 0: every second of an
// answer counted as writing. ok is false while nothing was written.
func (s *SpeedFit) Origin() (v float64, ok bool) {
	if s.sxy > 0 && s.sxx > 0 {
		return s.sxx / s.sxy, true
	}
	return 0, false
}
