package llmsim

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Faults are the ways an endpoint misbehaves. Rates are probabilities per
// generation request, drawn from Config.Seed, so a run with the same seed
// and the same arrival order fails the same way. At most one rate fault
// hits a request; they are tried in the order fail, abort, hang, drop, so
// their sum must not exceed 1.
type Faults struct {
	// FailRate answers 500 with SGLang's error JSON.
	FailRate float64
	// AbortRate answers 200, the answer cut short with finish_reason "abort".
	AbortRate float64
	// HangRate accepts the request and never answers, like a stuck
	// request: it holds a running slot (decoding without end, so it also
	// slows the batch) until the client closes the connection, which
	// frees the slot, or the endpoint crashes. With Instant it counts as
	// running until then.
	HangRate float64
	// DropRate closes the connection in the middle of the response.
	DropRate float64
	// LimitRate answers 429 Too Many Requests with Retry-After: 1, as a
	// rate-limited gateway or a quota run out does (1: every request).
	LimitRate float64
	// FailBurst > 0 answers 500 (as FailRate does) to generation requests
	// FailBurstAfter+1 to FailBurstAfter+FailBurst since the endpoint
	// (re)started, its health ready throughout, and then recovers, as a
	// server warming up after a restart, or out of memory for a while,
	// may.
	FailBurst      int
	FailBurstAfter int
	// CrashAfter > 0 makes the endpoint crash when it receives generation
	// request number CrashAfter+1 since it (re)started: the listener closes
	// and every open connection, that request's too, is dropped.
	CrashAfter int
	// RestartAfter > 0 brings a crashed endpoint back after that long.
	RestartAfter time.Duration
	// Slow multiplies every scheduler step (0 or 1: full speed).
	Slow float64
	// StartupDelay keeps the endpoint starting (health 503, generation
	// requests held) that long after it starts or restarts.
	StartupDelay time.Duration
	// Slots, when set, changes the endpoint's running slots over simulated
	// time (the fleet clock): from each step's At on, Slots requests run at
	// once. Requests already running when the count drops finish; none
	// joins until fewer run than the new count.
	Slots SlotSchedule
}

// SlotSchedule is a running-slot count that changes over simulated time,
// steps in increasing At order.
type SlotSchedule []SlotStep

// SlotStep: from At on, Slots slots.
type SlotStep struct {
	At    time.Duration
	Slots int
}

// at is the slot count at simulated time t (def before the first step).
func (s SlotSchedule) at(t time.Duration, def int) int {
	n := def
	for _, st := range s {
		if st.At > t {
			break
		}
		n = st.Slots
	}
	return n
}

// ParseSlotSchedule reads "T:N" steps separated by commas or slashes,
// e.g. "0s:48,5m:16" (the slash form fits in a --fault spec:
// slots:0s:48/5m:16). T is simulated time in Go's duration syntax.
func ParseSlotSchedule(spec string) (SlotSchedule, error) {
	var out SlotSchedule
	for _, part := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == '/' }) {
		at, n, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("slot step %q: want TIME:SLOTS", part)
		}
		d, err := time.ParseDuration(at)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("slot step %q: bad time %q", part, at)
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("slot step %q: want at least 1 slot", part)
		}
		if len(out) > 0 && d <= out[len(out)-1].At {
			return nil, fmt.Errorf("slot step %q: times must increase", part)
		}
		out = append(out, SlotStep{At: d, Slots: k})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("slot schedule %q has no steps", spec)
	}
	return out, nil
}

// maxSlow bounds Faults.Slow, so a step's duration stays finite.
const maxSlow = 1000

func (f Faults) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"fail-rate", f.FailRate}, {"abort-rate", f.AbortRate}, {"hang-rate", f.HangRate}, {"drop-rate", f.DropRate}, {"limit-rate", f.LimitRate}} {
		if !(r.v >= 0 && r.v <= 1) { // NaN too
			return fmt.Errorf("%s %g is not a probability in [0, 1]", r.name, r.v)
		}
	}
	if sum := f.FailRate + f.AbortRate + f.HangRate + f.DropRate + f.LimitRate; sum > 1+1e-9 {
		return fmt.Errorf("fail, abort, hang, drop and limit rates add up to %g, more than 1", sum)
	}
	switch {
	case f.CrashAfter < 0:
		return fmt.Errorf("crash-after %d is negative", f.CrashAfter)
	case f.FailBurst < 0 || f.FailBurstAfter < 0:
		return fmt.Errorf("fail-burst %d, fail-burst-after %d: want no negative count", f.FailBurst, f.FailBurstAfter)
	case f.RestartAfter < 0:
		return fmt.Errorf("restart-after %v is negative", f.RestartAfter)
	case f.StartupDelay < 0:
		return fmt.Errorf("startup-delay %v is negative", f.StartupDelay)
	case !(f.Slow >= 0 && f.Slow <= maxSlow): // NaN too
		return fmt.Errorf("slow %g is not a factor in [0, %d]", f.Slow, maxSlow)
	}
	for i, st := range f.Slots {
		if st.Slots < 1 || st.At < 0 || i > 0 && st.At <= f.Slots[i-1].At {
			return fmt.Errorf("slot schedule step %d (%v:%d): want increasing times and at least 1 slot", i, st.At, st.Slots)
		}
	}
	return nil
}

// Config describes a simulated fleet. The zero value is a faithful default.
// It has a field for each way a fleet can be set apart from that default
// (its servers' kind, timing, context, faults, logs), flat so that a test
// sets just the few it is about.
type Config struct {
	// Listen gives endpoint i its address (host:port); endpoints past the
	// list listen on 127.0.0.1 with a port the system picks.
	Listen []string
	// ModelName is the served model name (/v1/models, metrics labels).
	ModelName string
	// MaxRunning is the number of running slots (SGLang's
	// --max-running-requests); default 48.
	MaxRunning int
	// MaxQueued bounds the waiting queue (--max-queued-requests); past it a
	// request is answered 503 "The request queue is full.". 0: unbounded.
	MaxQueued int
	// ContextLength is the model's context in tokens; default 32768.
	ContextLength int
	// KVTokens > 0 gives each endpoint a prefix cache and a KV cache of
	// that many tokens (cache.go): cached prompt pages are not prefilled
	// again, and a request whose prompt and answer do not fit beside the
	// running ones waits. 0: neither (every prompt prefilled in full, only
	// MaxRunning bounds the batch).
	KVTokens int
	// CacheReport reports cached prompt tokens in usage where the flavour
	// needs a flag for it (SGLang --enable-cache-report, vLLM
	// --enable-prompt-tokens-details); the OpenAI gateway always does.
	CacheReport bool
	// ToolCallRate is the probability that a chat request with tools is
	// answered by a tool call (tools.go); ParallelToolCallRate that such an
	// answer makes two calls. Drawn from the prompt and Seed.
	ToolCallRate, ParallelToolCallRate float64
	// LoopRate, EmptyRate, ThinkResidueRate and TruncateRate are the
	// fractions of answers that degenerate (degenerate.go): into a repeated
	// span until the length limit, into nothing, with <think> markers left
	// in the content, or cut short with finish "length". Their sum must not
	// exceed 1.
	LoopRate, EmptyRate, ThinkResidueRate, TruncateRate float64
	// Reasoning makes chat answers carry their thinking apart (the
	// flavour's field: reasoning_content, or current vLLM's reasoning), as
	// a server started with --reasoning-parser does.
	Reasoning bool
	// LlamaMetrics serves the llamacpp flavour's /metrics, as llama-server
	// does when started with --metrics; without it /metrics answers 501.
	LlamaMetrics bool
	// LlamaBOS gives llmsim's own vocabulary a begin-of-text token, which
	// the llamacpp flavour adds as llama-server adds a GGUF's
	// (tokenizer.ggml.add_bos_token): first in every chat and text prompt
	// it runs and charges, and in /tokenize with add_special; never in
	// /apply-template's text. A model's tokenizer brings its own.
	LlamaBOS bool
	// LlamaNoTools gives the llamacpp flavour a chat template that renders
	// no tools, as llama-server --jinja has with such a template: /props
	// says so (chat_template_caps.supports_tools false), and a chat
	// request with tools is answered 200 with them left out of its
	// prompt, and never calls them.
	LlamaNoTools bool
	// ChatTemplate gives the endpoints a word tokenizer and a chat template
	// ("chatml" or "qwen3", tokenizer.go); "": llmsim's four-byte pieces.
	ChatTemplate string
	// Tokenizer is a model's Hugging Face folder (tokenizer.json,
	// tokenizer_config.json): every endpoint renders and tokenizes with
	// the model's own chat template and tokenizer, and answers in its
	// tokens (realtok.go). Loaded once per process; exclusive of
	// ChatTemplate.
	Tokenizer string
	// TemplateDrift (with Tokenizer) renders with a slightly different
	// template, as a server started with another version of it would: a
	// default system prompt before every conversation that has none. The
	// template the endpoints report is the drifted one.
	TemplateDrift bool
	// TimeScale S runs simulated time S times faster than real time;
	// default 1.
	TimeScale float64
	// Instant answers every request at once, without the batching model
	// (for measuring client overhead). Startup and restart delays still
	// take their (scaled) time.
	Instant bool
	// Timing is the cost model of a scheduler step; zero: DefaultTiming.
	Timing Timing
	// Seed drives the fault draws and the response ids.
	Seed uint64
	// Temperature is the model's own sampling temperature, for requests
	// that send none (sampling.go): 0 answers a prompt alike whatever the
	// seed, as greedy decoding does.
	Temperature float64
	// APIKey, when set, is required as "Authorization: Bearer <key>" on
	// every request but /health*, /metrics and OPTIONS; others are answered
	// 401 {"error": "Unauthorized"}, as SGLang started with --api-key does.
	APIKey string
	// Flavor is the kind of server every endpoint imitates (default sglang);
	// Flavors[i], when present, overrides it for endpoint i.
	Flavor  Flavor
	Flavors map[int]Flavor
	// Faults apply to every endpoint not named in PerEndpoint.
	Faults Faults
	// PerEndpoint[i], when present, replaces Faults for endpoint i.
	PerEndpoint map[int]Faults
	// RequestLog, when set, gets one JSON line per generation request
	// (reqlog.go); Fleet.Close flushes it.
	RequestLog io.Writer
	// Clock is the simulated time; nil: real time times TimeScale.
	Clock Clock
}

// Defaults.
const (
	DefaultModelName     = "Qwen3.6-27B"
	DefaultMaxRunning    = 48
	DefaultContextLength = 32768
)

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.ModelName == "" {
		out.ModelName = DefaultModelName
	}
	if out.MaxRunning == 0 {
		out.MaxRunning = DefaultMaxRunning
	}
	if out.ContextLength == 0 {
		out.ContextLength = DefaultContextLength
	}
	if out.TimeScale == 0 {
		out.TimeScale = 1
	}
	if out.Timing == (Timing{}) {
		out.Timing = DefaultTiming()
	}
	switch {
	case out.MaxRunning < 0:
		return out, fmt.Errorf("max-running %d is negative", out.MaxRunning)
	case !(out.Temperature >= 0 && out.Temperature <= 100):
		return out, fmt.Errorf("temperature %g: want 0 or more", out.Temperature)
	case !(out.ToolCallRate >= 0 && out.ToolCallRate <= 1) || !(out.ParallelToolCallRate >= 0 && out.ParallelToolCallRate <= 1):
		return out, fmt.Errorf("tool call rates %g, %g: want probabilities in [0, 1]", out.ToolCallRate, out.ParallelToolCallRate)
	case out.KVTokens < 0:
		return out, fmt.Errorf("kv-tokens %d is negative", out.KVTokens)
	case !(out.LoopRate >= 0 && out.EmptyRate >= 0 && out.ThinkResidueRate >= 0 && out.TruncateRate >= 0) ||
		out.LoopRate+out.EmptyRate+out.ThinkResidueRate+out.TruncateRate > 1+1e-9:
		return out, fmt.Errorf("loop, empty, think-residue and truncate rates %g, %g, %g, %g: want probabilities adding up to at most 1",
			out.LoopRate, out.EmptyRate, out.ThinkResidueRate, out.TruncateRate)
	case out.MaxQueued < 0:
		return out, fmt.Errorf("max-queued %d is negative", out.MaxQueued)
	case out.ContextLength < 2:
		return out, fmt.Errorf("context-length %d is too small", out.ContextLength)
	case out.TimeScale < 0:
		return out, fmt.Errorf("time-scale %g is negative", out.TimeScale)
	}
	if err := checkChatTemplate(out.ChatTemplate); err != nil {
		return out, err
	}
	switch {
	case out.Tokenizer != "" && out.ChatTemplate != "":
		return out, fmt.Errorf("tokenizer %s and chat-template %s: a model's tokenizer brings its own chat template; give one or the other", out.Tokenizer, out.ChatTemplate)
	case out.TemplateDrift && out.Tokenizer == "":
		return out, fmt.Errorf("template-drift drifts a model's own chat template: it needs a tokenizer")
	}
	if err := out.Faults.validate(); err != nil {
		return out, err
	}
	for i, f := range out.PerEndpoint {
		if err := f.validate(); err != nil {
			return out, fmt.Errorf("endpoint %d: %w", i, err)
		}
	}
	if _, err := ParseFlavor(string(out.Flavor)); err != nil {
		return out, err
	}
	if out.Flavor == "" {
		out.Flavor = FlavorSGLang
	}
	for i, f := range out.Flavors {
		if _, err := ParseFlavor(string(f)); err != nil {
			return out, fmt.Errorf("endpoint %d: %w", i, err)
		}
	}
	if out.Clock == nil {
		out.Clock = NewScaledClock(out.TimeScale)
	}
	return out, nil
}

func (c *Config) flavorFor(i int) Flavor {
	if f, ok := c.Flavors[i]; ok && f != "" {
		return f
	}
	return c.Flavor
}

func (c *Config) faultsFor(i int) Faults {
	if f, ok := c.PerEndpoint[i]; ok {
		return f
	}
	return c.Faults
}

// ParseListen expands listen specs into addresses: "host:port",
// "host:first-last" (a port range), and comma-separated lists of either.
// Port 0 asks the system for a free port.
func ParseListen(specs []string) ([]string, error) {
	var out []string
	for _, spec := range specs {
		for _, part := range strings.Split(spec, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			host, ports, err := net.SplitHostPort(part)
			if err != nil {
				return nil, fmt.Errorf("listen address %q: want host:port or host:first-last", part)
			}
			first, last, err := parsePortRange(ports)
			if err != nil {
				return nil, fmt.Errorf("listen address %q: %w", part, err)
			}
			for p := first; p <= last; p++ {
				out = append(out, net.JoinHostPort(host, strconv.Itoa(p)))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no listen address given")
	}
	seen := map[string]bool{}
	for _, a := range out {
		if seen[a] && !strings.HasSuffix(a, ":0") {
			return nil, fmt.Errorf("listen address %s given twice", a)
		}
		seen[a] = true
	}
	return out, nil
}

func parsePortRange(s string) (int, int, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	first, err := parsePort(lo)
	if err != nil {
		return 0, 0, err
	}
	if !isRange {
		return first, first, nil
	}
	last, err := parsePort(hi)
	if err != nil {
		return 0, 0, err
	}
	if first == 0 || last < first {
		return 0, 0, fmt.Errorf("port range %s is empty or starts at 0", s)
	}
	if last-first >= 1024 {
		return 0, 0, fmt.Errorf("port range %s has more than 1024 ports", s)
	}
	return first, last, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("port %q is not a number in 0-65535", s)
	}
	return p, nil
}

// ParseFaultSpec applies "key:value,key:value" settings (the right side of
// --fault ENDPOINT=SPEC) to f. Keys: fail-rate, abort-rate, hang-rate,
// drop-rate, limit-rate, fail-burst, fail-burst-after, crash-after,
// restart-after, slow, startup-delay, slots (a
// slot schedule with slashes: slots:0s:48/5m:16); durations take Go's
// syntax (500ms, 30s, 2m).
func ParseFaultSpec(f Faults, spec string) (Faults, error) {
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return f, fmt.Errorf("fault setting %q: want key:value", kv)
		}
		var err error
		switch k {
		case "fail-rate":
			f.FailRate, err = strconv.ParseFloat(v, 64)
		case "abort-rate":
			f.AbortRate, err = strconv.ParseFloat(v, 64)
		case "hang-rate":
			f.HangRate, err = strconv.ParseFloat(v, 64)
		case "drop-rate":
			f.DropRate, err = strconv.ParseFloat(v, 64)
		case "limit-rate":
			f.LimitRate, err = strconv.ParseFloat(v, 64)
		case "slow":
			f.Slow, err = strconv.ParseFloat(v, 64)
		case "fail-burst":
			f.FailBurst, err = strconv.Atoi(v)
		case "fail-burst-after":
			f.FailBurstAfter, err = strconv.Atoi(v)
		case "crash-after":
			f.CrashAfter, err = strconv.Atoi(v)
		case "restart-after":
			f.RestartAfter, err = time.ParseDuration(v)
		case "startup-delay":
			f.StartupDelay, err = time.ParseDuration(v)
		case "slots":
			f.Slots, err = ParseSlotSchedule(v)
		default:
			return f, fmt.Errorf("fault setting %q: unknown key %q", kv, k)
		}
		if err != nil {
			return f, fmt.Errorf("fault setting %q: bad value %q", kv, v)
		}
	}
	return f, f.validate()
}

// ResolveEndpoint finds which of addrs a --fault key names: an index
// ("3", counting from 0), an address ("127.0.0.1:30003") or a port
// (":30003").
func ResolveEndpoint(key string, addrs []string) (int, error) {
	if n, err := strconv.Atoi(key); err == nil {
		if n < 0 || n >= len(addrs) {
			return 0, fmt.Errorf("endpoint #%d: there are %d endpoints (0-%d)", n, len(addrs), len(addrs)-1)
		}
		return n, nil
	}
	for i, a := range addrs {
		if a == key || (strings.HasPrefix(key, ":") && strings.HasSuffix(a, key)) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("endpoint %q is not one of the listen addresses", key)
}
