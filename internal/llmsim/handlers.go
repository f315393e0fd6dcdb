package llmsim

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
)

// Paths served, after SGLang's http_server.py.
const (
	pathChat          = "/v1/chat/completions"
	pathCompletions   = "/v1/completions"
	pathGenerate      = "/generate"
	pathModels        = "/v1/models"
	pathHealth        = "/health"
	pathHealthGen     = "/health_generate"
	pathServerInfo    = "/get_server_info"
	pathServerInfoNew = "/server_info"
	pathModelInfo     = "/get_model_info"
	pathLoad          = "/get_load"
	pathMetrics       = "/metrics"
	pathDecoded       = "/llmsim/decoded" // the simulator's own: see appendDecoded
)

// Token ids the simulated (Qwen-family) model stops on: <|im_end|> ends a
// chat turn, <|endoftext|> a plain completion.
const (
	eosChat = 151645
	eosText = 151643
)

const weightVersion = "default"

const (
	msgQueueFull  = "The request queue is full."
	msgOllamaBusy = "server busy, please try again.  maximum pending requests exceeded"
	msgFail       = "Internal server error: llmsim injected failure"
	msgLimit      = "Rate limit reached: llmsim injected 429"
	msgAborted    = "Aborted"
	msgLoading    = "Loading model"
)

var (
	ctJSON = []byte("application/json")
	ctSSE  = []byte("text/event-stream; charset=utf-8")
	ctText = []byte("text/plain; version=0.0.4; charset=utf-8")
)

func (e *Endpoint) handle(ctx *fasthttp.RequestCtx) {
	path := unsafeString(ctx.Path())
	d := e.d
	defer d.conn.after(ctx)
	if !e.authorized(ctx, path) {
		e.stats.unauthorized.Add(1)
		d.unauthorized(ctx)
		return
	}
	r, ok := d.routes[path]
	if !ok {
		d.notFound(ctx)
		return
	}
	if !d.methodOK(ctx, r.method) {
		d.notAllowed(ctx)
		return
	}
	if !d.holdWhileStarting && !d.open(path) && e.State() == stateStarting {
		e.fail(ctx, apiChat, &apiError{kind: errLoading, status: fasthttp.StatusServiceUnavailable, msg: msgLoading})
		return
	}
	r.serve(e, ctx)
}

// methodOK: FastAPI routes take their method (SGLang's generation routes
// PUT as well); Ollama's GET routes answer HEAD too.
func (d *dialect) methodOK(ctx *fasthttp.RequestCtx, method string) bool {
	switch {
	case string(ctx.Method()) == method:
		return true
	case method == fasthttp.MethodPost:
		return d.putIsPost && ctx.IsPut()
	default:
		return d.headIsGet && ctx.IsHead()
	}
}

// authorized applies Config.APIKey the way the flavour's auth middleware
// does (SGLang: python/sglang/srt/utils/auth.py): OPTIONS and the
// flavour's open paths pass, anything else (unknown paths too) needs the
// exact header. Ollama has no API key.
func (e *Endpoint) authorized(ctx *fasthttp.RequestCtx, path string) bool {
	bearer := e.f.bearer
	if bearer == nil || e.d.noAPIKey || (ctx.IsOptions() && !e.d.guardsOptions) || e.d.open(path) {
		return true
	}
	// In constant time: how long a refusal takes says nothing of how much
	// of the key matched.
	return subtle.ConstantTimeCompare(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), bearer) == 1
}

// fail answers an error in the flavour's shape.
func (e *Endpoint) fail(ctx *fasthttp.RequestCtx, a api, err *apiError) {
	ctx.SetStatusCode(err.status)
	if e.d.oai != nil {
		ctx.SetContentTypeBytes(e.d.oai.jsonType())
	} else {
		ctx.SetContentTypeBytes(ctJSON)
	}
	buf := bufPool.get()
	buf.b = e.d.errorBody(buf.b, a, err)
	ctx.SetBody(buf.b)
	bufPool.put(buf)
}

// health answers like SGLang's and vLLM's /health: 200 with an empty
// body once the server is up, 503 while it starts (or was told it is
// unwell).
func (e *Endpoint) health(ctx *fasthttp.RequestCtx) {
	if !e.healthy() {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
}

func (e *Endpoint) healthy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stateLocked() == stateReady && !e.unwell
}

// llamacppHealth is llama-server's /health (tools/server/README.md):
// {"status": "ok"}, or 503 with its unavailable_error while loading.
func (e *Endpoint) llamacppHealth(ctx *fasthttp.RequestCtx) {
	if !e.healthy() {
		e.fail(ctx, apiChat, &apiError{kind: errLoading, status: fasthttp.StatusServiceUnavailable, msg: msgLoading})
		return
	}
	ctx.SetContentTypeBytes(ctJSONUTF8)
	ctx.SetBodyString(`{"status":"ok"}`)
}

// flight is one generation request on its way through the endpoint.
type flight struct {
	e      *Endpoint
	job    *job
	id     string
	digest string
	hash   uint64
	// sample is what the answers are drawn from: the prompt's hash, mixed
	// with the request's seed or a draw of its own when it samples
	// (sampling.go).
	sample  uint64
	prompt  int // prompt tokens
	cached  int // prompt tokens found in the prefix cache
	created int64
	arrived time.Duration
	stream  bool
	drop    bool // close the connection mid-response
	hung    bool // the hang fault: never answered
	choices []*choiceState
	// inputIDs are the prompt's ids, where counting it took them (a model's
	// tokenizer); nil until promptIDs is first asked otherwise.
	inputIDs []int

	notify    chan struct{}
	remaining atomic.Int32
	failed    atomic.Bool
	ids       int8 // 0 not yet decided, 1 the answer carries token ids, 2 not (withIDs)
}

// choiceState is one answer (of n) of a flight, and the sequence the
// scheduler runs for it.
type choiceState struct {
	Seq
	f         *flight
	index     int
	words     uint64 // seeds the words of this answer
	reasoning int    // the first tokens that are reasoning (chat with --reasoning)
	inline    int    // the first tokens of the content that are a think block (thinking.go)
	thinkOff  bool   // the request turned thinking off (chat_template_kwargs)
	// eos: the answer's last token is the end-of-turn id the model ended
	// with (llmsim's own tokenizers: as vLLM's token_ids hold it), which
	// writes no text.
	eos   int
	limit int        // max_new_tokens after the context cap, for finish "length"
	calls []toolCall // the answer calls tools instead of writing text
	// degen shapes a degenerate answer (degenerate.go): a loop from token
	// loopFrom over the span before it, think markers at two tokens.
	degen                 degeneracy
	loopFrom, span        int
	thinkOpen, thinkClose int
	// model is the answer in a model's own tokens (realtok.go); nil with
	// llmsim's tokenizers, whose words are their tokens.
	model   *modelAnswer
	visible atomic.Int32
	done    atomic.Bool
}

func (f *flight) signal() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// fail marks the flight lost (crash or shutdown) and wakes its handler.
func (f *flight) fail() {
	f.failed.Store(true)
	f.signal()
}

func (c *choiceState) publish(n int) {
	c.visible.Store(int32(n))
	c.f.signal()
}

func (c *choiceState) finish(n int) {
	c.visible.Store(int32(n))
	c.done.Store(true)
	if c.f.remaining.Add(-1) == 0 || c.f.stream {
		c.f.signal()
	}
}

// parse reads a generation request and applies the flavour's checks:
// content type, model name, stream options, default lengths.
func (e *Endpoint) parse(ctx *fasthttp.RequestCtx, a api) (*job, *apiError) {
	d := e.d
	if d.jsonOnly && (a == apiChat || a == apiCompletion) && !isJSON(ctx.Request.Header.ContentType()) {
		return nil, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest,
			msg: "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only 'application/json' is allowed\", 'type': 'value_error'}]"}
	}
	if d.malformed != nil && !json.Valid(ctx.PostBody()) {
		return nil, d.malformed(ctx.PostBody())
	}
	var j *job
	var err error
	switch a {
	case apiChat:
		j, err = parseChat(ctx.PostBody())
	case apiCompletion:
		j, err = parseCompletion(ctx.PostBody())
	case apiNative:
		j, err = parseNative(ctx.PostBody())
	default:
		j, err = parseGenerate(ctx.PostBody())
	}
	if err != nil {
		return nil, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest, msg: err.Error()}
	}
	if a == apiCompletion && !j.given && d.completionMaxTokens < 0 {
		j.maxTokens, j.explicit = -1, false
	}
	if aerr := e.checkModel(j); aerr != nil {
		return nil, aerr
	}
	if d.checkRequest != nil {
		if aerr := d.checkRequest(j); aerr != nil {
			return nil, aerr
		}
	}
	if s := d.oai; s != nil && j.opts.present {
		switch {
		case s.streamOptionsNeedStream && !j.stream:
			return nil, &apiError{kind: errValidation, status: fasthttp.StatusBadRequest,
				msg: "Stream options can only be defined when `stream=True`."}
		case s.strictStreamOptions && j.opts.unknown != "":
			return nil, &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest,
				msg: "Unrecognized request argument supplied: " + j.opts.unknown}
		}
	}
	if !j.stream {
		j.usage, j.continuous = false, false
	}
	return j, nil
}

// checkModel applies the flavour's rule for the request's model name and
// sets the name the answer echoes.
func (e *Endpoint) checkModel(j *job) *apiError {
	d, served := e.d, e.f.cfg.ModelName
	if d.echoModel || j.api == apiNative {
		return nil
	}
	name := j.requested
	switch {
	case name == "" && d.noModel != "":
		return &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest, msg: d.noModel}
	case name == "":
		j.model = served
	case d.anyModel || e.modelMatches(name):
		j.model = name
	default:
		return d.modelNotFound(name)
	}
	return nil
}

// modelMatches says whether a requested model name is the one served, by
// the flavour's rule.
func (e *Endpoint) modelMatches(name string) bool {
	if same := e.d.sameModel; same != nil {
		return same(name, e.f.cfg.ModelName)
	}
	return name == e.f.cfg.ModelName
}

// asAPIError turns a refusal from newFlight into an error answer.
func asAPIError(err error) *apiError {
	if ae, ok := err.(*apiError); ok {
		return ae
	}
	return &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest, msg: err.Error()}
}

// refuseBusy answers a request the waiting queue has no room for, in
// the flavour's shape.
func (e *Endpoint) refuseBusy(ctx *fasthttp.RequestCtx, a api, f *flight) {
	if f.stream && e.d.queueFullInStream {
		f.writeQueueFullStream(ctx)
		return
	}
	e.fail(ctx, a, &apiError{kind: errBusy, status: fasthttp.StatusServiceUnavailable, msg: e.d.busyMessage})
}

func (f *flight) sseType() []byte {
	if s := f.e.d.oai; s != nil && s.sse != nil {
		return s.sse
	}
	return ctSSE
}

const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// newFlight works out what the model will answer: prompt size, the
// flavour's context checks (context.go), and each choice's length.
func (e *Endpoint) newFlight(j *job, n uint64) (*flight, error) {
	cfg := &e.f.cfg
	canon := j.prompt.AppendCanonical(make([]byte, 0, 256))
	h := xxh3.Hash(canon)
	tok := e.tok()
	prompt, ids, err := tok.count(&j.prompt)
	if err != nil {
		return nil, err
	}
	f := &flight{
		e: e, job: j, hash: h, digest: string(appendHex64(nil, h)),
		prompt: prompt, inputIDs: ids, created: time.Now().Unix(),
		stream: j.stream, notify: make(chan struct{}, 1),
	}
	idh := mix64(mix64(cfg.Seed+0x9e3779b97f4a7c15) ^ uint64(e.index)<<40 ^ n)
	f.id = string(appendHex64(appendHex64(make([]byte, 0, 32), idh), mix64(idh)))
	f.sample = e.sampleHash(h, j, n)
	limit, err := e.fitContext(f, j)
	if err != nil {
		return nil, err
	}
	if j.maxTokens >= 0 {
		limit = min(limit, j.maxTokens)
	}
	f.choices = make([]*choiceState, j.n)
	for i := range f.choices {
		natural := NaturalLength(f.sample, i)
		c := &choiceState{f: f, index: i, words: mix64(f.sample + uint64(i) + 1), limit: limit}
		c.Seq = Seq{PromptTokens: f.prompt, Target: natural, End: finishStop, Ref: c}
		if i > 0 {
			c.PromptTokens = 0 // parallel samples share the prefilled prompt
		}
		if natural > limit {
			c.Target, c.End = limit, finishLength
		}
		if j.api == apiChat && cfg.Reasoning && (e.d.reasoning != "" || e.d.hiddenReasoning) && natural >= 2 {
			c.reasoning = natural * 2 / 5
		}
		think, err := e.thinkingLength(j, f.sample, i)
		if err != nil {
			return nil, err
		}
		e.planThinking(c, think, natural, limit)
		c.thinkOff = think == 0
		if j.api == apiChat {
			e.planToolCalls(f, c, j.tools, limit)
			if c.calls != nil {
				c.inline = 0
			}
		}
		e.degenerate(f, c, limit)
		tok.answer(c)
		if c.model == nil {
			c.endOfTurn(j.api, limit)
		}
		f.choices[i] = c
	}
	f.remaining.Store(int32(j.n))
	return f, nil
}

func isJSON(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), ctJSON)
}

// respond writes a finished flight (or, when streaming, the whole stream).
func (e *Endpoint) respond(ctx *fasthttp.RequestCtx, f *flight) {
	if f.stream && f.drop {
		// Written on the raw connection, so the drop comes right after the
		// last event reached the client, with no chunked-encoding end.
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			w := bufio.NewWriter(c)
			w.WriteString("HTTP/1.1 200 OK\r\nServer: uvicorn\r\nContent-Type: " + string(f.sseType()) +
				"\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
			f.streamTo(chunkWriter{w})
		})
		return
	}
	if f.stream {
		ctx.SetContentTypeBytes(f.sseType())
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) { f.streamTo(w) })
		return
	}
	e.count(f)
	ctx.SetContentTypeBytes(ctJSON)
	var body []byte
	switch s := e.d.oai; {
	case f.job.api == apiNative:
		ctx.SetContentTypeBytes(s.jsonType())
		body = f.appendNative(make([]byte, 0, f.sizeHint()), int(f.choices[0].visible.Load()), true)
	case s != nil:
		ctx.SetContentTypeBytes(s.jsonType())
		body = s.appendAnswer(make([]byte, 0, f.sizeHint()), f)
	case f.job.api == apiChat:
		body = f.appendChat(make([]byte, 0, f.sizeHint()))
	case f.job.api == apiCompletion:
		body = f.appendCompletion(make([]byte, 0, f.sizeHint()))
	default:
		body = f.appendGenerate(make([]byte, 0, f.sizeHint()), f.choices[0].Target, true)
	}
	if f.drop {
		e.stats.dropped.Add(1)
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) { writeHalfResponse(c, body) })
		return
	}
	ctx.SetBody(body)
}

// count records how a flight ended.
func (e *Endpoint) count(f *flight) {
	for _, c := range f.choices {
		if c.End == finishAbort {
			e.stats.aborted.Add(1)
			return
		}
	}
	if !f.drop {
		e.stats.completed.Add(1)
	}
}

// sizeHint guesses the body size, to allocate it once.
func (f *flight) sizeHint() int {
	n := 512
	for _, c := range f.choices {
		n += 8 * c.Target
		if f.job.api == apiGenerate {
			n += 7 * c.Target
		}
	}
	return n
}

// e2e is the simulated time from arrival to the last token, in seconds.
func (f *flight) e2e() float64 {
	var last time.Duration
	for _, c := range f.choices {
		last = max(last, c.Finished)
	}
	if last < f.arrived {
		return 0
	}
	return (last - f.arrived).Seconds()
}

// chunkWriter frames writes in HTTP/1.1 chunked encoding.
type chunkWriter struct{ w *bufio.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.w.WriteString(strconv.FormatInt(int64(len(p)), 16) + "\r\n")
	c.w.Write(p)
	_, err := c.w.WriteString("\r\n")
	return len(p), err
}

func (c chunkWriter) Flush() error { return c.w.Flush() }

// writeHalfResponse sends a response's head, announcing the whole body,
// and half of the body; the connection then closes: a response dropped
// midway, as a dying server leaves it.
func writeHalfResponse(c net.Conn, body []byte) {
	head := "HTTP/1.1 200 OK\r\nServer: uvicorn\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n"
	c.Write(append([]byte(head), body[:len(body)/2]...))
}
