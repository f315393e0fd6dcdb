package forecast

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSeenKaplanMeier: ten answers each ended at 1, 2 and 3 tokens, ten
// more known only to be at least 2 long: P(L > 1) = 30/40, P(L > 2) =
// 3/4 * (1 - 10/30), P(L > 3) = 0; the draws invert it, above a length
// too.
func TestSeenKaplanMeier(t *testing.T) {
	k := NewSeen([]Count{{1, 10}, {2, 10}, {3, 10}}, []Count{{2, 10}})
	want := []float64{0.75, 0.5, 0}
	if k.trusted != 3 {
		t.Errorf("trusted %d lengths, want 3", k.trusted)
	}
	for i, w := range want {
		if math.Abs(k.s[i]-w) > 1e-12 {
			t.Errorf("P(L > %v) = %v, want %v", k.x[i], k.s[i], w)
		}
	}
	tail := LogNormal{Mu: 10, Sigma: 1}
	for _, c := range []struct{ above, u, want float64 }{
		{0, 0.9, 1}, {0, 0.6, 2}, {0, 0.3, 3}, {1.5, 0.8, 2}, {1.5, 0.5, 3}, {2, 0.1, 3}, {0, 0.9, 1},
	} {
		if got := k.draw(tail, c.above, 100, c.u); got != c.want {
			t.Errorf("draw above %v at u %v = %v, want %v", c.above, c.u, got, c.want)
		}
	}
	// Past the longest length seen to end (none longer): that length.
	if got := k.draw(tail, 5, 100, 0.5); got != 5 {
		t.Errorf("draw above the longest = %v, want 5", got)
	}
}

// TestSeenTail: with too few answers as long, the estimate hands over to
// the tail; and resampling keeps a survival function.
func TestSeenTail(t *testing.T) {
	// Nine answers at least 50 long: the longest length seen to end (40)
	// has 10 at risk, the mass beyond goes to the tail, cut at the limit.
	k := NewSeen([]Count{{10, 10}, {40, 1}}, []Count{{50, 9}})
	if k.trusted != 2 {
		t.Fatalf("trusted %d lengths, want 2", k.trusted)
	}
	tail := LogNormal{Mu: math.Log(60), Sigma: 0.1}
	if got := k.draw(tail, 0, 1000, 0.01); got <= 50 || got > 100 {
		t.Errorf("a draw in the tail = %v, want past 50 near 60", got)
	}
	if got := k.draw(tail, 0, 55, 0.01); got != 55 {
		t.Errorf("a draw in the tail cut at 55 = %v", got)
	}
	var r Seen
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		k.resample(&r, rng)
		if !(r.s[0] > 0 && r.s[0] < 1 && r.s[1] > 0 && r.s[1] <= r.s[0]) {
			t.Fatalf("resampled survival %v", r.s)
		}
	}
}

// TestSeenTailFit: lognormal lengths keep the fit to every length; a
// tenth of one-line answers added, that fit widens and the upper half's
// tail is fitted instead, near the long answers' own.
func TestSeenTailFit(t *testing.T) {
	const mu, sigma = seenMu, seenSigma
	k, s, cens := seenOf(false, 4000)
	all, _ := FitLogNormal(s, cens, LogNormal{})
	if _, _, ok := k.Tail(all); ok {
		t.Errorf("lognormal lengths: the fit to every length (%+v) was replaced", all)
	}
	k, s, cens = seenOf(true, 4000)
	all, _ = FitLogNormal(s, cens, LogNormal{})
	tail, cov, ok := k.Tail(all)
	if !ok {
		t.Fatalf("with one-line answers the fit to every length (%+v) was kept", all)
	}
	// The tail's parameters within two of their standard errors, and
	// far narrower than the fit to every length.
	if all.Sigma < 2*sigma || tail.Sigma > all.Sigma/2 || cov[0][0] <= 0 || cov[1][1] <= 0 ||
		math.Abs(tail.Mu-mu) > 2*math.Sqrt(cov[0][0]) || math.Abs(math.Log(tail.Sigma/sigma)) > 2*math.Sqrt(cov[1][1]) {
		t.Errorf("every length %+v, the tail %+v (cov %v), want the tail near mu %v sigma %v", all, tail, cov, mu, sigma)
	}
}

const seenMu, seenSigma = 6.0, 0.4

// seenOf is n lengths, lognormal (seenMu, seenSigma) or with a tenth of
// one-line answers (short), a quarter of them still being written at a
// random length: as Seen, and as the fit to every length sees them.
func seenOf(short bool, n int) (*Seen, LogStats, []Censor) {
	ended, least, s, cens := seenLengths(short, n)
	return NewSeen(ended, least), s, cens
}

// seenLengths are seenOf's lengths: those that ended and those in flight,
// as counts and as the fit's statistics.
func seenLengths(short bool, n int) (ended, least []Count, s LogStats, cens []Censor) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n; i++ {
		l := math.Round(math.Exp(seenMu + seenSigma*rng.NormFloat64()))
		if short && i%10 == 0 {
			l = math.Round(1 + 10*rng.Float64())
		}
		if c := math.Round(2000 * rng.Float64()); c < l && i%4 == 0 {
			least = append(least, Count{c, 1}) // still being written
			cens = append(cens, Censor{X: math.Log(max(c, 1)), W: 1})
			continue
		}
		ended = append(ended, Count{l, 1})
		s.Add(int(l))
	}
	return ended, least, s, cens
}

// BenchmarkSeen: what a play-out adds to a forecast before it plays, for
// 4,000 answers (a tenth of a line, a quarter in flight): the estimate,
// and the tail fitted to its upper part.
func BenchmarkSeen(b *testing.B) {
	ended, least, s, cens := seenLengths(true, 4000)
	all, _ := FitLogNormal(s, cens, LogNormal{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, ok := NewSeen(ended, least).Tail(all); !ok {
			b.Fatal("no tail")
		}
	}
	b.ReportMetric(4000*float64(b.N)/b.Elapsed().Seconds(), "answers/s")
}

// TestSeenLight: ten answers ended at 10 tokens and ten at 20, five in
// flight at 30. The upper half is past 10: ten answers ended there over
// 10*10 + 5*20 tokens written past it, a rate of 1/20 a token; past the
// longest seen to end (P(L > 20) = 0.2) answers end at that rate, those
// in flight past it too, from where they are.
func TestSeenLight(t *testing.T) {
	k := NewSeen([]Count{{10, 10}, {20, 10}}, []Count{{30, 5}})
	l := k.Light()
	if l == nil || math.Abs(l.hazard-0.05) > 1e-12 {
		t.Fatalf("light = %+v, want a rate of 0.05", l)
	}
	for _, c := range []struct{ above, u, want float64 }{
		{0, 0.9, 10}, {0, 0.3, 20}, {0, 0.1, 20 + 20*math.Ln2}, {25, 0.5, 25 + 20*math.Ln2},
	} {
		if got := l.draw(nil, c.above, 1000, c.u); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("draw above %v at u %v = %v, want %v", c.above, c.u, got, c.want)
		}
	}
	if got := l.draw(nil, 0, 25, 0.1); got != 25 {
		t.Errorf("draw cut at 25 = %v", got)
	}
	if NewSeen([]Count{{10, 10}}, []Count{{30, 5}}).Light() != nil {
		t.Error("a rate from no answer ended past the upper half's start")
	}
}
