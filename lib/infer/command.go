// Package infer generates answers to prompt records on a fleet of
// OpenAI-compatible or SGLang servers: balanced across the endpoints by
// their free slots, tolerant of servers that fail, hang or restart,
// resumable after a kill at any moment with exactly one record per answer.
package infer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/openai"
)

// Description is infer's --help text.
const Description = `Generate answers to prompt records on a fleet of OpenAI-compatible or SGLang servers.

Each prompt record (with "messages", or "prompt" for completions) gets one
generation record per answer: the prompt record untouched plus an "output"
field. Requests go to the endpoint with the most free slots; failures are
retried elsewhere; prompts that cannot be answered go to the errors file.
A killed run continues with --resume: answers already in -o are skipped.

Example:
  extract data/0625/*.parquet | dedup | infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl
  infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl --resume prompts.jsonl
  infer bench --endpoints 127.0.0.1:30000-30007 --max-tokens 8192 prompts.jsonl

Generating is the default command: its flags are listed by infer generate --help.
infer bench measures the fleet and forecasts a run first (infer bench --help).
`

// Command is infer's command line: generate (what infer does unless told
// otherwise) or bench.
type Command struct {
	cli.Globals

	Generate Generate `cmd:"" default:"withargs" help:"Generate answers (the default: infer [flags] [files] is infer generate [flags] [files])."`
	Bench    Bench    `cmd:"" help:"Measure the fleet's throughput at rising concurrency, name the knee and forecast a run's wall time. Writes no records."`
}

// serverFlags say which servers to use and what every request carries;
// generate and bench share them.
type serverFlags struct {
	Endpoints     string   `short:"e" placeholder:"LIST" help:"Servers, comma-separated: host:port, host:first-last (a port range), or a URL (http:// is the default, https:// allowed, a path prefix kept). E.g. 127.0.0.1:30000-30007,gpu2:30000."`
	EndpointsFile string   `placeholder:"FILE" help:"File of endpoints, one (or a comma-separated list) per line; # starts a comment."`
	API           API      `name:"api" enum:"chat,completions,generate" default:"chat" help:"Request kind: chat (/v1/chat/completions), completions (/v1/completions) or generate (SGLang's native /generate). completions and generate need records with a \"prompt\" text."`
	Model         string   `help:"Model name sent with each request. Default: the first model the server's /v1/models lists."`
	Temperature   *float64 `placeholder:"T" help:"Sampling temperature. Default: the server's (the model's generation config)."`
	TopP          *float64 `name:"top-p" placeholder:"P" help:"Nucleus sampling. Default: the server's."`
	ExtraBody     string   `placeholder:"JSON" help:"JSON object merged into every request body, e.g. '{\"chat_template_kwargs\":{\"enable_thinking\":false}}' (for generate, its \"sampling_params\" merge into the sampling params). A record's own \"params\" override it and the flags. Default: none."`
	APIKey        string   `name:"api-key" env:"TOKENMILL_INFER_API_KEY,OPENAI_API_KEY" placeholder:"KEY" help:"Bearer token for the servers. Never printed. Default: none."`
}

// Generate is infer's generation command.
type Generate struct {
	Inputs []string `arg:"" optional:"" name:"input" help:"Prompt files: JSONL, JSON array or Parquet, plain, gzip or zstd. None, or -, reads stdin."`

	serverFlags `embed:""`

	MaxTokens *int     `placeholder:"N" help:"Longest answer in tokens. Default: the server's (SGLang: up to the context for chat, but only 16 for completions and 128 for generate, so set it there)."`
	Seed      *int64   `placeholder:"N" help:"Sampling seed; sample k of a prompt uses N+k. Default: none."`
	Stop      []string `placeholder:"TEXT" sep:"none" help:"Stop sequence; repeat the flag for several. Default: none."`
	Samples   int      `default:"1" placeholder:"K" help:"Independent answers per prompt, numbered by output.sample from the record's \"sample\" (0) on."`

	Concurrency   int           `default:"0" placeholder:"N" help:"Requests in flight per endpoint. 0: each server's max_running_requests (from /get_server_info) plus --queue-depth, or 64 if it does not say."`
	QueueDepth    int           `default:"2" placeholder:"N" help:"Requests kept waiting in each server's own queue beyond its max_running_requests, so a slot that frees is refilled without waiting for a round trip."`
	Policy        Policy        `enum:"least-outstanding,round-robin" default:"least-outstanding" help:"Load balancing: least-outstanding (the endpoint with the most free room) or round-robin (strict turns, for comparison)."`
	Retries       int           `default:"8" placeholder:"N" help:"Times a failed request (connection error, timeout, 429, 5xx, abort) is tried again, on another endpoint, before the prompt goes to the errors file."`
	Backoff       time.Duration `default:"1s" help:"First retry backoff; it doubles each time, with jitter."`
	MaxBackoff    time.Duration `default:"1m" help:"Longest retry backoff."`
	EjectAfter    int           `default:"5" placeholder:"N" help:"Consecutive failures that take an endpoint out of service until its /health answers again."`
	ProbeInterval time.Duration `default:"2s" help:"How often an endpoint out of service (or starting) is probed on /health."`

	RequestTimeout time.Duration `default:"30m" help:"Longest wait for one answer (8,192 tokens at 25 tok/s take 5.5 minutes, longer in a full batch). A request that times out is closed, which frees its slot on the server."`
	WaitReady      time.Duration `default:"10m" help:"How long to wait at start for an endpoint to answer /health."`
	DownTimeout    time.Duration `default:"1h" help:"Give up (exit 1, --resume continues) when every endpoint has been out of service this long. 0: wait for ever."`
	Grace          time.Duration `default:"5s" help:"On SIGINT/SIGTERM, how long answers in flight may still arrive; the rest are dropped and redone by --resume."`

	Output           string        `short:"o" default:"-" placeholder:"FILE" help:"Generation records (JSONL). - is stdout. An existing non-empty file is never overwritten: use --resume."`
	Errors           string        `placeholder:"FILE" help:"Error records for prompts that could not be answered. Default: beside -o (gen.jsonl -> gen.errors.jsonl); none with stdout. Rewritten each run: it lists the latest run's failures, which --resume tries again."`
	Resume           bool          `help:"Continue -o FILE: answers already in it are skipped, new ones appended; a partial last line left by a crash is cut off first."`
	RedoLength       bool          `help:"With --resume, generate again the answers whose only record finished with \"length\" (the old record stays; merge keeps the better)."`
	Rejects          string        `placeholder:"FILE" help:"Write input records that are not usable prompts here, each with a \"reject\" field."`
	FlushInterval    time.Duration `default:"1s" help:"How often finished answers are flushed to -o and the errors file, so a killed run loses at most this much work."`
	ProgressInterval time.Duration `default:"30s" help:"Interval of the plain progress lines when stderr is not a terminal (0: none)."`
	MetricsAddr      string        `placeholder:"HOST:PORT" help:"Serve the run's figures in Prometheus format at http://HOST:PORT/metrics."`
}

// readTargets reads --endpoints and --endpoints-file.
func readTargets(endpoints, file string) ([]Target, error) {
	var targets []Target
	if endpoints != "" {
		ts, err := ParseEndpoints(endpoints)
		if err != nil {
			return nil, cli.Usagef("--endpoints: %v", err)
		}
		targets = ts
	}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, cli.Usagef("--endpoints-file: %v", err)
		}
		ts, err := ReadEndpointsFile(f, file)
		f.Close()
		if err != nil {
			return nil, cli.Usagef("--endpoints-file: %v", err)
		}
		targets = append(targets, ts...)
	}
	if err := CheckTargets(targets); err != nil {
		return nil, cli.Usagef("%v", err)
	}
	return targets, nil
}

// usage checks the flags that kong cannot.
func (c *Generate) usage() ([]Target, []byte, error) {
	targets, err := readTargets(c.Endpoints, c.EndpointsFile)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case c.Samples < 1:
		return nil, nil, cli.Usagef("--samples must be at least 1")
	case c.Concurrency < 0 || c.QueueDepth < 0 || c.Retries < 0 || c.EjectAfter < 1:
		return nil, nil, cli.Usagef("--concurrency, --queue-depth and --retries must not be negative, --eject-after at least 1")
	case c.RequestTimeout <= 0 || c.WaitReady <= 0 || c.ProbeInterval <= 0 || c.FlushInterval <= 0:
		return nil, nil, cli.Usagef("--request-timeout, --wait-ready, --probe-interval and --flush-interval must be positive")
	case c.MaxTokens != nil && *c.MaxTokens < 1:
		return nil, nil, cli.Usagef("--max-tokens must be at least 1")
	case c.Resume && (c.Output == "" || c.Output == "-"):
		return nil, nil, cli.Usagef("--resume needs -o FILE: it reads what is already done from that file")
	case c.RedoLength && !c.Resume:
		return nil, nil, cli.Usagef("--redo-length goes with --resume")
	case strings.HasSuffix(c.Output, ".gz") || strings.HasSuffix(c.Output, ".zst"):
		return nil, nil, cli.Usagef("-o %s: infer writes plain JSONL so that a killed run can be resumed; compress the file afterwards", c.Output)
	}
	var extra []byte
	if c.ExtraBody != "" {
		extra = []byte(c.ExtraBody)
		if err := openai.ValidObject(extra); err != nil {
			return nil, nil, cli.Usagef("--extra-body: %v", err)
		}
	}
	return targets, extra, nil
}

// logSink sends diagnostics above the live progress block once it runs.
type logSink struct {
	env *cli.Env
	p   atomic.Pointer[cli.Progress]
}

func (l *logSink) Logf(format string, args ...any) {
	if p := l.p.Load(); p != nil {
		p.Logf(format, args...)
		return
	}
	l.env.Logf(format, args...)
}

// Run generates.
func (c *Generate) Run(ctx context.Context, env *cli.Env) error {
	targets, extra, err := c.usage()
	if err != nil {
		return err
	}
	log := &logSink{env: env}
	sampling := openai.Sampling{MaxTokens: c.MaxTokens, Temperature: c.Temperature, TopP: c.TopP, Seed: c.Seed, Stop: c.Stop}
	b, err := newBuilder(c.API, c.Model, sampling, extra)
	if err != nil {
		return cli.Usagef("%v", err)
	}

	// The output: refuse to overwrite, or resume.
	l := newLedger()
	outName := "stdout"
	var out *lineWriter
	if c.Output == "" || c.Output == "-" {
		out = newLineWriter("stdout", env.Stdout, nil)
	} else {
		outName = c.Output
		info, err := prepareOutput(c.Output, c.Resume, c.RedoLength, l, log.Logf)
		if errors.Is(err, errOutputExists) {
			return cli.Usagef("%s already exists and is not empty: add --resume to continue it (answers already in it are skipped), or choose another -o", c.Output)
		}
		if err != nil {
			return err
		}
		if c.Resume {
			msg := fmt.Sprintf("resuming %s: %s answers already done", c.Output, thousands(info.Answers))
			if c.RedoLength {
				msg += fmt.Sprintf(", %s cut short by length to redo", thousands(info.Length))
			}
			if info.Unreadable > 0 {
				msg += fmt.Sprintf(", %s lines ignored", thousands(info.Unreadable))
			}
			log.Logf("%s", msg)
		}
		if out, err = appendFile(c.Output); err != nil {
			return err
		}
	}
	errPath := c.Errors
	if errPath == "" {
		errPath = DefaultErrorsPath(c.Output)
	}
	var errs *lineWriter
	if errPath != "" {
		if errPath == c.Output {
			return cli.Usagef("--errors and -o name the same file")
		}
		errs = lazyFile(errPath)
	}
	rejects, err := jsonl.OpenRejects(env, c.Rejects)
	if err != nil {
		return err
	}

	// The fleet.
	poolCtx, cancelPool := context.WithCancel(context.Background())
	p := newPool(poolCtx, targets, poolConfig{
		apiKey: c.APIKey, fixedSlots: c.Concurrency, queueDepth: c.QueueDepth, ejectAfter: c.EjectAfter,
		probeInterval: c.ProbeInterval, controlTimeout: min(10*time.Second, c.RequestTimeout), downTimeout: c.DownTimeout,
		policy: c.Policy, logf: log.Logf,
	})
	defer func() {
		cancelPool()
		p.close()
	}()
	p.start()
	if err := p.waitReady(ctx, c.WaitReady); err != nil {
		out.close()
		rejects.Close()
		return err
	}
	// The errors file lists this run's failures alone: the previous run's
	// are tried again.
	if errPath != "" {
		if err := os.Remove(errPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the previous errors file: %w", err)
		}
	}
	model := c.Model
	if model == "" {
		model = p.discoverModel()
		if model == "" {
			model = "default"
			log.Logf("/v1/models names no model; sending model %q (set --model)", model)
		}
		if c.API != APIGenerate {
			b.model = model
		}
	}

	maxTokens := 0
	if c.MaxTokens != nil {
		maxTokens = *c.MaxTokens
	}
	est := NewEstimator(time.Minute, maxTokens)
	r := &runner{
		cfg: c, b: b, pool: p, out: out, errs: errs, rejects: rejects, ledger: l, eta: est,
		backoff: newBackoff(c.Backoff, c.MaxBackoff, uint64(time.Now().UnixNano())),
		logf:    log.Logf, model: model, input: make(chan *job, 64), ready: newReadyQueue(),
		work: make(chan task), workDone: make(chan struct{}),
	}
	defer close(r.workDone)
	switch c.API {
	case APICompletions:
		r.parse = openai.ParseCompletion
	case APIGenerate:
		r.parse = openai.ParseGenerate
	default:
		r.parse = openai.ParseChat
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	r.cancelRun = cancelRun

	prog := newProgress(r, env.Interactive, est)
	go prog.inputLines.Store(countInputLines(c.Inputs))
	cp := cli.StartProgress(ctx, env, c.ProgressInterval, prog.lines)
	log.p.Store(cp)
	if c.MetricsAddr != "" {
		stop, addr, err := serveMetrics(c.MetricsAddr, newMetrics(r))
		if err != nil {
			log.Logf("--metrics-addr: %v (going on without metrics)", err)
		} else {
			log.Logf("metrics at http://%s/metrics", addr)
			defer stop()
		}
	}
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		flushEvery(c.FlushInterval, stopFlush, out, errs)
		close(flushed)
	}()

	start := time.Now()
	rd := jsonl.NewReader(c.Inputs, env.Stdin, jsonl.Options{})
	readerExit := make(chan struct{})
	go func() {
		r.read(runCtx, rd)
		close(readerExit)
	}()
	if err := r.dispatch(runCtx); err != nil {
		r.fatal(err)
	}
	if runCtx.Err() != nil {
		r.stopping.Store(true)
		r.drain(c.Grace)
	}
	r.inflight.Wait()
	cancelRun(nil)
	select {
	case <-readerExit:
		rd.Close()
	case <-time.After(time.Second): // blocked on a terminal's stdin: nothing more is read
	}
	close(stopFlush)
	<-flushed
	cp.Stop()
	log.p.Store(nil)

	werr := out.close()
	if errs != nil {
		if err := errs.close(); werr == nil {
			werr = err
		}
	}
	rerr := rejects.Close()
	s := r.summary(time.Since(start))
	for _, line := range summaryLines(env.Name, s, outName) {
		fmt.Fprintln(env.Stderr, line)
	}
	switch {
	case r.fatalErr != nil:
		return r.fatalErr
	case werr != nil:
		return werr
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case rerr != nil && !errors.Is(rerr, cli.ErrRejects):
		return rerr
	case s.Failed > 0:
		return fmt.Errorf("%d answers failed (see %s): %w", s.Failed, errPath, cli.ErrRejects)
	}
	return rerr
}

// drain lets the requests in flight finish for up to grace, then closes
// their connections (the servers drop them; --resume redoes them).
func (r *runner) drain(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		r.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		r.pool.abortAll()
		<-done
	}
}

// discoverModel asks the ready endpoints' /v1/models for the model name.
func (p *pool) discoverModel() string {
	p.mu.Lock()
	var ready []*endpoint
	for _, ep := range p.eps {
		if ep.state == stateReady {
			ready = append(ready, ep)
		}
	}
	p.mu.Unlock()
	for _, ep := range ready {
		status, body, err := p.get(ep, openai.PathModels)
		if err != nil || status != 200 {
			continue
		}
		if l, err := openai.ParseModels(body); err == nil && len(l.Data) > 0 && l.Data[0].ID != "" {
			return l.Data[0].ID
		}
	}
	return ""
}
