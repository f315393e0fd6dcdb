// Package infer generates answers to prompt records on a fleet of
// OpenAI-compatible or SGLang servers: balanced across the endpoints by
// their free slots, tolerant of servers that fail, hang or restart,
// resumable after a kill at any moment with exactly one record per answer.
//
// The fleet itself (endpoints, pool, balancing, readiness, failure
// classes, token ids) is lib/fleet; what a run has done and the files that
// hold it (output, errors file, turn journal) are lib/ledger, and each
// answer's settings lib/settings. This package is the run: the queue of
// answers, fitting them into the context, retries, progress, the ETA and
// the run's figures.
package infer

import (
	"context"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/mix"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/settings"
	"tokenmill/lib/tokenizer"
	"tokenmill/lib/tokens"
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
  extract --turns all data.json | dedup | infer --regenerate -e 127.0.0.1:30000-30007 -o regen.jsonl

Generating is the default command: infer [flags] [files] is infer generate [flags] [files],
and infer --help lists its flags. infer bench measures the fleet and forecasts a run first
(infer bench --help).
`

// Help is generate's detailed help: infer's own, since infer --help shows
// generate's flags.
func (c *Generate) Help() string { return Description }

// Generate is infer's generation command: what infer does unless told
// otherwise. It has a field per flag, as kong reads them (hence more than
// a struct would otherwise hold); config turns them into the Config the
// run reads.
type Generate struct {
	Inputs []string `arg:"" optional:"" name:"input" help:"Prompt files: JSONL, JSON array or Parquet, plain, gzip or zstd. None, or -, reads stdin."`

	fleet.ServerFlags   `embed:""`
	fleet.SamplingFlags `embed:""`
	Samples             int    `default:"1" placeholder:"K" help:"Independent answers per prompt, numbered by output.sample from the record's \"sample\" (0) on."`
	SeedOffset          *int64 `placeholder:"N" help:"Added to every seed (--seed's or a record's own): sample k uses seed+N+k, so a rerun of the same prompts does not sample the same answers again; each answer records it (output.seed_offset). Default: 0; with --append, one past the highest offset plus sample of the answers already in -o, said on stderr (rerun-missing.sh, whose rounds append to a file of their own, passes round x samples)."`
	Mix                 string `placeholder:"FILE" help:"A sampling mixture (JSON or YAML, see GUIDE.md): named arms with weights, each a set of request parameters (chat_template_kwargs, reasoning_effort, temperature, top_p, max_tokens, stop, ...) laid over the flags and --extra-body, under a record's own params. Each (id, sample) gets its arm from a hash of the id, the sample and --seed, the same in every run and after --resume; output.arm and output.arm_params record it. Default: none."`

	Regenerate       bool `help:"Regenerate whole conversations: keep each record's system and user turns, replace every assistant turn with the model's answer to the history as regenerated so far (tool calls answered from the record's own tool results), and answer a last unanswered user turn (in a record marked \"question_list\": true, as extract writes MT-Bench's, every user turn in turn). Writes output.messages and output.turns; see GUIDE.md."`
	HistoryReasoning bool `help:"With --regenerate, send each earlier answer's reasoning_content back in the history (by default it is kept in the output but left out of later turns' requests, as the Qwen3 and DeepSeek chat templates do)."`
	Affinity         bool `default:"true" negatable:"" help:"With --regenerate, send every turn of a conversation to the endpoint that served its first turn, holding its slot between turns, so that the server's prefix cache serves the history; a conversation moves only when a turn fails there. --no-affinity (or --affinity=false) sends each turn to the least loaded endpoint."`
	ToolRounds       int  `default:"16" placeholder:"N" help:"With --regenerate, the most rounds of tool results the model may get per user turn; a call past them ends the conversation, truncated (tool_rounds)."`
	TokenIDs         bool `name:"token-ids" help:"Record the token ids each server used: output.prompt_token_ids (the prompt as the server tokenized it, chat template applied) and output.token_ids (the answer as generated), on every turn with --regenerate, and output.served_by (model, server kind and version, chat template hash). Asked of vLLM, SGLang and llama.cpp in their own way; Ollama and gateways are refused. See GUIDE.md."`

	tokens.FitFlags `embed:""`

	Concurrency   fleet.Concurrency `default:"0" placeholder:"N|auto" help:"Requests in flight per endpoint, or auto. 0: each server's capacity where it says (SGLang max_running_requests, llama.cpp total_slots) plus --queue-depth, else adapted to the server while the run goes (auto: on every endpoint)."`
	QueueDepth    int               `default:"2" placeholder:"N" help:"Requests kept waiting in each server's own queue beyond the capacity it reports, so a slot that frees is refilled without waiting for a round trip."`
	Policy        fleet.Policy      `enum:"least-outstanding,round-robin" default:"least-outstanding" help:"Load balancing: least-outstanding (the endpoint with the most free room) or round-robin (strict turns, for comparison)."`
	Retries       int               `default:"8" placeholder:"N" help:"Times a failed request (connection error, timeout, 429, 5xx, abort) is tried again, on another endpoint, before the prompt goes to the errors file."`
	Backoff       time.Duration     `default:"1s" help:"First retry backoff; it doubles each time, with jitter."`
	MaxBackoff    time.Duration     `default:"1m" help:"Longest retry backoff."`
	EjectAfter    int               `default:"5" placeholder:"N" help:"Consecutive failures that take an endpoint out of service until it is ready again. One that fails every request alike (the same 5xx answer, no success) though its health brings it back is held out longer; with none left, the run ends (exit 1), the answers not done in the errors file (server_failing)."`
	ProbeInterval time.Duration     `default:"2s" help:"How often an endpoint out of service (or starting) is probed for readiness (/health, /v1/models or --health-path)."`

	MaxPromptBytes cli.Size `default:"32MiB" placeholder:"SIZE" help:"Longest input record (a prompt with its messages, tools and fields): a longer line is rejected (line_too_long) as it is read, never held in memory."`
	MaxAnswerBytes cli.Size `default:"256MiB" placeholder:"SIZE" help:"Longest answer body a request may bring, read as it arrives: a longer one is cut off and its prompt goes to the errors file (answer_too_large)."`
	AnswerMemory   cli.Size `default:"1GiB" placeholder:"SIZE" help:"Memory for the answer bodies of all requests in flight together: the request whose body would take them past it is abandoned (its connection closed) and sent again later, counting toward --retries."`

	RequestTimeout time.Duration `default:"30m" help:"Longest wait for one answer (8,192 tokens at 25 tok/s take 5.5 minutes, longer in a full batch). A request that times out is closed, which frees its slot on the server."`
	WaitReady      time.Duration `default:"10m" help:"How long to wait at start for an endpoint to be ready (/health, or /v1/models where a server has no /health; --health-path)."`
	DownTimeout    time.Duration `default:"1h" help:"Give up (exit 1, --resume continues) when every endpoint has been out of service this long. 0: wait for ever."`
	Grace          time.Duration `default:"5s" help:"On SIGINT/SIGTERM, how long answers in flight may still arrive; the rest are dropped and redone by --resume."`

	Output        string `short:"o" default:"-" placeholder:"FILE" help:"Generation records (JSONL). - is stdout. An existing non-empty file is refused: --resume continues it, --force replaces it."`
	Errors        string `placeholder:"FILE" help:"Error records for prompts that could not be answered. Default: beside -o (gen.jsonl -> gen.errors.jsonl); none with stdout. Rewritten each run: it lists the latest run's failures, which --resume tries again."`
	Resume        bool   `help:"Continue -o FILE: answers already in it are skipped, new ones appended; a partial last line left by a crash is cut off first."`
	Append        bool   `help:"Add to -o FILE instead of refusing it when it exists: every prompt of the input is answered, one FILE already answers too (a rerun of the prompts still lacking a good answer, as rerun-missing.sh does; merge keeps the better); a partial last line is cut off first and, with --regenerate, unfinished conversations continue from the turn journal. --resume instead skips what FILE holds."`
	RedoLength    bool   `help:"With --resume, generate again the answers whose only record finished with \"length\" (the old record stays; merge keeps the better)."`
	cli.ForceFlag `set:"force_what=an existing non-empty -o FILE and its turn journal, emptied once a server is ready, and --rejects"`
	cli.RejectsFlag
	FlushInterval time.Duration `default:"1s" help:"How often finished answers are flushed to -o and the errors file, so a killed run loses at most this much work."`
	cli.ProgressFlag
	MetricsAddr string `placeholder:"HOST:PORT" help:"Serve the run's figures in Prometheus format at http://HOST:PORT/metrics; the address bound is printed. :PORT (no host) listens on every interface, as Go does; 127.0.0.1:PORT on this machine alone; port 0 picks a free one."`

	// AllowChangedSettings: see lib/settings.
	AllowChangedSettings bool `default:"false" help:"With --resume or --append, continue -o FILE under other settings than those its records were made with (--max-tokens, --temperature, --top-p, --stop, --seed, --extra-body, --mix, --samples, --token-ids, --api, the model, ...), refused by default naming the first that differs. Each record names the settings that made it (output.settings), and FILE.settings.jsonl describes them all."`

	// clock is the run's time; nil: the real clock. Tests set it.
	clock clock.Clock
}

// Run generates: the flags become a Config once, and the run reads that.
func (c *Generate) Run(ctx context.Context, env *cli.Env) error {
	cfg, err := c.config(env)
	if err != nil {
		return err
	}
	return Run(ctx, env, cfg)
}

// Config is one generation run as the flags ask for it, made once by
// Generate.config: the run reads it, never the flags. It keeps a field
// for each setting the run reads (26), flat as the flags are, its files
// and limits grouped apart.
type Config struct {
	Inputs        []string // prompt files; none, or -, reads stdin
	Targets       []fleet.Target
	Pool          fleet.Config // the fleet's settings; the run adds its log and clock
	EndpointsFile string       // read again for endpoints that join ("": none)
	API           openai.API
	Model         string          // --model, checked against what the servers list
	Builder       *openai.Builder // the requests; the model is set once the servers name it
	Fit           tokens.FitFlags
	Tokenizer     *tokenizer.Tokenizer // nil: prompts' tokens estimated or asked of the servers
	Mix           *mix.Mix             // nil: no mixture
	// Settings is what every answer's settings share, and Arms the
	// mixture's arms as they name them.
	Settings   record.Settings
	Arms       []settings.Arm
	Seed       *int64
	SeedOffset int64
	// PickSeedOffset: --append without --seed-offset, so that the run asks
	// with seeds past those the answers already in -o took.
	PickSeedOffset bool
	MaxTokens      int // 0: the server's
	Samples        int
	// Regenerate whole conversations, sending each turn where the last went
	// (Affinity), with at most ToolRounds rounds of tool results a turn.
	Regenerate, Affinity bool
	ToolRounds           int
	TokenIDs             bool
	MaxPromptBytes       int
	MetricsAddr          string // "": none
	Files
	Limits
	Clock clock.Clock // nil: the real clock
}

// Files are the run's files, and what it may do to those already there.
type Files struct {
	Output  string // "" or "-": stdout
	Errors  string // "": beside -o
	Rejects string
	// Resume skips what -o holds, Append adds to it, RedoLength redoes
	// its answers cut short by length, Force replaces it.
	Resume, Append, RedoLength, Force bool
	AllowChangedSettings              bool
}

// seedOffset is --seed-offset, 0 when not given.
func (c *Generate) seedOffset() int64 {
	if c.SeedOffset == nil {
		return 0
	}
	return *c.SeedOffset
}

// continues tells a run that adds to an existing -o: --resume or --append.
func (f *Files) continues() bool { return f.Resume || f.Append }

// Limits are how often and how long the run tries and waits.
type Limits struct {
	Retries                   int
	Backoff, MaxBackoff       time.Duration
	RequestTimeout, WaitReady time.Duration
	Grace, FlushInterval      time.Duration
	Progress                  time.Duration // 0: no progress lines
}

// config checks the flags that kong cannot, and turns them into the
// run's Config: the requests' builder, the mixture, the tokenizer and the
// settings every answer shares.
func (c *Generate) config(env *cli.Env) (*Config, error) {
	targets, err := c.Targets()
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	extra, err := c.Extra()
	if err != nil {
		return nil, err
	}
	model := ""
	if m := c.Models(); len(m) > 0 {
		model = m[0] // the endpoints' own names are set once they are up
	}
	b, err := openai.NewBuilder(c.API, model, c.Sampling(c.SamplingFlags), extra)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	b.SetSeedOffset(c.seedOffset())
	b.SetHistoryReasoning(c.HistoryReasoning)
	c.Protect(env, targets)
	notice := c.Progress
	if notice <= 0 {
		notice = fleet.DefaultWaitNotice
	}
	cfg := &Config{
		Inputs: c.Inputs, Targets: targets, EndpointsFile: c.EndpointsFile, API: c.API, Model: c.Model, Builder: b,
		Pool: c.PoolConfig(fleet.Config{
			FixedSlots: c.Concurrency.N, Adaptive: c.Concurrency.Auto, QueueDepth: c.QueueDepth, EjectAfter: c.EjectAfter,
			ProbeInterval: c.ProbeInterval, ControlTimeout: min(10*time.Second, c.RequestTimeout), DownTimeout: c.DownTimeout,
			Policy: c.Policy, WaitNotice: notice, MaxAnswerBytes: int64(c.MaxAnswerBytes), AnswerMemory: int64(c.AnswerMemory), MaxPause: c.MaxBackoff,
		}),
		Fit: c.FitFlags, Seed: c.Seed, SeedOffset: c.seedOffset(), PickSeedOffset: c.Append && c.SeedOffset == nil, Samples: c.Samples,
		Regenerate: c.Regenerate, Affinity: c.Affinity, ToolRounds: c.ToolRounds, TokenIDs: c.TokenIDs,
		MaxPromptBytes: int(c.MaxPromptBytes), MetricsAddr: c.MetricsAddr, Clock: c.clock,
		Files: Files{Output: c.Output, Errors: c.Errors, Rejects: c.Rejects, Resume: c.Resume, Append: c.Append, RedoLength: c.RedoLength,
			Force: c.Force, AllowChangedSettings: c.AllowChangedSettings},
		Limits: Limits{Retries: c.Retries, Backoff: c.Backoff, MaxBackoff: c.MaxBackoff, RequestTimeout: c.RequestTimeout,
			WaitReady: c.WaitReady, Grace: c.Grace, FlushInterval: c.FlushInterval, Progress: c.Progress},
	}
	if c.MaxTokens != nil {
		cfg.MaxTokens = *c.MaxTokens
	}
	if c.Mix != "" {
		if cfg.Mix, err = mix.Load(c.Mix); err != nil {
			return nil, cli.Usagef("--mix %s: %v", c.Mix, err)
		}
	}
	if cfg.Tokenizer, err = c.FitFlags.LoadTokenizer(); err != nil {
		return nil, cli.Usagef("--tokenizer: %v", err)
	}
	if err := c.settings(cfg, extra); err != nil {
		return nil, err
	}
	return cfg, nil
}

// settings are the settings the flags set for every answer of the run.
func (c *Generate) settings(cfg *Config, extra []byte) error {
	s := record.Settings{API: string(c.API), MaxTokens: c.MaxTokens, Temperature: c.Temperature, TopP: c.TopP, Stop: c.Stop, Seed: c.Seed,
		TokenIDs: c.TokenIDs, Regenerate: c.Regenerate, HistoryReasoning: c.Regenerate && c.HistoryReasoning, Samples: c.Samples}
	var err error
	if s.ExtraBody, err = record.Canonical(extra); err != nil {
		return cli.Usagef("--extra-body: %v", err)
	}
	if m := cfg.Mix; m != nil {
		names, weights, params := make([]string, len(m.Arms)), make([]float64, len(m.Arms)), make([]json.RawMessage, len(m.Arms))
		cfg.Arms = make([]settings.Arm, len(m.Arms))
		for i, a := range m.Arms {
			names[i], weights[i], params[i] = a.Name, a.Weight, a.Params
			cfg.Arms[i].Name = a.Name
			if cfg.Arms[i].Params, err = record.Canonical(a.Params); err != nil {
				return cli.Usagef("--mix %s: arm %q: %v", c.Mix, a.Name, err)
			}
		}
		if s.Mix, err = record.MixHash(names, weights, params); err != nil {
			return cli.Usagef("--mix %s: %v", c.Mix, err)
		}
	}
	cfg.Settings = s
	return nil
}

// check refuses what the flags cannot mean together.
func (c *Generate) check() error {
	switch {
	case c.Samples < 1 || c.Samples > record.MaxSample+1:
		return cli.Usagef("--samples must be from 1 to %d (samples are numbered 0 to %d)", record.MaxSample+1, record.MaxSample)
	case c.MaxPromptBytes < 1 || c.MaxPromptBytes > jsonl.MaxLine || c.MaxAnswerBytes < 1 || c.AnswerMemory < c.MaxAnswerBytes:
		return cli.Usagef("--max-prompt-bytes must be 1 to %s, --max-answer-bytes at least 1 and --answer-memory at least --max-answer-bytes", cli.Size(jsonl.MaxLine))
	case c.QueueDepth < 0 || c.Retries < 0 || c.EjectAfter < 1:
		return cli.Usagef("--queue-depth and --retries must not be negative, --eject-after at least 1")
	case c.RequestTimeout <= 0 || c.WaitReady <= 0 || c.ProbeInterval <= 0 || c.FlushInterval <= 0:
		return cli.Usagef("--request-timeout, --wait-ready, --probe-interval and --flush-interval must be positive")
	case c.MaxTokens != nil && *c.MaxTokens < 1:
		return cli.Usagef("--max-tokens must be at least 1")
	case c.Regenerate && c.API != openai.APIChat:
		return cli.Usagef("--regenerate sends chat conversations: it needs --api chat, not %s", c.API)
	case c.ToolRounds < 0:
		return cli.Usagef("--tool-rounds must not be negative")
	case c.FitFlags.Check() != nil:
		return cli.Usagef("%v", c.FitFlags.Check())
	case c.Resume && toStdout(c.Output):
		return cli.Usagef("--resume needs -o FILE: it reads what is already done from that file")
	case c.Seed != nil && seedOverflows(*c.Seed, c.seedOffset(), c.Samples-1):
		return cli.Usagef("--seed %d, --seed-offset %d and --samples %d: the last sample's seed would pass the largest integer", *c.Seed, c.seedOffset(), c.Samples)
	case c.Append && toStdout(c.Output):
		return cli.Usagef("--append needs -o FILE: the file to add the answers to")
	case c.Append && (c.Resume || c.Force):
		return cli.Usagef("--append adds to -o, --resume skips what it holds, --force replaces it: choose one")
	case c.RedoLength && !c.Resume:
		return cli.Usagef("--redo-length goes with --resume")
	case c.Force && c.Resume:
		return cli.Usagef("--force replaces -o, --resume continues it: choose one")
	case strings.HasSuffix(c.Output, ".gz") || strings.HasSuffix(c.Output, ".zst"):
		return cli.Usagef("-o %s: infer writes plain JSONL so that a killed run can be resumed; compress the file afterwards", c.Output)
	}
	return nil
}

func toStdout(path string) bool { return path == "" || path == "-" }
