package llmsim

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkInstantChat measures how many small chat requests one endpoint
// answers per second with latency off, driven in-process by a fasthttp
// client over loopback: the ceiling a client benchmark can reach before
// the simulator, not the client, is what it measures.
func BenchmarkInstantChat(b *testing.B) {
	fleet := startFleet(b, Config{Instant: true}, 1)
	client := &fasthttp.HostClient{Addr: strings.TrimPrefix(fleet.URLs()[0], "http://"), MaxConns: 256}
	body := []byte(chatBody("Say something short.", 16, false))
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + client.Addr + pathChat)
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		for pb.Next() {
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("request: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	b.SetBytes(int64(len(body)))
}

// BenchmarkModelStep is the cost of one scheduler step with a full batch.
func BenchmarkModelStep(b *testing.B) {
	m := NewModel(DefaultTiming(), DefaultMaxRunning, 0)
	for i := 0; i < DefaultMaxRunning; i++ {
		m.Submit(&Seq{PromptTokens: 100, Target: 1 << 30, End: finishStop})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Step()
	}
	b.ReportMetric(float64(DefaultMaxRunning), "tokens/step")
}
