package forecast

import (
	"math"
	"math/rand/v2"
	"testing"
)

// shortEnd is a run's end on eight servers of 48 slots: 300 answers left
// to send, 384 in flight.
func shortEnd(plays int) Sim {
	st := Step{nref: 48, ls: 1000, Cov: [3][3]float64{{0.01, 0, 0}, {0, 1, 0}, {0, 0, 4}}}.fromBeta([3]float64{0.05, 35, 5})
	s := Sim{Unsent: 300, Lengths: LogNormal{Mu: math.Log(600), Sigma: 1}, Limit: 32768, Plays: plays, Seed: 1,
		LenCov: [2][2]float64{{0.002, 0}, {0, 0.001}}}
	for e := 0; e < 8; e++ {
		w := make([]float64, 48)
		for i := range w {
			w[i] = float64(20 * i)
		}
		s.Servers = append(s.Servers, SimServer{Cap: 48, Keep: 50, Waiting: 2, Writing: w, Step: st})
	}
	return s
}

// withSeen is s with the lengths of 700 answers that ended drawn from
// its lognormal, and those in flight as at least what they have.
func withSeen(s Sim) Sim {
	ln := s.Lengths.(LogNormal)
	rng := rand.New(rand.NewPCG(5, 6))
	var ended, least []Count
	for range 700 {
		ended = append(ended, Count{X: math.Round(math.Exp(ln.Mu + ln.Sigma*rng.NormFloat64())), N: 1})
	}
	for _, sv := range s.Servers {
		for _, l := range sv.Writing {
			least = append(least, Count{X: l, N: 1})
		}
	}
	s.Seen = NewSeen(ended, least)
	return s
}

// BenchmarkPlay: lengths drawn from the lognormal alone, and from the
// lengths seen (a bootstrap of them for the range's plays).
func BenchmarkPlay(b *testing.B) {
	for _, c := range []struct {
		name string
		sim  Sim
	}{{"lognormal", shortEnd(150)}, {"seen", withSeen(shortEnd(150))}} {
		b.Run(c.name, func(b *testing.B) {
			s := c.sim
			answers := float64(s.Unsent + 8*50)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				s.Play()
			}
			b.ReportMetric(answers*1.5*float64(s.Plays)*float64(b.N)/b.Elapsed().Seconds(), "answers/s")
		})
	}
}
