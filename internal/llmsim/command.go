package llmsim

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is llmsim's --help text.
const Description = `Serve a simulated fleet of LLM servers: one endpoint per listen address, each
with the HTTP API of SGLang (the default: /v1/chat/completions, /v1/completions,
/generate, /health, /v1/models, /get_server_info, /get_load, /metrics) or, with
--flavor, of vLLM, llama.cpp's llama-server, Ollama or an OpenAI gateway, a
continuous-batching throughput curve, and faults on demand. Every answer starts with a 16-hex-digit
digest of its prompt, then one word per generated token; with --tokenizer the same words are
written in a real model's tokens, its chat template rendering every prompt.

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
fail-rate, abort-rate, hang-rate, drop-rate, fail-burst, fail-burst-after,
crash-after, restart-after, slow, startup-delay, slots (a slot schedule,
steps split by slashes) and flavor
(the kind of server it imitates). Stop with SIGINT or SIGTERM.

  # a server that answers 500 to every request while its /health says ok,
  # and one that answers 500 to 12 requests after every restart, then recovers
  llmsim --listen 127.0.0.1:30000-30001 --flavor llamacpp --fault 0=fail-rate:1 \
      --fault 1=fail-burst:12,crash-after:200,restart-after:30s

  # a mixed fleet: two SGLang servers, a vLLM and an Ollama one
  llmsim --listen 127.0.0.1:30000-30003 --fault 2=flavor:vllm --fault 3=flavor:ollama

  # a model's own tokenizer and chat template (its Hugging Face folder), and
  # a second server whose template drifted from it
  llmsim --listen 127.0.0.1:30000 --flavor vllm --tokenizer models/Qwen3-8B
  llmsim --listen 127.0.0.1:30001 --flavor vllm --tokenizer models/Qwen3-8B --template-drift`

// Command is the llmsim command line: a field per flag, as kong reads
// them (hence more than a struct would otherwise hold); its run turns
// them into a Config.
type Command struct {
	cli.Globals

	Listen    []string `help:"Address(es) to serve, one endpoint each: host:port, host:first-last, comma lists; repeatable. Port 0 picks a free port." default:"127.0.0.1:30000" placeholder:"ADDR"`
	ReadyFile string   `help:"Once listening, write the endpoints' base URLs here, one per line (atomically)." placeholder:"FILE"`

	Flavor               string   `help:"Kind of server to imitate: sglang, vllm, vllm-0.10.0 (flat errors), llamacpp, ollama or openai (a gateway); per endpoint with --fault N=flavor:NAME." default:"sglang" enum:"sglang,vllm,vllm-0.10.0,llamacpp,ollama,openai"`
	RequestLog           string   `help:"Append one JSON line per generation request received to FILE: time, endpoint, route, status, prompt and cached tokens, the body as received. Flushed on exit." placeholder:"FILE"`
	Model                string   `help:"Served model name." default:"Qwen3.6-27B"`
	MaxRunning           int      `help:"Running slots per endpoint (SGLang --max-running-requests)." default:"48"`
	MaxQueued            int      `help:"Waiting queue bound per endpoint; past it, 503 \"The request queue is full.\" 0 is unbounded." default:"0"`
	ContextLength        int      `help:"Context length in tokens; longer prompts get SGLang's 400." default:"32768"`
	Reasoning            bool     `help:"Chat answers carry their thinking apart, in reasoning_content (current vLLM: reasoning), as with --reasoning-parser."`
	LlamacppMetrics      bool     `name:"llamacpp-metrics" help:"The llamacpp flavour serves /metrics, as llama-server started with --metrics does; without it /metrics answers 501."`
	LlamacppBOS          bool     `name:"llamacpp-bos" help:"The llamacpp flavour's vocabulary adds a begin-of-text token, as a GGUF with add_bos_token does: first in every chat and text prompt it runs and charges, and in /tokenize with add_special; never in /apply-template's text. A --tokenizer brings its own."`
	LlamacppNoTools      bool     `name:"llamacpp-no-tools" help:"The llamacpp flavour's chat template renders no tools, as llama-server --jinja may have: /props says so (chat_template_caps.supports_tools false), and a chat request's tools are left out of its prompt, answered 200 and never called."`
	ChatTemplate         string   `help:"A word tokenizer and this chat template (chatml keeps every reasoning_content sent back; qwen3 drops it before the last user turn), so that answers re-tokenize to their ids but for a few drift words; empty: four-byte pieces. Not with --tokenizer." default:"" enum:",chatml,qwen3"`
	Tokenizer            string   `help:"A model's Hugging Face folder (tokenizer.json, tokenizer_config.json; nothing is downloaded): every endpoint renders chat prompts with the model's chat template and tokenizes with its tokenizer (usage, context checks, prompt and answer token ids, /tokenize, /detokenize, /apply-template), and writes its answers in the model's tokens, an answer that ends on its own ending with the end-of-turn id. Loaded once, at start. Not with --chat-template." default:"" placeholder:"DIR"`
	TemplateDrift        bool     `help:"With --tokenizer: render with a slightly different chat template, as a server started with another version of it would: a default system prompt (\"You are a helpful assistant.\") before every conversation that has none. /props and /get_server_info report the drifted template's text."`
	LoopRate             float64  `help:"Fraction of answers that fall into a repeated span until max_tokens (finish length)." default:"0"`
	EmptyRate            float64  `help:"Fraction of answers with empty content (finish stop)." default:"0"`
	ThinkResidueRate     float64  `help:"Fraction of answers with <think> and </think> markers left in the content." default:"0"`
	TruncateRate         float64  `help:"Fraction of answers cut short with finish length before any limit." default:"0"`
	ToolCallRate         float64  `help:"Fraction of chat requests carrying tools that are answered by a tool call (finish_reason tool_calls), drawn from the prompt and --seed." default:"0"`
	ParallelToolCallRate float64  `help:"Fraction of those tool-call answers that make two parallel calls." default:"0"`
	KVTokens             int      `help:"KV cache per endpoint, in tokens: a prefix cache of 16-token pages (cached prompt tokens are not prefilled again) that also bounds the running requests' prompts and answers. 0: no cache, no bound." default:"0" name:"kv-tokens"`
	CacheReport          bool     `help:"Report cached prompt tokens in usage.prompt_tokens_details (SGLang --enable-cache-report, vLLM --enable-prompt-tokens-details); the openai flavour always does."`
	TimeScale            float64  `help:"Run simulated time this many times faster than real time (0: --instant)." default:"1"`
	Instant              bool     `help:"Answer every request at once, without the batching model (client benchmarks)."`
	Seed                 uint64   `help:"Seed of the fault draws and response ids." default:"1"`
	Temperature          *float64 `help:"The model's sampling temperature for requests that send none, as servers take it from the model's generation config; 0 is greedy, answering a prompt alike whatever the request's seed. Above 0 (or a request's temperature above 0) the request's seed picks the answer, its degenerate-answer and tool-call draws included, and a request without a seed gets another answer each time. Default: the --tokenizer folder's generation_config.json temperature, else 0.6 (Qwen3's)." placeholder:"T"`
	APIKey               string   `help:"Require this bearer token (Authorization: Bearer KEY) on every request but /health and /metrics, as SGLang's --api-key does; others get 401." placeholder:"KEY"`

	StepBase        time.Duration `help:"Fixed cost of one decode step (calibrated: 26.5 tok/s alone)." default:"37.6736ms"`
	StepPerRequest  time.Duration `help:"Added per running request (calibrated: 1,180 tok/s at 48)." default:"62.6us"`
	PrefillPerToken time.Duration `help:"Added per prompt token of each request joining a step." default:"40us"`

	FailRate       float64       `help:"Fraction of generation requests answered 500." default:"0"`
	AbortRate      float64       `help:"Fraction answered 200 with finish_reason \"abort\", cut short." default:"0"`
	HangRate       float64       `help:"Fraction accepted and never answered (until the client closes)." default:"0"`
	DropRate       float64       `help:"Fraction whose connection closes mid-response." default:"0"`
	LimitRate      float64       `help:"Fraction answered 429 Too Many Requests with Retry-After: 1 (a rate limit or a quota; 1: every request)." default:"0"`
	FailBurst      int           `help:"Answer 500 to this many generation requests in a row after every (re)start (after --fail-burst-after), /health ready throughout, then recover: a server warming up or out of memory for a while (0: never)." default:"0" placeholder:"N"`
	FailBurstAfter int           `help:"Requests answered normally after each (re)start before the --fail-burst." default:"0" placeholder:"N"`
	CrashAfter     int           `help:"Crash (listener closed, connections dropped) on the generation request after this many (0: never)." default:"0"`
	RestartAfter   time.Duration `help:"Bring a crashed endpoint back after this long (0: stays down)." default:"0s"`
	Slow           float64       `help:"Multiply every scheduler step by this factor." default:"1"`
	StartupDelay   time.Duration `help:"Health answers 503 (and generation waits) this long after a (re)start." default:"0s"`
	ExitAfter      int           `help:"End the process (exit status 1, as a server killed for its memory) on the generation request after this many, its connections dropped (0: never): a server for a supervisor (serve) to restart." default:"0" placeholder:"N"`
	ExitAt         time.Duration `help:"End the process (exit status 1) this long after it started listening (0: never)." default:"0s"`
	ListenDelay    time.Duration `help:"Start slowly: wait this long before listening, as a server loading its weights before it opens its port (--startup-delay then answers 503 for as long)." default:"0s"`
	SlotsSchedule  string        `help:"Change the running slots over simulated time: TIME:SLOTS steps, e.g. \"0s:48,5m:16\" (per endpoint: --fault N=slots:0s:48/5m:16). Empty: --max-running throughout." default:"" placeholder:"SCHEDULE"`
	Fault          []string      `help:"Per-endpoint faults ENDPOINT=key:value,...; repeatable (see above)." placeholder:"ENDPOINT=SPEC" sep:"none"`
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
	if c.RequestLog != "" {
		lf, err := os.OpenFile(c.RequestLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--request-log: %w", err)
		}
		defer lf.Close()
		cfg.RequestLog = lf
	}
	if !c.waitToListen(ctx) {
		return nil // interrupted while starting
	}
	fleet, err := Start(ctx, cfg, len(addrs))
	if err != nil {
		return err
	}
	defer fleet.Close()
	exited := c.watchExit(ctx, fleet)
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
	select {
	case <-ctx.Done():
	case err := <-exited:
		fleet.Close()
		return err
	}
	if err := fleet.Close(); err != nil {
		return fmt.Errorf("--request-log: %w", err)
	}
	if f, ok := cfg.RequestLog.(*os.File); ok {
		if err := f.Close(); err != nil {
			return fmt.Errorf("--request-log: %w", err)
		}
	}
	st := fleet.Stats()
	env.Logf("served %d requests on %d endpoints: %d completed, %d aborted, %d failed, %d hung, %d dropped, %d rejected, %d limited, %d bad, %d lost, %d cancelled by their clients; %d unauthorized; %d crashes, %d restarts; %d tokens generated",
		st.Requests, fleet.Len(), st.Completed, st.Aborted, st.Failed, st.Hung, st.Dropped, st.Rejected, st.Limited, st.BadRequests, st.Lost, st.Cancelled,
		st.Unauthorized, st.Crashes, st.Restarts, st.GeneratedTokens)
	return nil
}

func (c *Command) config(addrs []string) (Config, error) {
	cfg := Config{
		Listen: addrs, Flavor: Flavor(c.Flavor), ModelName: c.Model, MaxRunning: c.MaxRunning, MaxQueued: c.MaxQueued,
		ContextLength: c.ContextLength, Reasoning: c.Reasoning, LlamaMetrics: c.LlamacppMetrics, ChatTemplate: c.ChatTemplate, KVTokens: c.KVTokens, CacheReport: c.CacheReport, TimeScale: c.TimeScale,
		Tokenizer: c.Tokenizer, TemplateDrift: c.TemplateDrift,
		LlamaBOS: c.LlamacppBOS, LlamaNoTools: c.LlamacppNoTools,
		ToolCallRate: c.ToolCallRate, ParallelToolCallRate: c.ParallelToolCallRate,
		LoopRate: c.LoopRate, EmptyRate: c.EmptyRate, ThinkResidueRate: c.ThinkResidueRate, TruncateRate: c.TruncateRate,
		Instant: c.Instant, Seed: c.Seed, Temperature: c.temperature(), APIKey: c.APIKey,
		Timing: Timing{StepBase: c.StepBase, StepPerRequest: c.StepPerRequest, PrefillPerToken: c.PrefillPerToken, Slow: 1},
		Faults: Faults{
			FailRate: c.FailRate, AbortRate: c.AbortRate, HangRate: c.HangRate, DropRate: c.DropRate, LimitRate: c.LimitRate,
			CrashAfter: c.CrashAfter, RestartAfter: c.RestartAfter, Slow: c.Slow, StartupDelay: c.StartupDelay,
			FailBurst: c.FailBurst, FailBurstAfter: c.FailBurstAfter,
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
	case c.KVTokens < 0:
		return cfg, cli.Usagef("--kv-tokens %d is negative", c.KVTokens)
	case !(c.LoopRate >= 0 && c.EmptyRate >= 0 && c.ThinkResidueRate >= 0 && c.TruncateRate >= 0) ||
		c.LoopRate+c.EmptyRate+c.ThinkResidueRate+c.TruncateRate > 1+1e-9:
		return cfg, cli.Usagef("--loop-rate, --empty-rate, --think-residue-rate and --truncate-rate: want probabilities adding up to at most 1")
	case !(c.ToolCallRate >= 0 && c.ToolCallRate <= 1) || !(c.ParallelToolCallRate >= 0 && c.ParallelToolCallRate <= 1):
		return cfg, cli.Usagef("--tool-call-rate %g, --parallel-tool-call-rate %g: want probabilities in [0, 1]", c.ToolCallRate, c.ParallelToolCallRate)
	case c.StepBase <= 0:
		return cfg, cli.Usagef("--step-base %v: want a positive duration", c.StepBase)
	}
	if c.SlotsSchedule != "" {
		s, err := ParseSlotSchedule(c.SlotsSchedule)
		if err != nil {
			return cfg, cli.Usagef("--slots-schedule: %v", err)
		}
		cfg.Faults.Slots = s
	}
	if err := c.exitFaults(&cfg); err != nil {
		return cfg, err
	}
	if err := c.checkTokenizer(); err != nil {
		return cfg, err
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
		settings, flavor, err := cutFlavor(settings)
		if err != nil {
			return cfg, cli.Usagef("--fault %q: %v", spec, err)
		}
		if flavor != "" {
			if cfg.Flavors == nil {
				cfg.Flavors = map[int]Flavor{}
			}
			cfg.Flavors[i] = flavor
		}
		f, err := ParseFaultSpec(base, settings)
		if err != nil {
			return cfg, cli.Usagef("--fault %q: %v", spec, err)
		}
		cfg.PerEndpoint[i] = f
	}
	return cfg, nil
}

// DefaultTemperature is what llmsim samples with when neither the request
// nor the command line nor the model's folder says: Qwen3's
// generation_config.json temperature. Real servers sample by default, so
// a rerun of the same prompts gets other answers, as it would from them.
const DefaultTemperature = 0.6

// temperature is --temperature, else the --tokenizer folder's, else
// DefaultTemperature. A folder that does not load is checkTokenizer's to
// report.
func (c *Command) temperature() float64 {
	if c.Temperature != nil {
		return *c.Temperature
	}
	if c.Tokenizer != "" {
		if tok, err := loadTokenizer(c.Tokenizer); err == nil && tok.Temperature != nil {
			return *tok.Temperature
		}
	}
	return DefaultTemperature
}

// checkTokenizer refuses --tokenizer with --chat-template, --template-drift
// without it, and a folder that does not load (what is missing named), as
// usage errors; the folder loaded stays loaded for the fleet.
func (c *Command) checkTokenizer() error {
	switch {
	case c.Tokenizer != "" && c.ChatTemplate != "":
		return cli.Usagef("--tokenizer and --chat-template: a model's tokenizer brings its own chat template; give one or the other")
	case c.TemplateDrift && c.Tokenizer == "":
		return cli.Usagef("--template-drift drifts a model's own chat template: it needs --tokenizer")
	case c.Tokenizer == "":
		return nil
	}
	if _, err := loadTokenizer(c.Tokenizer); err != nil {
		return cli.Usagef("--tokenizer: %v", err)
	}
	return nil
}

// cutFlavor takes a "flavor:NAME" setting out of a --fault spec.
func cutFlavor(spec string) (string, Flavor, error) {
	var kept []string
	var flavor Flavor
	for _, kv := range strings.Split(spec, ",") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(kv), "flavor:"); ok {
			f, err := ParseFlavor(name)
			if err != nil {
				return "", "", err
			}
			flavor = f
			continue
		}
		kept = append(kept, kv)
	}
	return strings.Join(kept, ","), flavor, nil
}
