package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/forecast"
	"tokenmill/lib/openai"
)

// Report is what `infer bench` found; --json prints it as is.
type Report struct {
	Endpoints    []string   `json:"endpoints"`
	API          openai.API `json:"api"`
	Model        string     `json:"model"`
	MaxRunning   []int      `json:"max_running_requests"` // per endpoint; 0: not reported
	PromptNote   string     `json:"prompts"`
	AnswerTokens int        `json:"answer_tokens"` // the bench's max_tokens (0: none)
	Warmup       float64    `json:"warmup_s"`
	Duration     float64    `json:"duration_s"`

	Levels []Level `json:"levels"`
	// Knee is the smallest level within 5% of the best level's output, the
	// recommendation; KneeFound is false when the best was the last level
	// measured (output was still climbing). Levels with only errors never
	// qualify; Recommended is 0 when no level answered.
	Knee        int  `json:"knee"`
	KneeFound   bool `json:"knee_found"`
	Recommended int  `json:"recommended_concurrency"`

	Forecast     *Forecast `json:"forecast,omitempty"`
	ForecastNote string    `json:"forecast_note,omitempty"`
	// Held says why the ladder stopped before its end: the output fell as
	// more were sent at once.
	Held string `json:"held,omitempty"`
	// Unsteady: every level answered was unsteady, so the figures (the
	// knee, the forecast) rest on measurements that did not settle.
	Unsteady bool `json:"unsteady,omitempty"`
	// Drift says how the servers changed during the ladder: the knee
	// measured again gave another figure, so every level was (confirm.go).
	Drift string `json:"drift,omitempty"`
	// Unsettled: the knee measured a third time still disagreed with the
	// second: the forecast's range spans both.
	Unsettled string `json:"unsettled,omitempty"`
	// Arms are the mixture's arms in the forecast (--mix, mix.go).
	Arms []ArmForecast `json:"arms,omitempty"`
}

// Level is one level of the ladder, measured. Times are in seconds.
type Level struct {
	Concurrency          int       `json:"concurrency"` // per endpoint
	InFlight             int       `json:"in_flight"`   // the whole fleet
	Seconds              float64   `json:"seconds"`     // the measured window
	RequestsPerSec       float64   `json:"requests_per_s"`
	TokPerSec            float64   `json:"output_tokens_per_s"`
	TokPerSecPerEndpoint float64   `json:"output_tokens_per_s_per_endpoint"`
	ByEndpoint           []float64 `json:"output_tokens_per_s_by_endpoint"`
	Answers              int       `json:"answers"` // finished in the window
	LatencyP50           float64   `json:"latency_p50_s"`
	LatencyP99           float64   `json:"latency_p99_s"`
	TTFTP50              float64   `json:"ttft_p50_s"`
	TTFTP99              float64   `json:"ttft_p99_s"`
	Errors               int       `json:"errors"`
	FirstError           string    `json:"first_error,omitempty"`
	// Halves are the output tokens per second of the first and the second
	// half of the window. When they differ by more than 5% the level is
	// measured again (Repeated); Unsteady when they differ again.
	Halves   []float64 `json:"halves_output_tokens_per_s,omitempty"`
	Repeated bool      `json:"repeated,omitempty"`
	Unsteady bool      `json:"unsteady,omitempty"`
	// Remeasured: the level was measured again once the ladder was done
	// (confirm.go); FirstTokPerSec is what it gave the first time.
	// PrevTokPerSec: measured a third time, what the second gave.
	Remeasured     bool    `json:"remeasured,omitempty"`
	FirstTokPerSec float64 `json:"first_output_tokens_per_s,omitempty"`
	PrevTokPerSec  float64 `json:"previous_output_tokens_per_s,omitempty"`
	// RunSeconds is the forecast run's wall time at this level.
	RunSeconds float64 `json:"run_seconds,omitempty"`
}

// steady tells whether the two halves of the level's window agree within
// the margin.
func (lv *Level) steady() bool {
	if len(lv.Halves) != 2 {
		return true
	}
	a, b := lv.Halves[0], lv.Halves[1]
	return math.Abs(a-b) <= kneeGain*max(a, b)
}

// answered: answers finished at the level, with tokens (not only errors,
// nor streams that were still going when the window closed): a level
// without one is never recommended.
func (lv *Level) answered() bool { return lv.Answers > 0 && lv.TokPerSec > 0 }

// Forecast is the predicted wall time of a run at the recommended
// concurrency.
type Forecast struct {
	Answers          int64   `json:"answers"`
	MeanAnswerTokens float64 `json:"mean_answer_tokens"`
	MeanAnswerSE     float64 `json:"mean_answer_tokens_se"`
	// MeanSource: "measured", "given", "measured per arm", or
	// "max_tokens" when every sample answer ran to it.
	MeanSource  string  `json:"mean_source"`
	MaxTokens   int     `json:"max_tokens"`
	Concurrency int     `json:"concurrency"`
	TokPerSec   float64 `json:"output_tokens_per_s"`
	Seconds     float64 `json:"seconds"`
	LowSeconds  float64 `json:"low_seconds"`
	HighSeconds float64 `json:"high_seconds"`
}

func (r *benchRun) report(model string) *Report {
	return &Report{Endpoints: r.urls, API: r.cfg.API, Model: model, MaxRunning: r.maxRunning, AnswerTokens: r.cfg.AnswerTokens,
		Warmup: r.cfg.Warmup.Seconds(), Duration: r.cfg.Duration.Seconds(), Levels: []Level{}}
}

// knee returns the index of the smallest level whose output is within
// kneeGain of the best level's, among those that answered, and whether a
// level above it answered (the curve was seen to flatten); -1 when no
// level answered. Taking the best of all levels rather than the
// first step that gains little keeps one low measurement (a stall of the
// machine) from stopping the climb early.
//
// Steady levels are taken over unsteady ones where there are any: a
// window whose halves disagree may have caught a stall or a burst, and
// one such level above the steady ones must not become the knee. An
// unsteady level whose slower half still beat every steady level is
// usable too: whatever it caught, it gave more (on a CPU server one
// request at a time may measure unsteady and still three times the rate
// of four).
func knee(levels []Level) (int, bool) {
	usable := func(lv *Level) bool { return lv.answered() }
	steadyBest := -1.0
	for i := range levels {
		if lv := &levels[i]; lv.answered() && !lv.Unsteady {
			steadyBest = max(steadyBest, lv.TokPerSec)
		}
	}
	if steadyBest >= 0 {
		usable = func(lv *Level) bool {
			return lv.answered() && (!lv.Unsteady || len(lv.Halves) == 2 && min(lv.Halves[0], lv.Halves[1]) > steadyBest)
		}
	}
	best := -1
	for i := range levels {
		if usable(&levels[i]) && (best < 0 || levels[i].TokPerSec > levels[best].TokPerSec) {
			best = i
		}
	}
	if best < 0 {
		return -1, false
	}
	k := best
	for i := range levels {
		if usable(&levels[i]) && levels[i].TokPerSec >= (1-kneeGain)*levels[best].TokPerSec && levels[i].Concurrency < levels[k].Concurrency {
			k = i
		}
	}
	found := false
	for i := range levels {
		found = found || levels[i].answered() && levels[i].Concurrency > levels[k].Concurrency
	}
	return k, found
}

// falling says, once the output fell at the last two levels measured, each
// under the best below them by more than kneeGain, that the server slows
// as more are sent at once (a server on the CPU, or one with fewer slots
// than that and a costly queue): higher levels would only take longer and
// measure less. "" otherwise.
func falling(levels []Level) string {
	n := len(levels)
	if n < 3 {
		return ""
	}
	best := -1
	for i := range levels[:n-2] {
		if levels[i].answered() && (best < 0 || levels[i].TokPerSec > levels[best].TokPerSec) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	b := levels[best]
	for _, lv := range levels[n-2:] {
		if !lv.answered() || lv.TokPerSec >= (1-kneeGain)*b.TokPerSec {
			return ""
		}
	}
	return fmt.Sprintf("the output fell as more were sent at once (%d and %d per endpoint gave %s and %s tok/s, %d gave %s)",
		levels[n-2].Concurrency, levels[n-1].Concurrency, cli.Thousands(int64(levels[n-2].TokPerSec+0.5)),
		cli.Thousands(int64(levels[n-1].TokPerSec+0.5)), b.Concurrency, cli.Thousands(int64(b.TokPerSec+0.5)))
}

// finish counts answers per second, names the knee and forecasts the run.
func (rep *Report) finish(r *benchRun) {
	k, found := knee(rep.Levels)
	if k < 0 {
		rep.ForecastNote = "no level answered: nothing to recommend or forecast"
		return
	}
	rep.Unsteady = !slices.ContainsFunc(rep.Levels, func(lv Level) bool { return lv.answered() && !lv.Unsteady }) // no steady level answered
	if rep.Held != "" {
		found = true // the curve was seen to fall past the knee
	}
	rep.Knee, rep.KneeFound, rep.Recommended = rep.Levels[k].Concurrency, found, rep.Levels[k].Concurrency
	dist, fitted := r.obs.fit()
	benchLimit := rep.perSecond(r, dist, fitted)
	if run, ok := rep.runShape(r, dist, fitted, benchLimit); ok {
		rep.forecast(r, k, run)
	}
}

// perSecond counts each level's answers per second: tokens per second
// over the mean answer, as the answers that finish inside a level are the
// short ones. It returns the max_tokens the bench asked with.
func (rep *Report) perSecond(r *benchRun, dist forecast.Dist, fitted bool) (benchLimit float64) {
	benchLimit = float64(r.cfg.AnswerTokens)
	if benchLimit == 0 {
		benchLimit = float64(r.uncapped())
	}
	var benchMean float64
	if fitted {
		benchMean, _ = forecast.CappedMoments(dist, benchLimit)
	} else if r.obs.finished > 0 {
		benchMean = r.obs.finishedTokens / r.obs.finished
	}
	if benchMean > 0 {
		for i := range rep.Levels {
			rep.Levels[i].RequestsPerSec = rep.Levels[i].TokPerSec / benchMean
		}
	}
	return benchLimit
}

// runShape is what a forecast takes of the run to come: its answers and
// their lengths, and where the lengths come from.
type runShape struct {
	answers             int64
	dist                forecast.Dist
	limit, mean, se, sd float64
	source              string
}

// runShape finds the run's answers and lengths, or says in the report's
// forecast note why they cannot be known (ok false).
func (rep *Report) runShape(r *benchRun, dist forecast.Dist, fitted bool, benchLimit float64) (run runShape, ok bool) {
	cfg := r.cfg
	run = runShape{answers: cfg.Plan.Answers, dist: dist, limit: float64(r.uncapped()), source: "given"}
	if run.answers == 0 && len(cfg.Inputs) > 0 {
		run.answers = max(forecast.CountInputLines(context.Background(), cfg.Inputs), 0)
	}
	if cfg.Plan.MaxTokens > 0 {
		run.limit = float64(cfg.Plan.MaxTokens)
	}
	switch {
	case run.answers == 0:
		rep.ForecastNote = "give --dataset-size (or the dataset's files as input) to forecast a run"
		return run, false
	case cfg.Plan.MeanAnswerTokens > 0:
		run.mean = min(cfg.Plan.MeanAnswerTokens, run.limit)
		if !fitted {
			// The end of the run, modelled with answers of that mean spread
			// like typical instruction answers.
			run.dist = forecast.LogNormal{Mu: math.Log(run.mean) - 0.5, Sigma: 1}
		}
	case len(cfg.Inputs) == 0:
		rep.ForecastNote = "generated prompts say nothing of the dataset's answers: give --mean-answer-tokens, or sample prompts as input, to forecast a run"
		return run, false
	case cfg.Mix != nil:
		run.source = "measured per arm"
		var note string
		if run.dist, run.limit, run.mean, run.se, run.sd, rep.Arms, note = r.mixLengths(); note != "" {
			rep.ForecastNote = note
			return run, false
		}
	default:
		l, ok := r.obs.lengths(benchLimit, run.limit)
		if !ok {
			rep.ForecastNote = noLengthsNote(&r.obs, benchLimit, run.limit)
			return run, false
		}
		run.dist, run.mean, run.se, run.sd, run.source = l.d, l.mean, l.se, l.sd, "measured"
		if l.capped > 0 {
			run.source = sourceCapped
		}
	}
	return run, true
}

// forecast gives each level the run's time at its rate, and the knee's
// level (k) the forecast with its range.
func (rep *Report) forecast(r *benchRun, k int, run runShape) {
	capped := run.source == sourceCapped
	for i := range rep.Levels {
		lv := &rep.Levels[i]
		if lv.TokPerSec <= 0 {
			continue
		}
		// The run at this level's output rate. One answer's decode speed
		// (what the drain at the end of the run goes at) is the rate over
		// the level's slots.
		runTime := func(rate float64) (secs, lo, hi float64) {
			secs, lo, hi = forecast.RunTime(forecast.Run{
				Answers: float64(run.answers), TokPerSec: rate, Speed: rate / r.slots(lv.Concurrency),
				Lengths: run.dist, Limit: run.limit, Mean: run.mean, SE: run.se, SD: run.sd,
			})
			if capped {
				// Answers of one length go in waves (waves.go); answers
				// that drifted out of step would end as RunTime has it.
				w, wlo, whi := r.wavesTime(rep.Levels, lv.Concurrency, rate, float64(run.answers), run.mean)
				secs, lo, hi = w, min(lo, secs, wlo), max(hi, secs, whi)
			}
			return secs, lo, hi
		}
		secs, low, high := runTime(lv.TokPerSec)
		lv.RunSeconds = secs
		if i != k {
			continue
		}
		// The run's range spans other rates the level was seen at: its
		// window's two halves when it did not settle, and the measurement
		// before its last when the servers were still changing.
		span := func(rate float64) {
			if rate > 0 {
				s, lo, hi := runTime(rate)
				low, high = min(low, lo, s), max(high, hi, s)
			}
		}
		if lv.Unsteady && len(lv.Halves) == 2 {
			span(lv.Halves[0])
			span(lv.Halves[1])
		}
		if rep.Unsettled != "" {
			span(lv.PrevTokPerSec)
		}
		rep.Forecast = &Forecast{Answers: run.answers, MeanAnswerTokens: run.mean, MeanAnswerSE: run.se, MeanSource: run.source, MaxTokens: r.cfg.Plan.MaxTokens,
			Concurrency: lv.Concurrency, TokPerSec: lv.TokPerSec, Seconds: secs, LowSeconds: low, HighSeconds: high}
	}
}

// sourceCapped is the forecast's mean_source when every sample answer ran
// to max_tokens: the cap is the answer length.
const sourceCapped = "max_tokens"

// noLengthsNote says why the sample answers tell no length for the run.
func noLengthsNote(o *lengthObs, benchCap, limit float64) string {
	if o.capped > 0 {
		return fmt.Sprintf("every sample answer ran to the bench's max_tokens (%s), not the run's (%s): ask with the run's (--answer-tokens %s), or give --mean-answer-tokens",
			cli.Thousands(int64(benchCap)), cli.Thousands(int64(limit)), cli.Thousands(int64(limit)))
	}
	return "fewer than two sample answers ended on their own, and none ran to max_tokens (cut by the level's end): raise --duration, or give --mean-answer-tokens"
}

// sourceText is how the forecast's line says where its mean came from.
func sourceText(source string) string {
	if source == sourceCapped {
		return "max_tokens: every sample answer ran to it"
	}
	return source
}

func (rep *Report) write(w io.Writer, asJSON bool) error {
	rep.finite()
	if asJSON {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d endpoints (max_running_requests %s), %s API, model %s\n", len(rep.Endpoints), maxRunningText(rep.MaxRunning), rep.API, rep.Model)
	answers := "answers up to " + cli.Thousands(int64(rep.AnswerTokens)) + " tokens"
	if rep.AnswerTokens == 0 {
		answers = "answers unlimited"
	}
	fmt.Fprintf(&b, "%s, %s; each level %s warm-up, then %s measured\n\n", rep.PromptNote, answers,
		cli.ShortDuration(time.Duration(rep.Warmup*float64(time.Second))), cli.ShortDuration(time.Duration(rep.Duration*float64(time.Second))))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	// With a forecast, each level's time for the whole run.
	runCol := rep.Forecast != nil
	head := "per endpoint\tin flight\tanswers/s\tout tok/s\tper endpoint\tlatency p50\tp99\tTTFT p50\tp99\t"
	if runCol {
		head += "run\t"
	}
	fmt.Fprintln(tw, head)
	for _, lv := range rep.Levels {
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t", lv.Concurrency, lv.InFlight, lv.RequestsPerSec,
			cli.Thousands(int64(lv.TokPerSec+0.5)), thousandsFloat(lv.TokPerSecPerEndpoint),
			fmtSeconds(lv.LatencyP50), fmtSeconds(lv.LatencyP99), fmtSeconds(lv.TTFTP50), fmtSeconds(lv.TTFTP99))
		if runCol {
			fmt.Fprintf(tw, "%s\t", fmtSeconds(lv.RunSeconds))
		}
		switch {
		case lv.Errors > 0 && !lv.answered():
			fmt.Fprintf(tw, "  all %d failed", lv.Errors)
		case lv.Errors > 0:
			fmt.Fprintf(tw, "  %d failed", lv.Errors)
		}
		if lv.Unsteady {
			fmt.Fprint(tw, "  unsteady")
		}
		if lv.Remeasured {
			fmt.Fprintf(tw, "  measured again after the ladder (first %s tok/s)", cli.Thousands(int64(lv.FirstTokPerSec+0.5)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	b.WriteByte('\n')
	if rep.Held != "" {
		fmt.Fprintf(&b, "held: %s; the levels above were not measured\n", rep.Held)
	}
	if rep.Drift != "" {
		fmt.Fprintf(&b, "drift: %s\n", rep.Drift)
	}
	if rep.Unsettled != "" {
		fmt.Fprintf(&b, "%s\n", rep.Unsettled)
	}
	if rep.Unsteady {
		fmt.Fprintf(&b, "could not measure steadily: no level's output settled (the two halves of every window differed by more than %.0f%%, measured twice); the knee and the forecast are rough: raise --duration (or --requests) to measure longer\n", 100*kneeGain)
	}
	b.WriteString(rep.kneeText())
	if f := rep.Forecast; f != nil {
		fmt.Fprintf(&b, "forecast: %s answers x %s±%s tokens (%s) at %s tok/s: %s", cli.Thousands(f.Answers),
			cli.Thousands(int64(f.MeanAnswerTokens+0.5)), cli.Thousands(int64(f.MeanAnswerSE+0.5)), sourceText(f.MeanSource),
			cli.Thousands(int64(f.TokPerSec+0.5)), cli.ShortDuration(secondsDuration(f.Seconds)))
		if f.HighSeconds-f.LowSeconds >= 1 {
			fmt.Fprintf(&b, " (%s-%s)", cli.ShortDuration(secondsDuration(f.LowSeconds)), cli.ShortDuration(secondsDuration(f.HighSeconds)))
		}
		b.WriteByte('\n')
		b.WriteString(armsText(rep.Arms))
	} else if rep.ForecastNote != "" {
		b.WriteString("forecast: " + rep.ForecastNote + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// kneeText says where the curve bends and what to run with.
func (rep *Report) kneeText() string {
	if rep.Recommended == 0 {
		return "recommended: nothing: no level answered (see the errors)\n"
	}
	var k int
	for i, lv := range rep.Levels {
		if lv.Concurrency == rep.Knee {
			k = i
		}
	}
	lv := rep.Levels[k]
	// The servers' max_running_requests, if they all say the same.
	mr := 0
	for i, m := range rep.MaxRunning {
		if i == 0 || m == mr {
			mr = m
		} else {
			mr = 0
			break
		}
	}
	best := lv
	for _, l := range rep.Levels {
		if l.answered() && l.TokPerSec > best.TokPerSec {
			best = l
		}
	}
	var b strings.Builder
	switch {
	case rep.KneeFound && best.Concurrency == lv.Concurrency:
		// The best level is the knee: name the next one up.
		for _, next := range rep.Levels {
			if next.Concurrency > lv.Concurrency && next.answered() {
				fmt.Fprintf(&b, "knee: %d per endpoint (%s tok/s); %d per endpoint adds %s\n", lv.Concurrency,
					cli.Thousands(int64(lv.TokPerSec+0.5)), next.Concurrency, percent(next.TokPerSec, lv.TokPerSec))
				break
			}
		}
	case rep.KneeFound:
		fmt.Fprintf(&b, "knee: %d per endpoint (%s tok/s), within %.0f%% of the best, %d per endpoint (%s tok/s)\n", lv.Concurrency,
			cli.Thousands(int64(lv.TokPerSec+0.5)), 100*kneeGain, best.Concurrency, cli.Thousands(int64(best.TokPerSec+0.5)))
	case k > 0 && rep.Levels[k-1].answered():
		prev := rep.Levels[k-1]
		fmt.Fprintf(&b, "no knee up to %d per endpoint: it still added %s over %d\n", lv.Concurrency,
			percent(lv.TokPerSec, prev.TokPerSec), prev.Concurrency)
	}
	fmt.Fprintf(&b, "recommended: --concurrency %d", rep.Recommended)
	if mr > 0 && rep.Recommended == mr {
		b.WriteString(" (the servers' max_running_requests: infer's default, which adds --queue-depth, does the same)")
	} else if !rep.KneeFound && (mr == 0 || rep.Recommended < mr) {
		b.WriteString(" (or measure higher levels with --concurrency)")
	}
	b.WriteByte('\n')
	return b.String()
}

// percent is how much a adds over b, "+12.3%"; "-" when b is nothing.
func percent(a, b float64) string {
	if !(b > 0) || math.IsInf(a, 0) || math.IsNaN(a) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(a/b-1))
}

// finite makes every figure of the report a finite number: a degenerate
// level (nothing answered, a window of no length) must not print NaN or
// Inf, nor make the JSON unwritable.
func (rep *Report) finite() {
	fix := func(xs ...*float64) {
		for _, x := range xs {
			if math.IsNaN(*x) || math.IsInf(*x, 0) {
				*x = 0
			}
		}
	}
	fix(&rep.Warmup, &rep.Duration)
	for i := range rep.Levels {
		lv := &rep.Levels[i]
		fix(&lv.Seconds, &lv.RequestsPerSec, &lv.TokPerSec, &lv.TokPerSecPerEndpoint, &lv.LatencyP50, &lv.LatencyP99,
			&lv.TTFTP50, &lv.TTFTP99, &lv.RunSeconds, &lv.FirstTokPerSec, &lv.PrevTokPerSec)
		for j := range lv.ByEndpoint {
			fix(&lv.ByEndpoint[j])
		}
		for j := range lv.Halves {
			fix(&lv.Halves[j])
		}
	}
	if f := rep.Forecast; f != nil {
		fix(&f.MeanAnswerTokens, &f.MeanAnswerSE, &f.TokPerSec, &f.Seconds, &f.LowSeconds, &f.HighSeconds)
	}
	for i := range rep.Arms {
		a := &rep.Arms[i]
		fix(&a.Share, &a.MeanAnswerTokens, &a.MeanAnswerSE)
	}
}

func maxRunningText(mr []int) string {
	lo, hi := 0, 0
	for i, m := range mr {
		if i == 0 || m < lo {
			lo = m
		}
		hi = max(hi, m)
	}
	switch {
	case hi == 0:
		return "not reported"
	case lo == hi:
		return fmt.Sprint(hi)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}
