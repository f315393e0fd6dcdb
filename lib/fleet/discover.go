package fleet

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/lib/openai"
)

// What a server says of itself, asked once it is ready. Each kind answers
// a different route:
//
//	                capacity                          context length
//	SGLang          /get_server_info max_running_requests   context_length (same answer)
//	llama.cpp       /props total_slots                      /props default_generation_settings.n_ctx
//	vLLM            (none: the adaptive limit finds it)     /v1/models max_model_len
//	Ollama          (none)                                  POST /api/show: parameters num_ctx, else Ollama's default
//	gateways        (none)                                  (none: --context-length)
//
// and the servers with Prometheus metrics count their running and waiting
// requests there (sglang:num_running_reqs and num_queue_reqs,
// vllm:num_requests_running and num_requests_waiting, llama.cpp's
// requests_processing and requests_deferred).

// Info is what a server said of itself when it came up.
type Info struct {
	// Capacity is how many requests it runs at once; 0 when it does not say.
	Capacity       int
	CapacitySource string // "max_running_requests, /get_server_info"
	// Parallel is what a server that does not say runs at once unless set
	// otherwise (Ollama's default OLLAMA_NUM_PARALLEL, which v0.6.5 reports
	// nowhere); 0 when nothing is known. The adaptive limit starts held
	// there rather than searching from scratch, and probes above it.
	Parallel       int
	ParallelSource string
	// Context is the most tokens a request (prompt and answer) may have;
	// 0 when unknown.
	Context       int
	ContextSource string // "max_model_len, /v1/models"
	// ContextAssumed: the server did not state Context; it is what such a
	// server runs unless set otherwise (Ollama's default num_ctx, which
	// its OLLAMA_CONTEXT_LENGTH changes unseen). A prompt it cuts shorter
	// is found by its answer (infer's fit).
	ContextAssumed bool
	// Models are the names /v1/models lists.
	Models []string
	// Model is the one it is sent (models.go), and where that came from
	// ("--model", or "/v1/models": the first it lists).
	Model, ModelSource string
	// Metrics names the gauges of its /metrics that count running and
	// waiting requests, once read ("" when it has none).
	Metrics string
	// NoTools says why requests with tools are not sent to it ("" when
	// they are): it says its template does not render them (features.go).
	NoTools string
}

// Paths of the routes asked, beyond openai's.
const (
	pathProps       = "/props"    // llama.cpp
	pathOllamaShow  = "/api/show" // Ollama
	pathMetrics     = "/metrics"
	pathVLLMVersion = "/version"
)

// ollamaDefaultContext is the context Ollama v0.6.5 gives a model whose
// Modelfile sets no num_ctx (api/types.go DefaultOptions, unless the
// server's OLLAMA_CONTEXT_LENGTH says otherwise).
const ollamaDefaultContext = 2048

// ollamaDefaultParallel is the requests Ollama v0.6.5 runs at once per
// model unless OLLAMA_NUM_PARALLEL says otherwise (4, or 1 where memory
// is short: server/sched.go defaultParallel). On a CPU its throughput is
// flat past it, and a search from scratch there costs more than it finds.
const ollamaDefaultParallel = 4

// discover asks ep what it says of itself: SGLang's server info, else
// llama.cpp's /props for the capacity, the models listed, and Ollama's
// /api/show for a context no route gave; --context-length over all.
func (p *Pool) discover(ep *Endpoint) Info {
	var in Info
	p.readServerInfo(ep, &in)
	if in.Capacity == 0 {
		p.readProps(ep, &in)
	}
	model, ollama := p.readModels(ep, &in)
	if in.Context == 0 && ollama && model != "" {
		in.Context, in.ContextSource = p.ollamaContext(ep, model)
		if n := p.ollamaLoadedContext(ep, model); n > 0 {
			in.Context, in.ContextSource = n, "context_length, "+pathOllamaPS
		}
		in.ContextAssumed = strings.HasPrefix(in.ContextSource, ollamaDefaultSource)
	}
	if ollama && in.Capacity == 0 {
		in.Parallel, in.ParallelSource = ollamaDefaultParallel, "Ollama's default OLLAMA_NUM_PARALLEL, which it reports nowhere"
	}
	if p.cfg.ContextLength > 0 {
		in.Context, in.ContextSource, in.ContextAssumed = p.cfg.ContextLength, "--context-length", false
	}
	return in
}

// get200 is the body of a GET of path that answered 200, or false.
func (p *Pool) get200(ep *Endpoint, path string) ([]byte, bool) {
	status, body, err := p.get(ep, path)
	return body, err == nil && status == fasthttp.StatusOK
}

// readServerInfo takes the capacity and context from SGLang's server
// info, under the first of its names that answers one.
func (p *Pool) readServerInfo(ep *Endpoint, in *Info) {
	for _, path := range []string{openai.PathServerInfo, openai.PathServerInfoNew} {
		body, ok := p.get200(ep, path)
		if !ok {
			continue
		}
		si, err := openai.ParseServerInfo(body)
		if err != nil {
			continue
		}
		if n := si.Slots(); n > 0 {
			in.Capacity, in.CapacitySource = n, "max_running_requests, "+path
		}
		if si.ContextLength != nil && *si.ContextLength > 0 {
			in.Context, in.ContextSource = *si.ContextLength, "context_length, "+path
		}
		return
	}
}

// readProps takes the capacity from llama.cpp's /props, and its context
// where none was said yet.
func (p *Pool) readProps(ep *Endpoint, in *Info) {
	body, ok := p.get200(ep, pathProps)
	if !ok {
		return
	}
	slots, nctx, ok := parseProps(body)
	if !ok {
		return
	}
	in.NoTools = propsNoTools(body)
	if slots > 0 {
		in.Capacity, in.CapacitySource = slots, "total_slots, "+pathProps
	}
	if nctx > 0 && in.Context == 0 {
		in.Context, in.ContextSource = nctx, "n_ctx, "+pathProps
	}
}

// readModels takes the models /v1/models lists, and the context from the
// max_model_len of the one --model names (the first listed with one when
// none is named) where none was said yet. It returns the model requests will name and
// whether the server is Ollama, whose OpenAI layer lists its models as
// the "library"'s.
func (p *Pool) readModels(ep *Endpoint, in *Info) (model string, ollama bool) {
	defer func() { model = in.Model }()
	in.Model, in.ModelSource = p.pickModel(nil)
	body, ok := p.get200(ep, openai.PathModels)
	if !ok {
		return
	}
	l, err := parseModelList(body)
	if err != nil {
		return
	}
	for _, m := range l {
		in.Models = append(in.Models, m.ID)
		ollama = ollama || m.OwnedBy == "library"
	}
	in.Model, in.ModelSource = p.pickModel(in.Models)
	if n := maxModelLen(l, in.Model); in.Context == 0 && n > 0 {
		in.Context, in.ContextSource = n, "max_model_len, "+openai.PathModels
	}
	return
}

// maxModelLen is the first max_model_len listed for the model given (any
// model when none is), 0 when none is listed.
func maxModelLen(l []listedModel, given string) int {
	for _, m := range l {
		if m.MaxModelLen > 0 && (given == "" || ModelMatches(given, m.ID)) {
			return m.MaxModelLen
		}
	}
	return 0
}

// listedModel is one entry of /v1/models as discovery reads it.
type listedModel struct {
	ID          string `json:"id"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
}

func parseModelList(body []byte) ([]listedModel, error) {
	var l struct {
		Data []listedModel `json:"data"`
	}
	err := json.Unmarshal(body, &l)
	return l.Data, err
}

// parseProps reads llama.cpp's /props: total_slots and the context of a
// slot (default_generation_settings.n_ctx).
func parseProps(body []byte) (slots, nctx int, ok bool) {
	var pr struct {
		TotalSlots int `json:"total_slots"`
		Defaults   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if json.Unmarshal(body, &pr) != nil {
		return 0, 0, false
	}
	return pr.TotalSlots, pr.Defaults.NCtx, pr.TotalSlots > 0 || pr.Defaults.NCtx > 0
}

// ollamaContext asks Ollama's /api/show the context model's requests get:
// the num_ctx its Modelfile sets, else Ollama's default (never more than
// the trained context, model_info's <arch>.context_length). 0 when the
// server is not Ollama.
func (p *Pool) ollamaContext(ep *Endpoint, model string) (int, string) {
	req, _ := json.Marshal(map[string]string{"model": model})
	status, body, err := p.control(ep, fasthttp.MethodPost, pathOllamaShow, req)
	if err != nil || status != fasthttp.StatusOK {
		return 0, ""
	}
	var show struct {
		Parameters string                     `json:"parameters"`
		ModelInfo  map[string]json.RawMessage `json:"model_info"`
	}
	if json.Unmarshal(body, &show) != nil || show.ModelInfo == nil {
		return 0, ""
	}
	if n := numCtxParameter(show.Parameters); n > 0 {
		return n, "num_ctx, " + pathOllamaShow
	}
	trained := 0
	var arch string
	if raw, ok := show.ModelInfo["general.architecture"]; ok && json.Unmarshal(raw, &arch) == nil {
		if raw, ok := show.ModelInfo[arch+".context_length"]; ok {
			json.Unmarshal(raw, &trained)
		}
	}
	if trained > 0 && trained < ollamaDefaultContext {
		return trained, arch + ".context_length, " + pathOllamaShow
	}
	return ollamaDefaultContext, ollamaDefaultSource + ": the model sets none in " + pathOllamaShow
}

// ollamaDefaultSource names a context that is Ollama's default.
const ollamaDefaultSource = "Ollama's default num_ctx"

// pathOllamaPS lists the models Ollama has loaded.
const pathOllamaPS = "/api/ps"

// ollamaLoadedContext is the context model runs with where Ollama says it:
// newer releases' /api/ps give each loaded model's context_length (what
// num_ctx and OLLAMA_CONTEXT_LENGTH made it); v0.6.5's do not, and a model
// not loaded yet is not listed. 0 when unknown.
func (p *Pool) ollamaLoadedContext(ep *Endpoint, model string) int {
	body, ok := p.get200(ep, pathOllamaPS)
	if !ok {
		return 0
	}
	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			Model         string `json:"model"`
			ContextLength int    `json:"context_length"`
		} `json:"models"`
	}
	if json.Unmarshal(body, &ps) != nil {
		return 0
	}
	for _, m := range ps.Models {
		if m.ContextLength > 0 && (ModelMatches(model, m.Name) || ModelMatches(model, m.Model)) {
			return m.ContextLength
		}
	}
	return 0
}

// numCtxParameter finds "num_ctx N" in /api/show's parameters, one
// "name value" per line.
func numCtxParameter(params string) int {
	for _, line := range strings.Split(params, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "num_ctx" {
			if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// ModelMatches tells whether a model name given names one a server lists:
// the same name, or the same but for Ollama's default tag (":latest"),
// which its server adds to the names it lists and accepts without.
func ModelMatches(given, listed string) bool {
	if given == listed {
		return true
	}
	trim := func(s string) string { return strings.TrimSuffix(s, ":latest") }
	return strings.EqualFold(trim(given), trim(listed))
}

// metricNames are the gauges of a server's /metrics that count its
// running and waiting requests.
type metricNames struct{ running, waiting string }

var knownMetrics = []metricNames{
	{"sglang:num_running_reqs", "sglang:num_queue_reqs"},
	{"vllm:num_requests_running", "vllm:num_requests_waiting"},
	{"llamacpp:requests_processing", "llamacpp:requests_deferred"},
}

// findMetrics names the gauges a /metrics answer has, or nil.
func findMetrics(body []byte) *metricNames {
	for _, m := range knownMetrics {
		if bytes.Contains(body, []byte(m.running)) && bytes.Contains(body, []byte(m.waiting)) {
			if _, ok := m.read(body, 0); ok {
				return &m
			}
		}
	}
	return nil
}
