// Package bench is `infer bench`: it measures the fleet's saturation
// curve before a run, names the knee, recommends --concurrency and
// forecasts the run's wall time. It talks to the servers through
// lib/fleet and forecasts with lib/forecast, as the run itself does.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
	"tokenmill/lib/mix"
	"tokenmill/lib/openai"
	"tokenmill/lib/tokenizer"
	"tokenmill/lib/tokens"
)

// Bench is `infer bench`: it measures the fleet's saturation curve
// (output tokens per second at a ladder of requests in flight per
// endpoint), names the knee, recommends --concurrency, and forecasts the
// wall time of a run. Requests are streamed, so every token is counted
// when it arrives and the time to first token is seen; it writes no
// records.
type Bench struct {
	Inputs []string `arg:"" optional:"" name:"input" help:"Prompt files to take sample prompts from (the first --sample usable records; JSONL, JSON array or Parquet, plain, gzip or zstd; - is stdin). None: prompts are generated, --prompt-tokens long."`

	fleet.ServerFlags `embed:""`
	tokens.FitFlags   `embed:""`

	Concurrency  string        `placeholder:"LIST" help:"Requests in flight per endpoint at each level, comma-separated, e.g. 1,8,48. Default: 1,2,4,8,16,32,48 and each server's reported capacity."`
	Duration     time.Duration `default:"30s" help:"Measured time per level, after the warm-up."`
	Warmup       time.Duration `default:"10s" help:"Time per level before measuring, not counted: the servers' batches fill and the previous level's requests leave."`
	Requests     int           `default:"0" placeholder:"N" help:"End a level's measurement early once N answers finished in it (0: --duration alone)."`
	PromptTokens int           `default:"256" placeholder:"N" help:"Length of generated prompts in tokens (about 4 characters each), when no input is given."`
	AnswerTokens *int          `placeholder:"N" help:"max_tokens of the bench's requests. Default: 256 for generated prompts (short answers let each level see many finish); for sample prompts --max-tokens, so that their answers are the run's, else 256. 0: no limit (sample prompts only)."`
	IgnoreEOS    bool          `name:"ignore-eos" default:"true" negatable:"" help:"With generated prompts, ask the servers (SGLang, vLLM) to write every answer to --answer-tokens. --no-ignore-eos for servers that refuse the field."`
	Sample       int           `default:"1000" placeholder:"N" help:"Sample prompts read from the input, or generated."`

	MaxTokens        *int    `placeholder:"N" help:"--max-tokens of the run to forecast: its answers are cut there. Default: the model's context as the servers state it, else a 32,768-token limit."`
	DatasetSize      int64   `placeholder:"N" help:"Answers of the run to forecast (prompts times --samples). Default: the lines of the input files."`
	MeanAnswerTokens float64 `placeholder:"N" help:"Mean answer length of the run to forecast, in tokens. Default: measured on the sample prompts' answers; when every one runs to --max-tokens, that is the length (with generated prompts, give it)."`
	Mix              string  `placeholder:"FILE" help:"The run's sampling mixture (infer --mix FILE): each sample prompt is asked under its arm, as the run would ask it, and the forecast mixes the arms' answer lengths (each measured apart, up to its own max_tokens) in their shares. Default: none."`

	JSON      bool          `name:"json" help:"Print the results as one JSON object instead of the table."`
	WaitReady time.Duration `default:"10m" help:"How long to wait at start for every endpoint to be ready (/health, or /v1/models where a server has no /health; --health-path)."`
	TimeScale float64       `default:"1" help:"The servers run this many times faster than real time (a simulator's --time-scale): durations are in their time, and so are the figures."`
}

// Description is the bench's --help text.
const Description = `Measure the fleet before a run: sample prompts are sent, streamed, at a
ladder of requests in flight per endpoint, each level warmed up and then
measured for --duration. The table shows, per level, answers and output
tokens per second (in total and per endpoint), latency and time to first
token; it names the knee (the smallest level within 5% of the best
level's output; a level with only errors never) and recommends
--concurrency. A level whose window's two halves disagree by more than 5%
is measured again. Once the ladder is done the knee is measured again, on
the servers as the ladder left them (the state the run starts in); when
that differs by more than 10% every level is, and the knee and the
forecast come from that second pass, the knee measured until it settles
(at most three times; the report says when it did not). With the dataset's size (counted from the input, or
--dataset-size) and its mean answer length (measured on the sample
prompts, or --mean-answer-tokens) it forecasts the run's wall time, with
its range. When every sample answer runs to --max-tokens, that is the
answers' length (the forecast says so), and the run goes in waves of the
servers' slots.

A connection the server closed while idle (llama.cpp's server closes one
after every streamed answer, though it advertised keep-alive) is not a
failed request: the request goes again on a new connection.

Requests ask for as much of the stream as the servers give: one short
request tries stream_options {"include_usage": true,
"continuous_usage_stats": true} (SGLang, vLLM: tokens counted as they
come), then {"include_usage": true} alone (gateways refuse the rest), then
none; streamed text is then turned into tokens by each answer's final
count. Stream options in --extra-body are used as they are.

Example:
  infer bench --endpoints 127.0.0.1:30000-30007 --max-tokens 8192 prompts.jsonl
  infer bench -e 127.0.0.1:30000-30007 --concurrency 1,8,48 --duration 1m --json
`

// benchLadder is the default ladder; each server's max_running_requests
// joins it.
var benchLadder = []int{1, 2, 4, 8, 16, 32, 48}

// ladder is the default ladder with the servers' max_running_requests.
func ladder(maxRunning []int) []int {
	levels := slices.Clone(benchLadder)
	for _, mr := range maxRunning {
		if mr > 0 {
			levels = append(levels, mr)
		}
	}
	slices.Sort(levels)
	return slices.Compact(levels)
}

// kneeGain is the throughput a level must add over the one before for the
// climb to go on.
const kneeGain = 0.05

// parseLevels reads --concurrency.
func parseLevels(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no levels in %q", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Config is one bench as the flags ask for it, made once by
// Bench.config: the bench reads it, never the flags.
type Config struct {
	Inputs    []string // sample prompt files; none: prompts are generated
	Targets   []fleet.Target
	Pool      fleet.Config // the fleet's settings; the bench adds its log and clock
	API       openai.API
	Model     string // --model, checked against what the servers list
	APIKey    string
	Extra     []byte          // --extra-body; nil: none
	Sampling  openai.Sampling // temperature and top_p; max_tokens is AnswerTokens
	Fit       tokens.FitFlags
	Tokenizer *tokenizer.Tokenizer // nil: prompts' tokens estimated or asked of the servers
	Mix       *mix.Mix             // nil: no mixture (mix.go)
	// Levels are the requests in flight per endpoint, measured in turn;
	// nil: benchLadder with each server's max_running_requests.
	Levels                      []int
	Warmup, Duration, WaitReady time.Duration
	Requests                    int // answers that end a level's window early (0: none)
	Sample                      int // sample prompts, read or generated
	PromptTokens                int // generated prompts' length
	AnswerTokens                int // the bench requests' max_tokens (0: none)
	IgnoreEOS                   bool
	Plan                        Plan // the run to forecast
	JSON                        bool
	TimeScale                   float64     // the servers' time over real time
	Clock                       clock.Clock // nil: the real clock
}

// Plan is the run the bench forecasts.
type Plan struct {
	Answers          int64   // 0: the lines of the inputs
	MeanAnswerTokens float64 // 0: measured on the sample answers
	MaxTokens        int     // the run's --max-tokens; 0: the model's context, else forecast.DefaultLimit
}

// config checks the flags that kong cannot, and turns them into the
// bench's Config.
func (c *Bench) config(env *cli.Env) (*Config, error) {
	targets, err := c.Targets()
	if err != nil {
		return nil, err
	}
	var levels []int
	if c.Concurrency != "" {
		if levels, err = parseLevels(c.Concurrency); err != nil {
			return nil, cli.Usagef("--concurrency: %v", err)
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	extra, err := c.Extra()
	if err != nil {
		return nil, err
	}
	cfg := &Config{
		Inputs: c.Inputs, Targets: targets, API: c.API, Model: c.Model, APIKey: c.APIKey, Extra: extra,
		Pool: c.PoolConfig(fleet.Config{
			EjectAfter: 1 << 30, ProbeInterval: time.Second, ControlTimeout: 10 * time.Second,
			Policy: fleet.LeastOutstanding, Ladder: true,
		}),
		Sampling: openai.Sampling{Temperature: c.Temperature, TopP: c.TopP}, Fit: c.FitFlags,
		Levels: levels, Warmup: c.Warmup, Duration: c.Duration, WaitReady: c.WaitReady, Requests: c.Requests,
		Sample: c.Sample, PromptTokens: c.PromptTokens, AnswerTokens: c.answerTokens(), IgnoreEOS: c.IgnoreEOS,
		Plan: Plan{Answers: c.DatasetSize, MeanAnswerTokens: c.MeanAnswerTokens}, JSON: c.JSON, TimeScale: c.TimeScale,
	}
	if c.MaxTokens != nil {
		cfg.Plan.MaxTokens = *c.MaxTokens
	}
	if c.Mix != "" {
		if cfg.Mix, err = mix.Load(c.Mix); err != nil {
			return nil, cli.Usagef("--mix %s: %v", c.Mix, err)
		}
	}
	if cfg.Tokenizer, err = c.FitFlags.LoadTokenizer(); err != nil {
		return nil, cli.Usagef("--tokenizer: %v", err)
	}
	c.Protect(env, targets)
	if _, err := cfg.builder(streamAsks[0].body, cfg.Model); err != nil {
		return nil, err
	}
	return cfg, nil
}

// check refuses what the flags cannot mean.
func (c *Bench) check() error {
	switch {
	case c.FitFlags.Check() != nil:
		return cli.Usagef("%v", c.FitFlags.Check())
	case c.Duration <= 0 || c.Warmup < 0 || c.WaitReady <= 0:
		return cli.Usagef("--duration and --wait-ready must be positive, --warmup not negative")
	case c.Requests < 0 || c.Sample < 1 || c.PromptTokens < 1 || c.AnswerTokens != nil && *c.AnswerTokens < 0:
		return cli.Usagef("--requests and --answer-tokens must not be negative, --sample and --prompt-tokens at least 1")
	case c.AnswerTokens != nil && *c.AnswerTokens == 0 && len(c.Inputs) == 0:
		return cli.Usagef("--answer-tokens 0 (no limit) needs sample prompts as input: generated prompts ask for --answer-tokens each")
	case c.MaxTokens != nil && *c.MaxTokens < 1:
		return cli.Usagef("--max-tokens must be at least 1")
	case c.DatasetSize < 0 || c.MeanAnswerTokens < 0 || c.TimeScale <= 0:
		return cli.Usagef("--dataset-size and --mean-answer-tokens must not be negative, --time-scale positive")
	}
	return nil
}

// defaultAnswerTokens is the bench's max_tokens for generated prompts.
const defaultAnswerTokens = 256

// answerTokens is the bench requests' max_tokens (0: none).
func (c *Bench) answerTokens() int {
	switch {
	case c.AnswerTokens != nil:
		return *c.AnswerTokens
	case len(c.Inputs) > 0 && c.MaxTokens != nil:
		return *c.MaxTokens
	}
	return defaultAnswerTokens
}

// Run measures the fleet and prints the report: the flags become a
// Config once, and the bench reads that.
func (c *Bench) Run(ctx context.Context, env *cli.Env) error {
	config := func() (*Config, error) { return c.config(env) }
	return cli.RunConfig(ctx, env, config, (*Config).Run)
}

// Run measures the fleet cfg names and prints the report.
func (cfg *Config) Run(ctx context.Context, env *cli.Env) error {
	clk := clock.Or(cfg.Clock)
	pc := cfg.Pool
	pc.Logf, pc.Clock = env.Logf, clk
	poolCtx, cancelPool := context.WithCancel(context.Background())
	p := fleet.NewPool(poolCtx, cfg.Targets, pc)
	defer func() {
		cancelPool()
		p.Close()
	}()
	p.Start()
	ready, err := p.WaitAll(ctx, cfg.WaitReady)
	if err != nil {
		return err
	}
	if err := fleet.CheckRun(p, cfg.API, cfg.Model); err != nil {
		return cli.Usagef("%v", err)
	}
	// Requests are built with the first endpoint's model; each endpoint
	// is sent its own name for it (fleet.Pool.BodyFor).
	model := p.DiscoverModel()
	if model == "" {
		model = "default"
	}
	s, err := cfg.negotiate(ctx, env, p, ready[0], model)
	if err != nil {
		return err
	}
	run := newBenchRun(cfg, clk, p, ready, s)
	levels := cfg.Levels
	if len(levels) == 0 {
		levels = ladder(run.maxRunning)
	}
	rep := run.report(model)
	rep.PromptNote = s.note
	m := measurer{cfg: cfg, ctx: ctx, env: env, run: run}
	m.climb(rep, levels)
	if ctx.Err() == nil {
		m.confirm(rep)
	}
	if len(rep.Levels) > 0 {
		rep.finish(run)
	}
	// Whole, so that a credential a server echoed into an error is
	// redacted however the writer cuts its writes.
	var out bytes.Buffer
	if err := rep.write(&out, cfg.JSON); err != nil {
		return err
	}
	if _, err := env.Stdout.Write(env.Secrets.Redact(out.Bytes())); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if rep.Recommended == 0 {
		return fmt.Errorf("no answer finished at any level: %s", firstError(rep.Levels))
	}
	return nil
}

// measurer measures the levels of one bench.
type measurer struct {
	cfg *Config
	ctx context.Context
	env *cli.Env
	run *benchRun
}

// measure measures n requests in flight per endpoint, twice when the
// two halves of the first window disagree.
func (m measurer) measure(n int) Level {
	lv := m.run.level(m.ctx, n)
	if m.ctx.Err() == nil && lv.Answers > 0 && !lv.steady() {
		// The two halves of the window disagree: the fleet was not
		// steady (still filling, or the machine stalled). Once more.
		m.env.Logf("  the two halves of its window disagree (%s and %s tok/s): measuring it again",
			cli.Thousands(int64(lv.Halves[0]+0.5)), cli.Thousands(int64(lv.Halves[1]+0.5)))
		lv = m.run.level(m.ctx, n)
		lv.Repeated, lv.Unsteady = true, !lv.steady()
	}
	return lv
}

// climb measures the levels in turn, until the output falls or no answer
// finishes within a level.
func (m measurer) climb(rep *Report, levels []int) {
	cfg, env := m.cfg, m.env
	for i, n := range levels {
		env.Logf("level %d/%d: %d per endpoint (%d in flight): %v warm-up, then %v measured",
			i+1, len(levels), n, n*len(m.run.eps), cfg.Warmup, cfg.Duration)
		lv := m.measure(n)
		if m.ctx.Err() == nil && lv.Answers == 0 {
			// No answer finished in the window: streams that never end, or
			// answers longer than the window. More in flight would not end
			// them sooner: the ladder stops here.
			rep.Levels = append(rep.Levels, lv)
			env.Logf("  no answer finished within the level's %v (%d failed requests%s): no higher level is measured; a longer --duration lets long answers finish",
				cfg.Warmup+cfg.Duration, lv.Errors, firstErrorNote(lv))
			return
		}
		if m.ctx.Err() != nil {
			return
		}
		rep.Levels = append(rep.Levels, lv)
		logLevel(env, lv)
		if why := falling(rep.Levels); why != "" && i+1 < len(levels) {
			rep.Held = why
			env.Logf("  %s: the levels above are not measured", why)
			return
		}
	}
}

// confirm measures the knee's level again, as the ladder left the
// servers (confirm.go).
func (m measurer) confirm(rep *Report) {
	rep.Levels, rep.Drift, rep.Unsettled = confirm(rep.Levels, func(n int) (Level, bool) {
		m.env.Logf("level %d per endpoint again, as the ladder left the servers: %v warm-up, then %v measured", n, m.cfg.Warmup, m.cfg.Duration)
		lv := m.measure(n)
		if m.ctx.Err() != nil {
			return lv, false
		}
		logLevel(m.env, lv)
		return lv, true
	})
	for _, why := range []string{rep.Drift, rep.Unsettled} {
		if why != "" {
			m.env.Logf("  %s", why)
		}
	}
}

// logLevel says what a level measured.
func logLevel(env *cli.Env, lv Level) {
	env.Logf("  %s tok/s (%s per endpoint), %d answers, latency p50 %s, TTFT p50 %s%s",
		cli.Thousands(int64(lv.TokPerSec)), thousandsFloat(lv.TokPerSecPerEndpoint), lv.Answers,
		fmtSeconds(lv.LatencyP50), fmtSeconds(lv.TTFTP50), errorNote(lv))
}

func firstErrorNote(lv Level) string {
	if lv.FirstError == "" {
		return ""
	}
	return ": " + lv.FirstError
}

func errorNote(lv Level) string {
	if lv.Errors == 0 {
		return ""
	}
	return fmt.Sprintf("; %d failed requests (%s)", lv.Errors, lv.FirstError)
}

func firstError(levels []Level) string {
	for _, lv := range levels {
		if lv.FirstError != "" {
			return lv.FirstError
		}
	}
	return "no request was answered within a level's window (streams still going when it closed)"
}

// thousandsFloat writes x with thousands separators, with one decimal
// below 100.
func thousandsFloat(x float64) string {
	if x < 100 {
		return cli.ThousandsFloat(x, 1)
	}
	return cli.Thousands(int64(x + 0.5))
}

// fmtSeconds writes a latency: 48ms, 12.3s, 4m05s; - for none (no answer
// finished, or none began, inside the window).
func fmtSeconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	if s < 1 {
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return cli.ShortDuration(time.Duration(s * float64(time.Second)))
}

// Help is the bench's detailed --help text.
func (c *Bench) Help() string { return Description }
