package infer

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/llmsim"
)

// progressLine is one plain progress line of infer, as far as the ETA
// goes.
type progressLine struct {
	done, total      int64
	elapsed, eta     time.Duration
	low, high        time.Duration
	mean, meanSE     int64
	hasETA, hasRange bool
	text             string
}

var (
	progressRE = regexp.MustCompile(`answers ([\d,]+)/([\d,]+) \(`)
	etaRE      = regexp.MustCompile(`\| ETA ([^ ,]+)(?: \((\S+)-(\S+)\))?, mean answer ([\d,]+)±([\d,]+) tok \| (\S+)$`)
)

// parseShortDuration reads shortDuration's forms: 19h02m, 4m05s, 12.3s
// (all of them Go durations).
func parseShortDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }

func atoiCommas(s string) int64 {
	n, _ := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	return n
}

func parseProgress(line string) (progressLine, bool) {
	p := progressLine{text: line}
	m := progressRE.FindStringSubmatch(line)
	if m == nil {
		return p, false
	}
	p.done, p.total = atoiCommas(m[1]), atoiCommas(m[2])
	e := etaRE.FindStringSubmatch(line)
	if e == nil {
		return p, true
	}
	var err error
	p.mean, p.meanSE = atoiCommas(e[4]), atoiCommas(e[5])
	if p.eta, err = parseShortDuration(e[1]); err != nil {
		return p, true
	}
	if p.elapsed, err = parseShortDuration(e[6]); err != nil {
		return p, true
	}
	p.hasETA = true
	if e[2] != "" {
		p.low, _ = parseShortDuration(e[2])
		p.high, _ = parseShortDuration(e[3])
		p.hasRange = true
	}
	return p, true
}

// TestETAEarlyInSimulatedRun runs infer on a time-scaled simulated fleet
// at its calibrated defaults (lognormal answers, median 600 tokens, here
// cut at 2,048) and checks what the progress display shows at 5% of the
// run against how the run really went: the ETA within 10% of the time the
// run still took, and the mean answer length within 10% of the final one
// (the answers finished by then average far less: the long ones are
// still being written).
func TestETAEarlyInSimulatedRun(t *testing.T) {
	const (
		prompts   = 8000
		endpoints = 2
		scale     = 600
	)
	s := newSetup(t, llmsim.Config{TimeScale: scale}, endpoints, promptSet{n: prompts})
	start := time.Now()
	res := runInfer(t, 2*time.Minute, "", s.args("--max-tokens", "2048", "--progress-interval", "20ms")...)
	wall := time.Since(start)
	if res.code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	var at5 *progressLine
	for _, line := range strings.Split(res.stderr, "\n") {
		if p, ok := parseProgress(line); ok && p.hasETA && p.done*20 >= p.total {
			at5 = &p
			break
		}
	}
	if at5 == nil {
		t.Fatalf("no progress line with an ETA at 5%%:\n%s", res.stderr)
	}
	m := regexp.MustCompile(`tokens: [\d,]+ prompt, ([\d,]+) completion`).FindStringSubmatch(res.stderr)
	if m == nil {
		t.Fatalf("no token summary:\n%s", res.stderr)
	}
	finalMean := float64(atoiCommas(m[1])) / prompts
	left := wall - at5.elapsed
	t.Logf("%s\nactual: %v left of %v; mean answer %.0f tokens", at5.text, left, wall, finalMean)
	if e := relErr(at5.eta, left); e > 0.10 {
		t.Errorf("ETA at %d/%d answers was %v, the run took %v more: off by %.0f%%", at5.done, at5.total, at5.eta, left, 100*e)
	}
	if e := math.Abs(float64(at5.mean)-finalMean) / finalMean; e > 0.10 {
		t.Errorf("mean answer at %d/%d answers shown as %d tokens, the run's was %.0f: off by %.0f%%", at5.done, at5.total, at5.mean, finalMean, 100*e)
	}
	if !at5.hasRange || at5.low > at5.eta || at5.high < at5.eta {
		t.Errorf("ETA range missing or not around the ETA: %s", at5.text)
	}
}
