package llmsim

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
		return d.flavor == FlavorSGLang && ctx.IsPut()
	default:
		return d.flavor == FlavorOllama && ctx.IsHead()
	}
}

// authorized applies Config.APIKey the way the flavour's auth middleware
// does (SGLang: python/sglang/srt/utils/auth.py): OPTIONS and the
// flavour's open paths pass, anything else (unknown paths too) needs the
// exact header. Ollama has no API key.
func (e *Endpoint) authorized(ctx *fasthttp.RequestCtx, path string) bool {
	bearer := e.f.bearer
	if bearer == nil || e.d.flavor == FlavorOllama || (ctx.IsOptions() && e.d.flavor != FlavorOpenAI) || e.d.open(path) {
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
	e       *Endpoint
	job     *job
	id      string
	digest  string
	hash    uint64
	prompt  int // prompt tokens
	cached  int // prompt tokens found in the prefix cache
	created int64
	arrived time.Duration
	stream  bool
	drop    bool // close the connection mid-response
	hung    bool // the hang fault: never answered
	choices []*choiceState

	notify    chan struct{}
	remaining atomic.Int32
	failed    atomic.Bool
}

// choiceState is one answer (of n) of a flight, and the sequence the
// scheduler runs for it.
type choiceState struct {
	Seq
	f         *flight
	index     int
	words     uint64     // seeds the words of this answer
	reasoning int        // the first tokens that are reasoning (chat with --reasoning)
	limit     int        // max_new_tokens after the context cap, for finish "length"
	calls     []toolCall // the answer calls tools instead of writing text
	// degen shapes a degenerate answer (degenerate.go): a loop from token
	// loopFrom over the span before it, think markers at two tokens.
	degen                 degeneracy
	loopFrom, span        int
	thinkOpen, thinkClose int
	visible               atomic.Int32
	done                  atomic.Bool
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

// faultKind is what the fault draw decided for a request.
type faultKind int

const (
	faultNone faultKind = iota
	faultFail
	faultAbort
	faultHang
	faultDrop
	faultLimit
)

// draw picks the fault of generation request number n (1-based), and a
// second independent value for where an abort cuts the answer.
func (e *Endpoint) draw(f Faults, n uint64) (faultKind, uint64) {
	h := mix64(e.f.cfg.Seed ^ mix64(uint64(e.index)+1) ^ n*0x9e3779b97f4a7c15)
	u := unitFloat(h) - 1e-300 // in [0, 1)
	bits := mix64(h)
	for _, c := range []struct {
		k faultKind
		p float64
	}{{faultFail, f.FailRate}, {faultAbort, f.AbortRate}, {faultHang, f.HangRate}, {faultDrop, f.DropRate}, {faultLimit, f.LimitRate}} {
		if u < c.p {
			return c.k, bits
		}
		u -= c.p
	}
	return faultNone, bits
}

// admit counts a generation request against the endpoint's life: it
// returns the incarnation serving it, the faults in force, and whether
// this request is the one CrashAfter says crashes the endpoint.
func (e *Endpoint) admit() (*incarnation, Faults, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.accepted++
	crash := e.inc != nil && e.faults.CrashAfter > 0 && e.accepted > e.faults.CrashAfter
	return e.inc, e.faults, crash
}

func (e *Endpoint) generate(ctx *fasthttp.RequestCtx, a api) {
	e.stats.requests.Add(1)
	n := e.seq.Add(1)
	le := &logEntry{}
	if e.f.log != nil {
		defer e.logRequest(ctx, le)
	}
	inc, faults, crash := e.admit()
	if inc == nil || crash {
		e.stats.lost.Add(1)
		le.outcome = "lost"
		if crash {
			le.outcome = "crash"
			e.Crash()
		}
		ctx.Conn().Close()
		return
	}
	select {
	case <-inc.ready:
	case <-inc.ctx.Done():
		e.stats.lost.Add(1)
		le.outcome = "lost"
		return
	}

	j, aerr := e.parse(ctx, a)
	if aerr != nil {
		e.stats.badRequests.Add(1)
		e.fail(ctx, a, aerr)
		return
	}
	f, err := e.newFlight(j, n)
	if err != nil {
		e.stats.badRequests.Add(1)
		e.fail(ctx, a, asAPIError(err))
		return
	}

	le.f = f
	kind, bits := e.draw(faults, n)
	le.outcome = [...]string{faultNone: "", faultFail: "fail", faultAbort: "abort", faultHang: "hang", faultDrop: "drop", faultLimit: "limit"}[kind]
	switch kind {
	case faultFail:
		e.stats.failed.Add(1)
		e.fail(ctx, a, &apiError{kind: errInternal, status: fasthttp.StatusInternalServerError, msg: msgFail})
		return
	case faultLimit:
		e.stats.limited.Add(1)
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
		e.fail(ctx, a, &apiError{kind: errBusy, status: fasthttp.StatusTooManyRequests, msg: msgLimit})
		return
	case faultHang:
		e.stats.hung.Add(1)
		if e.f.cfg.Instant {
			e.holdInstant(ctx)
			return
		}
		f.hang()
	case faultAbort:
		for _, c := range f.choices {
			c.Target = 1 + int(bits%uint64(max(c.Target, 1)))
			c.End = finishAbort
		}
	case faultDrop:
		f.drop = true
	}

	f.reserve()
	e.consultCache(f)
	if e.f.cfg.Instant || f.choices[0].Target == 0 {
		e.stats.inflight.Add(1)
		storeMax(&e.stats.maxRunning, e.stats.inflight.Load())
		for _, c := range f.choices {
			c.Generated = c.Target
			c.visible.Store(int32(c.Target))
			c.done.Store(true)
			e.stats.generatedTokens.Add(int64(c.Target))
		}
		e.stats.promptTokens.Add(int64(f.prompt - f.cached))
		e.respond(ctx, f)
		e.stats.inflight.Add(-1)
		return
	}

	if !e.submit(inc, f) {
		e.stats.rejected.Add(1)
		le.outcome = "rejected"
		if f.stream && e.d.flavor == FlavorSGLang {
			f.writeQueueFullStream(ctx)
			return
		}
		msg := msgQueueFull
		if e.d.flavor == FlavorOllama {
			msg = msgOllamaBusy
		}
		e.fail(ctx, a, &apiError{kind: errBusy, status: fasthttp.StatusServiceUnavailable, msg: msg})
		return
	}
	if f.stream && !f.hung {
		e.respond(ctx, f)
		return
	}
	if e.await(ctx, f) {
		e.respond(ctx, f)
	} else if le.outcome == "" {
		le.outcome = "lost"
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
	if d.flavor == FlavorSGLang || j.api == apiNative {
		return nil
	}
	name := j.requested
	switch {
	case name == "" && d.modelRequired:
		msg := "model is required" // Ollama's ChatHandler
		if d.flavor == FlavorOpenAI {
			msg = "you must provide a model parameter"
		}
		return &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest, msg: msg}
	case name == "":
		j.model = served
	case d.anyModel || e.modelMatches(name):
		j.model = name
	default:
		return e.modelNotFound(name)
	}
	return nil
}

// modelMatches: vLLM and OpenAI take the served name exactly; Ollama
// names are case-blind and ":latest" when they carry no tag.
func (e *Endpoint) modelMatches(name string) bool {
	served := e.f.cfg.ModelName
	if e.d.flavor == FlavorOllama {
		return strings.EqualFold(ollamaTagged(name), ollamaTagged(served))
	}
	return name == served
}

func ollamaTagged(name string) string {
	if strings.Contains(name, ":") {
		return name
	}
	return name + ":latest"
}

func (e *Endpoint) modelNotFound(name string) *apiError {
	err := &apiError{kind: errModel, status: fasthttp.StatusNotFound}
	switch e.d.flavor {
	case FlavorOllama:
		err.msg = fmt.Sprintf("model %q not found, try pulling it first", name) // server/routes.go handleScheduleError
	case FlavorOpenAI:
		err.msg, err.code = "The model `"+name+"` does not exist or you do not have access to it.", "model_not_found"
	default: // vLLM serving_engine.py _check_model
		err.msg = "The model `" + name + "` does not exist."
		if e.d.flavor == FlavorVLLM {
			err.param = "model"
		}
	}
	return err
}

// asAPIError turns a refusal from newFlight into an error answer.
func asAPIError(err error) *apiError {
	if ae, ok := err.(*apiError); ok {
		return ae
	}
	return &apiError{kind: errInvalid, status: fasthttp.StatusBadRequest, msg: err.Error()}
}

func (f *flight) sseType() []byte {
	if s := f.e.d.oai; s != nil && s.sse != nil {
		return s.sse
	}
	return ctSSE
}

// await waits for the answer of a flight that is not streamed (a hung one
// never gets it). It reports false, the connection closed, when the flight
// was lost to a crash or its client went away; the latter is cancelled,
// so its slot frees at the next step, as SGLang aborts a request whose
// client disconnected.
func (e *Endpoint) await(ctx *fasthttp.RequestCtx, f *flight) bool {
	w := watchHangup(ctx.Conn())
	for f.remaining.Load() > 0 && !f.failed.Load() {
		select {
		case <-f.notify:
		case <-w.gone:
			f.abandon()
			ctx.Conn().Close()
			return false
		}
	}
	w.stop()
	if f.failed.Load() {
		e.stats.lost.Add(1)
		ctx.Conn().Close()
		return false
	}
	return true
}

// reserve sets what each sequence holds of the KV cache: its prompt (the
// first choice; the others share it) and its answer, at most the context.
func (f *flight) reserve() {
	for i, c := range f.choices {
		kv := min(c.Target, f.e.f.cfg.ContextLength)
		if i == 0 {
			kv = min(kv+f.prompt, f.e.f.cfg.ContextLength)
		}
		c.KV = kv
	}
}

// hang makes the flight a stuck request: it takes its running slot and
// decodes without end, answering nothing, until its client closes the
// connection or the endpoint crashes.
func (f *flight) hang() {
	f.hung = true
	for _, c := range f.choices {
		c.Target = math.MaxInt32
	}
}

// holdInstant is the hang fault without the batching model: the request
// counts as running until its client closes the connection.
func (e *Endpoint) holdInstant(ctx *fasthttp.RequestCtx) {
	e.stats.inflight.Add(1)
	storeMax(&e.stats.maxRunning, e.stats.inflight.Load())
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		holdUntilClosed(c)
		e.stats.inflight.Add(-1)
	})
}

// submit queues the flight's sequences, all or none.
func (e *Endpoint) submit(inc *incarnation, f *flight) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inc != inc {
		f.fail()
		return true
	}
	m := e.model
	if m.MaxQueued > 0 && m.Waiting()+len(f.choices) > m.MaxQueued {
		return false
	}
	if !m.Busy() {
		m.SetNow(e.f.clock.Now())
	}
	f.arrived = e.f.clock.Now()
	for _, c := range f.choices {
		m.Submit(&c.Seq)
	}
	storeMax(&e.stats.maxWaiting, int64(m.Waiting()))
	select {
	case inc.wake <- struct{}{}:
	default:
	}
	return true
}

// abandon cancels the flight because its client went away.
func (f *flight) abandon() {
	f.e.stats.cancelled.Add(1)
	f.cancel()
}

// cancel takes the flight's sequences out of the scheduler (its client
// went away, or the drop fault cut it).
func (f *flight) cancel() {
	e := f.e
	e.mu.Lock()
	for _, c := range f.choices {
		e.model.Cancel(&c.Seq)
	}
	e.mu.Unlock()
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
	f := &flight{
		e: e, job: j, hash: h, digest: string(appendHex64(nil, h)),
		prompt: PromptTokens(&j.prompt), created: time.Now().Unix(),
		stream: j.stream, notify: make(chan struct{}, 1),
	}
	idh := mix64(mix64(cfg.Seed+0x9e3779b97f4a7c15) ^ uint64(e.index)<<40 ^ n)
	f.id = string(appendHex64(appendHex64(make([]byte, 0, 32), idh), mix64(idh)))
	limit, err := e.fitContext(f, j)
	if err != nil {
		return nil, err
	}
	if j.maxTokens >= 0 {
		limit = min(limit, j.maxTokens)
	}
	f.choices = make([]*choiceState, j.n)
	for i := range f.choices {
		natural := NaturalLength(h, i)
		c := &choiceState{f: f, index: i, words: mix64(h + uint64(i) + 1), limit: limit}
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
		if j.api == apiChat {
			e.planToolCalls(f, c, j.tools, limit)
		}
		e.degenerate(f, c, limit)
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

// holdUntilClosed keeps a hijacked connection open without answering,
// until the client (or a crash) closes it.
func holdUntilClosed(c net.Conn) {
	var buf [512]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
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
