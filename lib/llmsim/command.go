package llmsim

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is llmsim's --help text.
const Description = `Serve a simulated SGLang fleet: one endpoint per listen address, each with
SGLang's HTTP API (/v1/chat/completions, /v1/completions, /generate, /health,
/v1/models, /get_server_info, /get_load, /metrics), its continuous-batching
throughput curve, and faults on demand. Every answer starts with a 16-hex-digit
digest of its prompt, then one word per generated token.

Examples:

  # eight endpoints like the production fleet, 20x faster than real time
  llmsim --listen 127.0.0.1:30000-30007 --time-scale 20

  # the same, with a flaky and a slow endpoint, for testing retries
  llmsim --listen 127.0.0.1:30000-30007 --time-scale 20 --fail-rate 0.01 \
      --fault 3=crash-after:200,restart-after:30s,startup-delay:10s --fault :30005=slow:3

  # answer at once, to benchmark a client; write the URLs to a file when ready
  llmsim --listen 127.0.0.1:0,127.0.0.1:0 --instant --ready-file /tmp/llmsim.urls

  extract prompts.parquet | infer --endpoints 127.0.0.1:30000-30007 -o gen.jsonl

Durations (latencies, --startup-delay, --restart-after) are simulated time:
--time-scale S makes them S times shorter. --time-scale 0 is --instant.
--fault ENDPOINT=key:value,... overrides the fault flags for one endpoint,
named by index (0 is the first address), host:port, or :port; keys are
fail-rate, abort-rate, hang-rate, drop-rate, crash-after, restart-after, slow
and startup-delay. Stop with SIGINT or SIGTERM.`

// Command is the llmsim command line.
type Command struct {
	cli.Globals

	Listen    []string `help:"Address(es) to serve, one endpoint each: host:port, host:first-last, comma lists; repeatable. Port 0 picks a free port." default:"127.0.0.1:30000" placeholder:"ADDR"`
	ReadyFile string   `help:"Once listening, write the endpoints' base URLs here, one per line (atomically)." placeholder:"FILE"`

	Model         string  `help:"Served model name." default:"Qwen3.6-27B"`
	MaxRunning    int     `help:"Running slots per endpoint (SGLang --max-running-requests)." default:"48"`
	MaxQueued     int     `help:"Waiting queue bound per endpoint; past it, 503 \"The request queue is full.\" 0 is unbounded." default:"0"`
	ContextLength int     `help:"Context length in tokens; longer prompts get SGLang's 400." default:"32768"`
	Reasoning     bool    `help:"Chat answers carry message.reasoning_content (as with --reasoning-parser)."`
	TimeScale     float64 `help:"Run simulated time this many times faster than real time (0: --instant)." default:"1"`
	Instant       bool    `help:"Answer every request at once, without the batching model (client benchmarks)."`
	Seed          uint64  `help:"Seed of the fault draws and response ids." default:"1"`
	APIKey        string  `help:"Require this bearer token (Authorization: Bearer KEY) on every request but /health and /metrics, as SGLang's --api-key does; others get 401." placeholder:"KEY"`

	StepBase        time.Duration `help:"Fixed cost of one decode step (calibrated: 26.5 tok/s alone)." default:"37.6736ms"`
	StepPerRequest  time.Duration `help:"Added per running request (calibrated: 1,180 tok/s at 48)." default:"62.6us"`
	PrefillPerToken time.Duration `help:"Added per prompt token of each request joining a step." default:"40us"`

	FailRate     float64       `help:"Fraction of generation requests answered 500." default:"0"`
	AbortRate    float64       `help:"Fraction answered 200 with finish_reason \"abort\", cut short." default:"0"`
	HangRate     float64       `help:"Fraction accepted and never answered (until the client closes)." default:"0"`
	DropRate     float64       `help:"Fraction whose connection closes mid-response." default:"0"`
	CrashAfter   int           `help:"Crash (listener closed, connections dropped) on the generation request after this many (0: never)." default:"0"`
	RestartAfter time.Duration `help:"Bring a crashed endpoint back after this long (0: stays down)." default:"0s"`
	Slow         float64       `help:"Multiply every scheduler step by this factor." default:"1"`
	StartupDelay time.Duration `help:"Health answers 503 (and generation waits) this long after a (re)start." default:"0s"`
	Fault        []string      `help:"Per-endpoint faults ENDPOINT=key:value,...; repeatable (see above)." placeholder:"ENDPOINT=SPEC" sep:"none"`
}

// Run serves until ctx ends.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	addrs, err := ParseListen(c.Listen)
	if err != nil {
		return cli.Usagef("--listen: %v", err)
	}
	cfg, err := c.config(addrs)
	if err != nil {
		return err
	}
	fleet, err := Start(ctx, cfg, len(addrs))
	if err != nil {
		return err
	}
	defer fleet.Close()
	for _, u := range fleet.URLs() {
		env.Logf("listening on %s", u)
	}
	if c.ReadyFile != "" {
		urls := strings.Join(fleet.URLs(), "\n") + "\n"
		if err := jsonl.WriteFile(c.ReadyFile, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
			_, err := io.WriteString(w, urls)
			return err
		}); err != nil {
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	<-ctx.Done()
	fleet.Close()
	st := fleet.Stats()
	env.Logf("served %d requests on %d endpoints: %d completed, %d aborted, %d failed, %d hung, %d dropped, %d rejected, %d bad, %d lost, %d cancelled by their clients; %d unauthorized; %d crashes, %d restarts; %d tokens generated",
		st.Requests, fleet.Len(), st.Completed, st.Aborted, st.Failed, st.Hung, st.Dropped, st.Rejected, st.BadRequests, st.Lost, st.Cancelled,
		st.Unauthorized, st.Crashes, st.Restarts, st.GeneratedTokens)
	return nil
}

func (c *Command) config(addrs []string) (Config, error) {
	cfg := Config{
		Listen: addrs, ModelName: c.Model, MaxRunning: c.MaxRunning, MaxQueued: c.MaxQueued,
		ContextLength: c.ContextLength, Reasoning: c.Reasoning, TimeScale: c.TimeScale,
		Instant: c.Instant, Seed: c.Seed, APIKey: c.APIKey,
		Timing: Timing{StepBase: c.StepBase, StepPerRequest: c.StepPerRequest, PrefillPerToken: c.PrefillPerToken, Slow: 1},
		Faults: Faults{
			FailRate: c.FailRate, AbortRate: c.AbortRate, HangRate: c.HangRate, DropRate: c.DropRate,
			CrashAfter: c.CrashAfter, RestartAfter: c.RestartAfter, Slow: c.Slow, StartupDelay: c.StartupDelay,
		},
	}
	if c.TimeScale == 0 {
		cfg.Instant, cfg.TimeScale = true, 1
	}
	switch {
	case c.TimeScale < 0:
		return cfg, cli.Usagef("--time-scale %g is negative", c.TimeScale)
	case c.MaxRunning < 1:
		return cfg, cli.Usagef("--max-running %d: want at least 1", c.MaxRunning)
	case c.StepBase <= 0:
		return cfg, cli.Usagef("--step-base %v: want a positive duration", c.StepBase)
	}
	if err := cfg.Faults.validate(); err != nil {
		return cfg, cli.Usagef("%v", err)
	}
	for _, spec := range c.Fault {
		key, settings, ok := strings.Cut(spec, "=")
		if !ok {
			return cfg, cli.Usagef("--fault %q: want ENDPOINT=key:value,...", spec)
		}
		i, err := ResolveEndpoint(key, addrs)
		if err != nil {
			return cfg, cli.Usagef("--fault %q: %v", spec, err)
		}
		if cfg.PerEndpoint == nil {
			cfg.PerEndpoint = map[int]Faults{}
		}
		base, ok := cfg.PerEndpoint[i]
		if !ok {
			base = cfg.Faults
		}
		f, err := ParseFaultSpec(base, settings)
		if err != nil {
			return cfg, cli.Usagef("--fault %q: %v", spec, err)
		}
		cfg.PerEndpoint[i] = f
	}
	return cfg, nil
}
