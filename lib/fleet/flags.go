package fleet

import (
	"os"

	"tokenmill/lib/cli"
	"tokenmill/lib/openai"
)

// ServerFlags say which servers to use and what every request carries;
// infer generate and infer bench embed them (`embed:""`).
type ServerFlags struct {
	Endpoints     string     `short:"e" placeholder:"LIST" help:"Servers, comma-separated: host:port, host:first-last (a port range), or a URL (http:// is the default, https:// allowed, a path prefix kept). E.g. 127.0.0.1:30000-30007,gpu2:30000."`
	EndpointsFile string     `placeholder:"FILE" help:"File of endpoints, one (or a comma-separated list) per line; # starts a comment."`
	API           openai.API `name:"api" enum:"chat,completions,generate" default:"chat" help:"Request kind: chat (/v1/chat/completions), completions (/v1/completions) or generate (SGLang's native /generate). completions and generate need records with a \"prompt\" text."`
	Model         string     `help:"Model name sent with each request. Default: the first model the server's /v1/models lists."`
	Temperature   *float64   `placeholder:"T" help:"Sampling temperature. Default: the server's (the model's generation config)."`
	TopP          *float64   `name:"top-p" placeholder:"P" help:"Nucleus sampling. Default: the server's."`
	ExtraBody     string     `placeholder:"JSON" help:"JSON object merged into every request body, e.g. '{\"chat_template_kwargs\":{\"enable_thinking\":false}}' (for generate, its \"sampling_params\" merge into the sampling params). A record's own \"params\" override it and the flags. Default: none."`
	APIKey        string     `name:"api-key" env:"TOKENMILL_INFER_API_KEY,OPENAI_API_KEY" placeholder:"KEY" help:"Bearer token for the servers. Never printed. Default: none."`
}

// SamplingFlags are the sampling settings of generation beyond
// ServerFlags' (infer bench sets its own max_tokens and no seed).
type SamplingFlags struct {
	MaxTokens *int     `placeholder:"N" help:"Longest answer in tokens. Default: the server's (SGLang: up to the context for chat, but only 16 for completions and 128 for generate, so set it there)."`
	Seed      *int64   `placeholder:"N" help:"Sampling seed; sample k of a prompt uses N+k. Default: none."`
	Stop      []string `placeholder:"TEXT" sep:"none" help:"Stop sequence; repeat the flag for several. Default: none."`
}

// Targets reads --endpoints and --endpoints-file; a mistake in either is
// a usage error.
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
		file, err := os.Open(f.EndpointsFile)
		if err != nil {
			return nil, cli.Usagef("--endpoints-file: %v", err)
		}
		ts, err := ReadEndpointsFile(file, f.EndpointsFile)
		file.Close()
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
