package forecast

import (
	"math"
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

func BenchmarkPlay(b *testing.B) {
	s := shortEnd(150)
	answers := float64(s.Unsent + 8*50)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Play()
	}
	b.ReportMetric(answers*1.5*float64(s.Plays)*float64(b.N)/b.Elapsed().Seconds(), "answers/s")
}
