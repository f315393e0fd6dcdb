package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/segmentio/encoding/json"
)

func resultsFile(t *testing.T, runs ...run) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	for _, r := range runs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	return bytes.NewReader(b.Bytes())
}

// Two endpoints' worth of work chosen so that every figure is round: each
// endpoint decodes 100 s at 1,000 tok/s, and prefilling every prompt token
// at 250 µs would take it another 100 s.
func TestRenderFloorsAndBounds(t *testing.T) {
	c := costModel{prefillUS: 250, decodeTPS: 1000, endpoints: 2}
	a := run{Name: "(a)", Requests: 10, PromptTokens: 800_000, CachedTokens: 720_000, PrefillTokens: 80_000, HistoryHitPct: 95, GeneratedTokens: 200_000, SimWallS: 120}
	b := run{Name: "(b)", Requests: 10, PromptTokens: 800_000, CachedTokens: 80_000, PrefillTokens: 720_000, HistoryHitPct: 10, GeneratedTokens: 200_000, SimWallS: 220}
	cc := run{Name: "(c)", Requests: 10, PromptTokens: 800_000, CachedTokens: 720_000, PrefillTokens: 80_000, HistoryHitPct: 95, GeneratedTokens: 200_000, SimWallS: 132}
	var out bytes.Buffer
	if err := render(&out, resultsFile(t, a, b, cc), c); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		// floors: 100 s of answers plus 10 s (a, c) or 90 s (b) of prefill
		"| (a) | 120 s | 1.00× | 10 | 800,000 | 720,000 (0.0%) | 80,000 | 95.0% | 110 s |",
		"| (b) | 220 s | 1.83× | 10 | 800,000 | 80,000 (0.0%) | 720,000 | 10.0% | 190 s |",
		"| (a): ≥ 90% of history tokens served from cache | 95.0% | 100% | yes |",
		// any client at most: each wall time over the least floor, 110 s
		"| (a) ≥ 1.3× faster than (b) | 1.83× | 2.00× | yes |",
		"| (a) ≥ 1.3× faster than (c) | 1.10× | 1.20× | **no** |",
		"Without a prefix cache prefill is 50.0% of an endpoint's busy time, so a client whose cache served every prompt token could be at most 2.00× faster",
		"No client can take less than the smallest floor, 110 s ((a))",
		"- (b) computed 640,000 prefill tokens more than (a): at 250 µs a token over 2 endpoints, 80 s of each endpoint's time; its wall time differs by 100 s.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// Results written without --generated (an older run) give the table
// without floors or bounds rather than figures made of zeros.
func TestRenderWithoutGeneratedTokens(t *testing.T) {
	a := run{Name: "(a)", PromptTokens: 100, PrefillTokens: 10, HistoryHitPct: 95, SimWallS: 10}
	b := run{Name: "(b)", PromptTokens: 100, PrefillTokens: 90, HistoryHitPct: 5, SimWallS: 12}
	var out bytes.Buffer
	if err := render(&out, resultsFile(t, a, b), costModel{prefillUS: 40, decodeTPS: 1180, endpoints: 8}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, absent := range []string{"floor", "at most", "Prefill's share"} {
		if strings.Contains(got, absent) {
			t.Errorf("output has %q without generated tokens:\n%s", absent, got)
		}
	}
	if !strings.Contains(got, "| (a) ≥ 1.3× faster than (b) | 1.20× | **no** |") {
		t.Errorf("target row missing:\n%s", got)
	}
}

func TestNoCacheGain(t *testing.T) {
	for _, tc := range []struct {
		prefillUS, decodeTPS float64
		generated, prompt    int64
		gain, share          float64
	}{
		{250, 1000, 200_000, 800_000, 2, 50},
		{40, 1000, 200_000, 800_000, 1.16, 100 * 16.0 / 116},
		{250, 1000, 0, 800_000, 0, 0}, // nothing generated: no bound
	} {
		c := costModel{prefillUS: tc.prefillUS, decodeTPS: tc.decodeTPS, endpoints: 2}
		gain, share := c.noCacheGain(run{GeneratedTokens: tc.generated, PromptTokens: tc.prompt})
		if d := gain - tc.gain; d > 1e-9 || d < -1e-9 {
			t.Errorf("%+v: gain %v, want %v", tc, gain, tc.gain)
		}
		if d := share - tc.share; d > 1e-9 || d < -1e-9 {
			t.Errorf("%+v: share %v, want %v", tc, share, tc.share)
		}
	}
}
