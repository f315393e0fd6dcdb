package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// What the bench asks of a stream, the most first: the usage in every
// chunk (SGLang's and vLLM's continuous_usage_stats), so that tokens are
// counted as they come; the usage at the end alone (OpenAI and the
// gateways that refuse any other stream option, Ollama, llama.cpp), the
// streamed text then turned into tokens by each answer's count; or no
// stream options at all, for a server that refuses them.
var streamAsks = []struct{ body, refused string }{
	{`{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, ""},
	{`{"stream":true,"stream_options":{"include_usage":true}}`, "continuous_usage_stats"},
	{`{"stream":true}`, "stream_options"},
}

// builder is the request builder of the bench's requests with stream
// asking for its stream options, under --extra-body.
func (cfg *Config) builder(stream, model string) (*openai.Builder, error) {
	if cfg.API == openai.APIGenerate {
		stream = `{"stream":true}` // /generate's chunks carry their meta_info
	}
	extra, err := openai.Merge([]byte(stream), cfg.Extra)
	if err != nil {
		return nil, cli.Usagef("--extra-body: %v", err)
	}
	sampling := cfg.Sampling
	if n := cfg.AnswerTokens; n > 0 {
		sampling.MaxTokens = &n
	}
	b, err := openai.NewBuilder(cfg.API, model, sampling, extra)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	return b, nil
}

// sample is the bench's request bodies, as negotiate built them.
type sample struct {
	bodies [][]byte
	// arms are the arm of each body (1 + its index in the mixture, 0:
	// none), as prompts drew them.
	arms []int
	note string // what the prompts are, for the report
	// wantUsage: the bodies ask for the answers' usage.
	wantUsage bool
}

// negotiate builds the bench's request bodies, asking for as much of the
// stream as the servers give: one short request to the first ready
// endpoint tries each of streamAsks in turn, and a refusal that names the
// option moves on to the next. Stream options in --extra-body are taken
// as they are. A first request refused for another reason (a route or a
// field the server lacks) ends the bench before any level.
func (cfg *Config) negotiate(ctx context.Context, env *cli.Env, p *fleet.Pool, first int, model string) (sample, error) {
	own, _ := record.FieldValue(cfg.Extra, "stream_options")
	asks := streamAsks
	if cfg.API == openai.APIGenerate || own != nil {
		asks = asks[:1]
	}
	ep := p.Endpoints()[first]
	var s sample
	for i, ask := range asks {
		b, err := cfg.builder(ask.body, model)
		if err != nil {
			return sample{}, err
		}
		if s, err = cfg.prompts(ctx, env, b, cfg.fitter(p, model)); err != nil {
			return sample{}, err
		}
		s.wantUsage = cfg.API == openai.APIGenerate || asksUsage(s.bodies[0])
		status, msg := preflight(ctx, ep, cfg.APIKey, cfg.API, s.bodies[0])
		switch {
		case status == fasthttp.StatusOK || status == 0:
			return s, nil // 0: no answer; the levels will say
		case i+1 < len(asks) && refusesStreamOption(status, msg):
			env.Logf("%s refuses %s (HTTP %d: %s): asking for less", ep.Name(), asks[i+1].refused, status, msg)
			continue
		}
		f := fleet.ClassifyStatus(status, []byte(msg))
		if f.Retriable {
			return s, nil // busy or broken now, perhaps not later
		}
		return sample{}, fmt.Errorf("%s refused the first request (HTTP %d: %s): %s", ep.Name(), status, msg, refusalHint(status, msg, cfg.API))
	}
	return s, nil
}

// asksUsage reads a body's stream_options.include_usage.
func asksUsage(body []byte) bool {
	raw, err := record.FieldValue(body, "stream_options")
	if err != nil || raw == nil {
		return false
	}
	var so openai.StreamOptions
	return json.Unmarshal(raw, &so) == nil && so.IncludeUsage
}

func refusesStreamOption(status int, msg string) bool {
	low := strings.ToLower(msg)
	return (status == fasthttp.StatusBadRequest || status == fasthttp.StatusUnprocessableEntity) &&
		(strings.Contains(low, "stream_options") || strings.Contains(low, "stream options") ||
			strings.Contains(low, "continuous_usage_stats") || strings.Contains(low, "include_usage"))
}

// refusalHint names the likely fix of a first request refused.
func refusalHint(status int, msg string, api openai.API) string {
	if status == fasthttp.StatusNotFound && !strings.Contains(strings.ToLower(msg), "model") {
		return fmt.Sprintf("the server has no %s route (--api %s): use --api chat or --api completions", api.Path(), api)
	}
	return "check --api, --model and --extra-body"
}

// preflightTimeout bounds the first request: one token, streamed.
const preflightTimeout = time.Minute

// oneToken is body asking for one token.
func oneToken(api openai.API, body []byte) ([]byte, error) {
	if api != openai.APIGenerate {
		return openai.Merge(body, []byte(`{"max_tokens":1}`))
	}
	sp, err := record.FieldValue(body, "sampling_params")
	if err != nil {
		return nil, err
	}
	if sp == nil {
		sp = []byte(`{}`)
	}
	if sp, err = openai.Merge(sp, []byte(`{"max_new_tokens":1}`)); err != nil {
		return nil, err
	}
	return openai.Merge(body, append(append([]byte(`{"sampling_params":`), sp...), '}'))
}

// preflight sends body, cut to one token, to ep as a stream and reads its
// answer: the status and the server's message (0 when there was no
// answer).
func preflight(ctx context.Context, ep *fleet.Endpoint, apiKey string, api openai.API, body []byte) (int, string) {
	short, err := oneToken(api, body)
	if err != nil {
		return 0, ""
	}
	path := api.Path()
	cl := fleet.NewClient(ep.Target(), apiKey, true)
	defer cl.CloseAll()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	cl.Post(req, path, short)
	done := make(chan error, 1)
	go func() { done <- cl.DoTimeout(req, resp, preflightTimeout) }()
	select {
	case err := <-done:
		if err != nil {
			return 0, ""
		}
	case <-ctx.Done():
		cl.CloseAll()
		<-done
		return 0, ""
	}
	defer resp.CloseBodyStream()
	if resp.StatusCode() == fasthttp.StatusOK {
		// Accepted: the stream is not read, so one that never ends (a
		// server that streams without end) cannot hold the bench here.
		return fasthttp.StatusOK, ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), 64<<10))
	return resp.StatusCode(), openai.ErrorMessage(b)
}
