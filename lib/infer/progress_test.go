package infer

import (
	"context"
	"strings"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
	"tokenmill/lib/forecast"
)

// An endpoint out of service with requests still in flight: the totals
// count its requests against its slots (never "58/0"), and its own line
// shows them against its real slots.
func TestProgressEndpointDown(t *testing.T) {
	f := startFleet(t, llmsim.Config{Instant: true}, 2)
	targets, err := fleet.ParseEndpoints(strings.Join(f.URLs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pool := fleet.NewPool(ctx, targets, fleet.Config{FixedSlots: 4, EjectAfter: 5, ProbeInterval: time.Hour, ControlTimeout: 10 * time.Second})
	t.Cleanup(func() {
		cancel()
		pool.Close()
	})
	pool.Start()
	if _, err := pool.WaitAll(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	eps := pool.Endpoints()
	var held []*fleet.Endpoint
	for len(held) < 3 {
		ep := pool.TryAcquire(eps[1]) // fill endpoint 0 first
		if ep == nil {
			t.Fatal("no slot")
		}
		if ep == eps[0] {
			held = append(held, ep)
		} else {
			pool.Release(ep)
		}
	}
	pool.Failed(eps[0], true, "connection refused") // out of service, its 3 still out
	r := &runner{cfg: &Config{Samples: 1}, clk: clock.Real, pool: pool, ready: newReadyQueue()}
	r.eta = forecast.NewEstimator[*job](time.Minute, 0, nil, pool.Running)
	lines := newProgress(r, true, r.eta).lines()
	if !strings.Contains(lines[0], "| in flight 3/7 |") {
		t.Errorf("totals: %s", lines[0])
	}
	if !strings.Contains(lines[1], " down        3/4 ") || !strings.Contains(lines[2], " ready       0/4 ") {
		t.Errorf("endpoint lines:\n%s", strings.Join(lines[1:], "\n"))
	}
	for _, ep := range held {
		pool.Release(ep)
	}
}

func TestFormatForecast(t *testing.T) {
	f := forecast.ETA{Left: 19*time.Hour + 2*time.Minute, Low: 18*time.Hour + 40*time.Minute, High: 19*time.Hour + 25*time.Minute, MeanTokens: 1003.4, MeanSE: 27.6}
	text := func(f forecast.ETA) string {
		line, _ := cli.Row{Fields: forecastFields(f)}.Render(0)
		return line
	}
	if got, want := text(f), "ETA 19h02m (18h40m-19h25m), mean answer 1,003±28 tok"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	f.Low, f.High = f.Left, f.Left
	if got, want := text(f), "ETA 19h02m, mean answer 1,003±28 tok"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// On a narrow terminal the ETA itself stays.
	if got, _ := (cli.Row{Fields: forecastFields(f)}).Render(20); got != "ETA 19h02m" {
		t.Errorf("at 20 columns: %q", got)
	}
}

// lines are the display's rows as plain lines, every field in: what a
// log gets.
func (p *progress) lines() []string {
	var out []string
	for _, r := range p.rows() {
		line, _ := r.Render(0)
		out = append(out, line)
	}
	return out
}
