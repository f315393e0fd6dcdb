package ollamaserver

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkStart measures what a test waits for in Start: the server
// starting, the model being created and loaded, the first answer.
func BenchmarkStart(b *testing.B) {
	var sum Timings
	for b.Loop() {
		srv := Start(b, Options{Parallel: 4})
		sum.Start += srv.Timings.Start
		sum.Create += srv.Timings.Create
		sum.Load += srv.Timings.Load
		sum.FirstAnswer += srv.Timings.FirstAnswer
		srv.Stop()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(ms(sum.Start), "start-ms")
	b.ReportMetric(ms(sum.Create), "create-ms")
	b.ReportMetric(ms(sum.Load), "load-ms")
	b.ReportMetric(ms(sum.FirstAnswer), "first-answer-ms")
}

// BenchmarkDecode measures the tiny model's decoding through
// /v1/completions on this machine: each round sends 1 or 4 requests of 64
// tokens at once to a server that runs 4.
func BenchmarkDecode(b *testing.B) {
	const maxTokens = 64
	srv := Start(b, Options{Parallel: 4})
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			tokens := 0
			for b.Loop() {
				got := make([]answer, par)
				errs := make([]error, par)
				var wg sync.WaitGroup
				for i := range par {
					wg.Add(1)
					go func() {
						defer wg.Done()
						got[i], errs[i] = post(srv, false, fmt.Sprintf("Story number %d:", i), map[string]any{"max_tokens": maxTokens})
					}()
				}
				wg.Wait()
				for i := range got {
					if errs[i] != nil || got[i].Usage == nil {
						b.Fatalf("request %d: %v %+v", i, errs[i], got[i])
					}
					tokens += got[i].Usage.CompletionTokens
				}
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
