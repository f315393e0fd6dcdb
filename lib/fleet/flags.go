package fleet

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"tokenmill/lib/cli"
	"tokenmill/lib/openai"
)

// ServerFlags say which servers to use and what every request carries;
// infer generate and infer bench embed them (`embed:""`).
type ServerFlags struct {
	Endpoints     string     `short:"e" placeholder:"LIST" help:"Servers, comma-separated: host:port, host:first-last (a port range), or a URL (http:// is the default, https:// allowed, a path prefix kept). E.g. 127.0.0.1:30000-30007,gpu2:30000."`
	EndpointsFile string     `placeholder:"FILE" help:"File of endpoints, one (or a comma-separated list) per line; # starts a comment. A directory: every *.txt file in it (one per node, each written by its serve). infer generate reads it again whenever it changes: endpoints added to it join the run (serve writes one and keeps it to the servers that are ready)."`
	API           openai.API `name:"api" enum:"chat,completions,generate" default:"chat" help:"Request kind: chat (/v1/chat/completions), completions (/v1/completions) or generate (SGLang's native /generate). completions and generate need records with a \"prompt\" text."`
	Model         string     `help:"Model name sent with each request; a comma-separated list where the servers serve it under different names (each endpoint is sent the first one its /v1/models lists). Default: each endpoint the first model its own /v1/models lists."`
	Temperature   *float64   `placeholder:"T" help:"Sampling temperature. Default: the server's (the model's generation config)."`
	TopP          *float64   `name:"top-p" placeholder:"P" help:"Nucleus sampling. Default: the server's."`
	ExtraBody     string     `placeholder:"JSON" help:"JSON object merged into every request body, e.g. '{\"chat_template_kwargs\":{\"enable_thinking\":false}}' (for generate, its \"sampling_params\" merge into the sampling params). A record's own \"params\" override it and the flags. Default: none."`
	APIKey        string     `name:"api-key" env:"TOKENMILL_INFER_API_KEY,OPENAI_API_KEY" placeholder:"KEY" help:"Bearer token for the servers (an endpoint URL's own user:password@ is sent as basic auth instead). Never printed. Default: none."`
	HealthPath    string     `name:"health-path" placeholder:"PATH" help:"Route that answers 200 once a server is ready, e.g. /ping. Default: /health (SGLang, vLLM, llama.cpp, TGI), or /v1/models where a server has no /health (Ollama, gateways)."`
	ContextLength int        `name:"context-length" placeholder:"N" help:"Context length of every endpoint in tokens, whatever the servers say. Default: learned from each server (SGLang /get_server_info, vLLM /v1/models, llama.cpp /props, Ollama /api/show), else from the first refusal for length that states it; requests are fitted to the smallest."`
}

// SamplingFlags are the sampling settings of generation beyond
// ServerFlags' (infer bench sets its own max_tokens and no seed).
type SamplingFlags struct {
	MaxTokens *int     `placeholder:"N" help:"Longest answer in tokens. Default: the server's (SGLang: up to the context for chat, but only 16 for completions and 128 for generate, so set it there)."`
	Seed      *int64   `placeholder:"N" help:"Sampling seed; sample k of a prompt uses N+k. Default: none."`
	Stop      []string `placeholder:"TEXT" sep:"none" help:"Stop sequence; repeat the flag for several. Default: none."`
}

// Targets reads --endpoints and --endpoints-file, and checks the other
// server flags; a mistake in any is a usage error.
func (f *ServerFlags) Targets() ([]Target, error) {
	var targets []Target
	if f.Endpoints != "" {
		ts, err := ParseEndpoints(f.Endpoints)
		if err != nil {
			return nil, cli.Usagef("--endpoints: %v", err)
		}
		targets = ts
	}
	if f.EndpointsFile != "" {
		ts, _, warnings, err := LoadEndpoints(f.EndpointsFile) // a directory's files left out are said by Follow
		if errors.Is(err, fs.ErrNotExist) {
			return nil, cli.Usagef("--endpoints-file %s: no such file (serve writes it once a server is ready)", f.EndpointsFile)
		}
		if err != nil {
			return nil, cli.Usagef("--endpoints-file: %v", err)
		}
		if len(ts) == 0 && len(targets) == 0 {
			left := ""
			if len(warnings) > 0 {
				left = "; " + strings.Join(warnings, "; ")
			}
			return nil, cli.Usagef("--endpoints-file %s lists no endpoint (serve writes it once a server is ready)%s", f.EndpointsFile, left)
		}
		targets = append(targets, ts...)
	}
	if err := CheckTargets(targets); err != nil {
		return nil, cli.Usagef("%v", err)
	}
	if p := f.HealthPath; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, " \t?#")) {
		return nil, cli.Usagef("--health-path %q: want a path such as /health", p)
	}
	if f.ContextLength < 0 {
		return nil, cli.Usagef("--context-length must not be negative")
	}
	return targets, nil
}

// Protect registers the run's credentials with env (--api-key, or the
// OPENAI_API_KEY it came from, and the passwords of the endpoints' URLs),
// so that neither stderr nor any record shows them, in any form a server
// could echo them (see cli.Secrets).
func (f *ServerFlags) Protect(env *cli.Env, targets []Target) {
	s := env.Protect()
	s.Add(f.APIKey)
	for _, t := range targets {
		s.AddBasic(t.User, string(t.Password))
	}
}

// Concurrency is --concurrency: a number of requests in flight per
// endpoint, or "auto" for the adaptive limit on every endpoint. Zero is
// the default: each server's reported capacity plus --queue-depth, and
// the adaptive limit where a server reports none.
type Concurrency struct {
	N    int
	Auto bool
}

// UnmarshalText reads "auto" or a number.
func (c *Concurrency) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.EqualFold(s, "auto") {
		*c = Concurrency{Auto: true}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of requests or auto, got %q", s)
	}
	*c = Concurrency{N: n}
	return nil
}

func (c Concurrency) String() string {
	if c.Auto {
		return "auto"
	}
	return strconv.Itoa(c.N)
}

// Extra is --extra-body, checked to be a JSON object (nil when not given).
func (f *ServerFlags) Extra() ([]byte, error) {
	if f.ExtraBody == "" {
		return nil, nil
	}
	extra := []byte(f.ExtraBody)
	if err := openai.ValidObject(extra); err != nil {
		return nil, cli.Usagef("--extra-body: %v", err)
	}
	return extra, nil
}

// Sampling is what the flags set of every request's sampling.
func (f *ServerFlags) Sampling(s SamplingFlags) openai.Sampling {
	return openai.Sampling{MaxTokens: s.MaxTokens, Temperature: f.Temperature, TopP: f.TopP, Seed: s.Seed, Stop: s.Stop}
}
