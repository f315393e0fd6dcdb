package llmsim

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// sglangVersion is the SGLang release whose API the simulator follows.
const sglangVersion = "0.5.4"

// info answers the read-only GET endpoints.
func (e *Endpoint) info(ctx *fasthttp.RequestCtx, path string) {
	buf := bufPool.get()
	defer bufPool.put(buf)
	if path == pathMetrics {
		ctx.SetContentTypeBytes(ctText)
		ctx.SetBody(e.appendMetrics(buf.b))
		return
	}
	ctx.SetContentTypeBytes(ctJSON)
	cfg := &e.f.cfg
	b := buf.b
	switch path {
	case pathModels:
		// http_server.py available_models: ModelList of one ModelCard.
		b = append(b, `{"object":"list","data":[{"id":`...)
		b = appendString(b, cfg.ModelName)
		b = append(b, `,"object":"model","created":`...)
		b = appendInt(b, int(time.Now().Unix()))
		b = append(b, `,"owned_by":"sglang","root":`...)
		b = appendString(b, cfg.ModelName)
		b = append(b, `,"parent":null,"max_model_len":`...)
		b = appendInt(b, cfg.ContextLength)
		b = append(b, `}]}`...)
	case pathModelInfo:
		b = append(b, `{"model_path":`...)
		b = appendString(b, cfg.ModelName)
		b = append(b, `,"tokenizer_path":`...)
		b = appendString(b, cfg.ModelName)
		b = append(b, `,"is_generation":true,"preferred_sampling_params":null,"weight_version":"`+weightVersion+`"}`...)
	case pathServerInfo, pathServerInfoNew:
		b = e.appendServerInfo(b)
	case pathDecoded:
		b = e.appendDecoded(b)
	case pathLoad:
		// tokenizer_manager.get_load: one GetLoadReqOutput per DP rank.
		running, waiting, tokens := e.load()
		b = append(b, `[{"rid":null,"http_worker_ipc":null,"dp_rank":null,"num_reqs":`...)
		b = appendInt(b, running+waiting)
		b = append(b, `,"num_waiting_reqs":`...)
		b = appendInt(b, waiting)
		b = append(b, `,"num_tokens":`...)
		b = appendInt(b, tokens)
		b = append(b, `}]`...)
	}
	ctx.SetBody(b)
	buf.b = b
}

func (e *Endpoint) load() (running, waiting, tokens int) {
	if e.f.cfg.Instant {
		return int(e.stats.inflight.Load()), 0, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.model.Running(), e.model.Waiting(), e.model.RunningTokens()
}

// maxTotalTokens is the KV cache size the simulator claims. It does not
// model KV cache pressure: MaxRunning is the only limit on the batch.
func (e *Endpoint) maxTotalTokens() int { return 16 * e.f.cfg.ContextLength }

// appendServerInfo writes /get_server_info: SGLang returns its whole
// ServerArgs, the scheduler info and per-DP internal states; these are the
// fields clients read.
func (e *Endpoint) appendServerInfo(b []byte) []byte {
	cfg := &e.f.cfg
	host, port, _ := net.SplitHostPort(e.addr)
	b = append(b, `{"model_path":`...)
	b = appendString(b, cfg.ModelName)
	b = append(b, `,"tokenizer_path":`...)
	b = appendString(b, cfg.ModelName)
	b = append(b, `,"served_model_name":`...)
	b = appendString(b, cfg.ModelName)
	b = append(b, `,"host":`...)
	b = appendString(b, host)
	b = append(b, `,"port":`...)
	b = append(b, port...)
	b = append(b, `,"context_length":`...)
	b = appendInt(b, cfg.ContextLength)
	b = append(b, `,"max_running_requests":`...)
	b = appendInt(b, e.slots())
	b = append(b, `,"max_queued_requests":`...)
	if cfg.MaxQueued > 0 {
		b = appendInt(b, cfg.MaxQueued)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_total_tokens":null,"chunked_prefill_size":8192,"max_prefill_tokens":16384,"schedule_policy":"fcfs","tp_size":1,"dp_size":1,"stream_interval":1,"reasoning_parser":`...)
	if cfg.Reasoning {
		b = append(b, `"qwen3"`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"chat_template":`...)
	if arg, ok := e.tok().templateArg(); ok {
		b = appendString(b, arg)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"enable_metrics":true,"random_seed":`...)
	b = strconv.AppendUint(b, cfg.Seed, 10)
	b = append(b, `,"max_total_num_tokens":`...)
	b = appendInt(b, e.maxTotalTokens())
	b = append(b, `,"max_req_input_len":`...)
	b = appendInt(b, cfg.ContextLength-1)
	b = append(b, `,"internal_states":[{"last_gen_throughput":`...)
	e.mu.Lock()
	rate := e.window.rate()
	e.mu.Unlock()
	b = appendFloat(b, rate)
	b = append(b, `}],"version":"`+sglangVersion+`"}`...)
	return b
}

// appendMetrics writes the Prometheus text exposition of the sglang:*
// metrics clients watch, with SGLang's names, help texts and model_name
// label (docs: references/production_metrics).
func (e *Endpoint) appendMetrics(b []byte) []byte {
	running, waiting, tokens := e.load()
	e.mu.Lock()
	rate := e.window.rate()
	e.mu.Unlock()
	label := `{model_name=` + string(appendString(nil, e.f.cfg.ModelName)) + `} `
	metric := func(name, typ, help string, v float64) {
		b = append(b, "# HELP sglang:"+name+" "+help+"\n# TYPE sglang:"+name+" "+typ+"\nsglang:"+name+label...)
		b = append(b, promFloat(v)...)
		b = append(b, '\n')
	}
	metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(e.stats.promptTokens.Load()))
	metric("generation_tokens_total", "counter", "Number of generation tokens processed.", float64(e.stats.generatedTokens.Load()))
	metric("num_requests_total", "counter", "Number of requests processed.", float64(e.stats.completed.Load()+e.stats.aborted.Load()))
	metric("num_running_reqs", "gauge", "The number of running requests.", float64(running))
	metric("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", float64(waiting))
	metric("num_used_tokens", "gauge", "The number of used tokens.", float64(tokens))
	metric("token_usage", "gauge", "The token usage.", float64(tokens)/float64(e.maxTotalTokens()))
	metric("gen_throughput", "gauge", "The generation throughput (token/s).", rate)
	if e.f.cfg.KVTokens > 0 {
		metric("cache_hit_rate", "gauge", "The prefix cache hit rate.", ratio(float64(e.stats.cachedTokens.Load()), float64(e.stats.cacheQueries.Load())))
	}
	return b
}

// appendDecoded writes GET /llmsim/decoded, the simulator's own (no
// server has it): the token counters of /metrics and the simulated time
// they were decoded by (the end of the last scheduler step they count),
// read together (the scheduler moves them together under e.mu), with the
// clock's time. What a window decoded is the difference of the counters
// between two readings; the time it took, the longer of the differences of
// the two times (the step counted last may end after the clock): the
// benchmark suite's fleet utilisation, which so cannot pass 100%.
func (e *Endpoint) appendDecoded(b []byte) []byte {
	e.mu.Lock()
	prompt, generated, through := e.stats.promptTokens.Load(), e.stats.generatedTokens.Load(), time.Duration(e.stats.decodedAt.Load())
	now := e.f.clock.Now()
	e.mu.Unlock()
	b = append(b, `{"prompt_tokens_total":`...)
	b = strconv.AppendInt(b, prompt, 10)
	b = append(b, `,"generation_tokens_total":`...)
	b = strconv.AppendInt(b, generated, 10)
	b = append(b, `,"decoded_through_seconds":`...)
	b = strconv.AppendFloat(b, through.Seconds(), 'f', -1, 64)
	b = append(b, `,"clock_seconds":`...)
	b = strconv.AppendFloat(b, now.Seconds(), 'f', -1, 64)
	return append(b, '}')
}

// promFloat formats v as Python's prometheus_client does (floatToGoString):
// Python's repr, switched to an exponent past 1e6 the way Go prints.
func promFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	dot := strings.IndexByte(s, '.')
	if v > 0 && dot > 6 {
		mantissa := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return mantissa + "e+0" + strconv.Itoa(dot-1)
	}
	return s
}
