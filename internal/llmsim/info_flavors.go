package llmsim

import (
	"fmt"
	"strconv"

	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
)

// The read-only routes of the flavours other than SGLang (info.go).

// trainedContext is the context the simulated model was trained for, as
// GGUF metadata reports it (llama.cpp's n_ctx_train, Ollama's
// <arch>.context_length): not the server's context, which --context-length
// sets, so a client that reads the wrong one is caught.
func (e *Endpoint) trainedContext() int { return max(262144, e.f.cfg.ContextLength) }

// modelModified is the fixed modification time Ollama reports for the model.
const modelModified = "2025-04-08T12:00:00Z"

func answerJSON(ctx *fasthttp.RequestCtx, ct []byte, b []byte) {
	ctx.SetContentTypeBytes(ct)
	ctx.SetBody(b)
}

// modelsHead starts a {"object":"list","data":[{...}]} model list.
func modelsHead(b []byte, id string) []byte {
	b = append(b, `{"object":"list","data":[{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"object":"model","created":`...)
	return appendInt(b, int(time.Now().Unix()))
}

// serveVLLMModels: engine/protocol.py ModelList of one ModelCard with its
// max_model_len and a ModelPermission.
func serveVLLMModels(e *Endpoint, ctx *fasthttp.RequestCtx) {
	cfg := &e.f.cfg
	now := int(time.Now().Unix())
	b := modelsHead(nil, cfg.ModelName)
	b = append(b, `,"owned_by":"vllm","root":`...)
	b = appendString(b, cfg.ModelName)
	b = append(b, `,"parent":null,"max_model_len":`...)
	b = appendInt(b, cfg.ContextLength)
	b = append(b, `,"permission":[{"id":"modelperm-`...)
	b = appendHex64(b, mix64(cfg.Seed+uint64(e.index)))
	b = append(b, `","object":"model_permission","created":`...)
	b = appendInt(b, now)
	b = append(b, `,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}]}`...)
	answerJSON(ctx, ctJSON, b)
}

// serveOpenAIModels: the API reference's model object.
func serveOpenAIModels(e *Endpoint, ctx *fasthttp.RequestCtx) {
	b := modelsHead(nil, e.f.cfg.ModelName)
	answerJSON(ctx, ctJSON, append(b, `,"owned_by":"system"}]}`...))
}

// serveOllamaModels: openai/openai.go toListCompletion.
func serveOllamaModels(e *Endpoint, ctx *fasthttp.RequestCtx) {
	b := modelsHead(nil, ollamaTagged(e.f.cfg.ModelName))
	answerJSON(ctx, ctJSONUTF8, append(b, `,"owned_by":"library"}]}`...))
}

// serveLlamaModels: tools/server/README.md GET /v1/models, one model with
// its GGUF meta.
//
// The loading middleware lets the model lists through while the model
// loads (every other route but /health answers 503 "Loading model"), and
// the handler leaves meta null until it is loaded (model_meta() only once
// ready).
func serveLlamaModels(e *Endpoint, ctx *fasthttp.RequestCtx) {
	b := modelsHead(nil, e.f.cfg.ModelName)
	if e.State() == stateStarting {
		answerJSON(ctx, ctJSONUTF8, append(b, `,"owned_by":"llamacpp","meta":null}]}`...))
		return
	}
	b = append(b, `,"owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":151936,"n_ctx_train":`...)
	b = appendInt(b, e.trainedContext())
	b = append(b, `,"n_embd":5120,"n_params":27000000000,"size":16549875712}}]}`...)
	answerJSON(ctx, ctJSONUTF8, b)
}

// llamaSlotParams is the slot's params object (a subset of
// task_params::to_json: the sampling defaults and limits).
func appendLlamaSlot(b []byte, id, task, nCtx int, busy bool, decoded int) []byte {
	b = append(b, `{"id":`...)
	b = appendInt(b, id)
	b = append(b, `,"id_task":`...)
	b = appendInt(b, task)
	b = append(b, `,"n_ctx":`...)
	b = appendInt(b, nCtx)
	b = append(b, `,"speculative":false,"is_processing":`...)
	b = strconv.AppendBool(b, busy)
	b = append(b, `,"params":{"n_predict":-1,"seed":4294967295,"temperature":0.800000011920929,"top_k":40,"top_p":0.949999988079071,"min_p":0.05000000074505806,"max_tokens":-1,"n_keep":0,"n_discard":0,"ignore_eos":false,"stream":true,"n_probs":0,"min_keep":0},"next_token":{"has_next_token":true,"has_new_line":false,"n_remain":-1,"n_decoded":`...)
	b = appendInt(b, decoded)
	return append(b, `}}`...)
}

// serveLlamaProps: GET /props. total_slots is --parallel; n_ctx the
// context of a slot; chat_template_caps what the template supports
// (common/chat.cpp, from rendering it: supports_tools when a tool it is
// given appears in its text).
func serveLlamaProps(e *Endpoint, ctx *fasthttp.RequestCtx) {
	cfg := &e.f.cfg
	tok := e.tok()
	b := []byte(`{"default_generation_settings":`)
	b = appendLlamaSlot(b, 0, -1, cfg.ContextLength, false, 0)
	b = b[:len(b)-1] // the slot object gains the prompt field
	b = append(b, `,"prompt":""},"total_slots":`...)
	b = appendInt(b, e.slots())
	b = append(b, `,"model_path":`...)
	b = appendString(b, cfg.ModelName)
	b = append(b, `,"chat_template":`...)
	if text, ok := tok.templateText(); ok {
		b = appendString(b, text)
	} else {
		b = append(b, `"{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"`...)
	}
	tools := strconv.FormatBool(tok.supportsTools())
	b = append(b, `,"chat_template_caps":{"supports_object_arguments":false,"supports_parallel_tool_calls":`+tools+
		`,"supports_preserve_reasoning":false,"supports_string_content":true,"supports_system_role":true,"supports_tool_calls":`+tools+
		`,"supports_tools":`+tools+`,"supports_typed_content":false}`...)
	b = append(b, `,"modalities":{"vision":false,"audio":false},"build_info":"`+llamacppBuild+`","is_sleeping":false}`...)
	answerJSON(ctx, ctJSONUTF8, b)
}

// serveLlamaSlots: GET /slots, one object per slot, the first ones busy
// with the running requests.
func serveLlamaSlots(e *Endpoint, ctx *fasthttp.RequestCtx) {
	running, _, _ := e.load()
	n := e.slots()
	b := []byte{'['}
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		task := -1
		if i < running {
			task = i
		}
		b = appendLlamaSlot(b, i, task, e.f.cfg.ContextLength, i < running, 0)
	}
	answerJSON(ctx, ctJSONUTF8, append(b, ']'))
}

// slots is the endpoint's running slots now (Faults.Slots).
func (e *Endpoint) slots() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults.Slots.at(e.f.clock.Now(), e.f.cfg.MaxRunning)
}

// promWriter writes Prometheus text exposition.
type promWriter struct {
	b      []byte
	labels string // `{k="v",...}` or ""
	python bool   // prometheus_client formats values as Python floats
}

func (w *promWriter) metric(name, typ, help string, v float64) {
	w.b = append(w.b, "# HELP "+name+" "+help+"\n# TYPE "+name+" "+typ+"\n"+name+w.labels+" "...)
	if w.python {
		w.b = append(w.b, promFloat(v)...)
	} else {
		w.b = strconv.AppendFloat(w.b, v, 'g', -1, 64)
	}
	w.b = append(w.b, '\n')
}

// serveVLLMMetrics: vllm/v1/metrics/loggers.py PrometheusStatLogger names,
// help texts and labels.
func serveVLLMMetrics(e *Endpoint, ctx *fasthttp.RequestCtx) {
	running, waiting, tokens := e.load()
	w := &promWriter{labels: `{engine="0",model_name=` + string(appendString(nil, e.f.cfg.ModelName)) + `}`, python: true}
	w.metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(running))
	w.metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(waiting))
	w.metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", float64(tokens)/float64(e.maxTotalTokens()))
	w.metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(e.stats.cacheQueries.Load()))
	w.metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(e.stats.cachedTokens.Load()))
	w.metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(e.stats.promptTokens.Load()))
	w.metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(e.stats.generatedTokens.Load()))
	w.metric("vllm:request_success_total", "counter", "Count of successfully processed requests.", float64(e.stats.completed.Load()))
	ctx.SetContentTypeBytes(ctText)
	ctx.SetBody(w.b)
}

// serveLlamaMetrics: llama-server's /metrics (README "Available metrics"),
// which the real server serves only when started with --metrics; llmsim
// always serves it.
func serveLlamaMetrics(e *Endpoint, ctx *fasthttp.RequestCtx) {
	if !e.f.cfg.LlamaMetrics {
		// server-context.cpp get_metrics without params.endpoint_metrics.
		e.fail(ctx, apiChat, &apiError{kind: errNotSupported, status: fasthttp.StatusNotImplemented,
			msg: "This server does not support metrics endpoint. Start it with `--metrics`"})
		return
	}
	running, waiting, _ := e.load()
	e.mu.Lock()
	rate := e.window.rate()
	e.mu.Unlock()
	w := &promWriter{}
	w.metric("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.", float64(e.stats.promptTokens.Load()))
	w.metric("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.", float64(e.stats.generatedTokens.Load()))
	w.metric("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", float64(time.Second)/float64(max(e.f.cfg.Timing.PrefillPerToken, 1)))
	w.metric("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", rate)
	w.metric("llamacpp:requests_processing", "gauge", "Number of requests processing.", float64(running))
	w.metric("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", float64(waiting))
	ctx.SetContentTypeBytes(ctText)
	ctx.SetBody(w.b)
}

// ollamaDetails is api/types.go ModelDetails of the simulated model.
const ollamaDetails = `{"parent_model":"","format":"gguf","family":"qwen3","families":["qwen3"],"parameter_size":"27B","quantization_level":"Q4_K_M"}`

// serveOllamaTags: GET /api/tags, api.ListResponse.
func serveOllamaTags(e *Endpoint, ctx *fasthttp.RequestCtx) {
	name := ollamaTagged(e.f.cfg.ModelName)
	b := []byte(`{"models":[{"name":`)
	b = appendString(b, name)
	b = append(b, `,"model":`...)
	b = appendString(b, name)
	b = append(b, `,"modified_at":"`+modelModified+`","size":16549875712,"digest":"`...)
	b = appendHex64(appendHex64(appendHex64(appendHex64(b, mix64(1)), mix64(2)), mix64(3)), mix64(4))
	b = append(b, `","details":`+ollamaDetails+`}]}`...)
	answerJSON(ctx, ctJSONUTF8, b)
}

// serveOllamaShow: POST /api/show (docs/api.md "Show Model Information"):
// model_info carries the trained <arch>.context_length, parameters the
// num_ctx the Modelfile sets (the server's context).
func serveOllamaShow(e *Endpoint, ctx *fasthttp.RequestCtx) {
	var r struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	body := ctx.PostBody()
	if len(body) == 0 {
		ollamaNativeError(ctx, fasthttp.StatusBadRequest, "missing request body")
		return
	}
	if err := json.Unmarshal(body, &r); err != nil {
		ollamaNativeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	name := r.Model
	if name == "" {
		name = r.Name
	}
	switch {
	case name == "":
		ollamaNativeError(ctx, fasthttp.StatusBadRequest, "model is required")
		return
	case !e.modelMatches(name):
		ollamaNativeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("model '%s' not found", name))
		return
	}
	cfg := &e.f.cfg
	params := fmt.Sprintf("%-30s %d\n%-30s %q", "num_ctx", cfg.ContextLength, "stop", "<|im_end|>")
	b := []byte(`{"modelfile":`)
	b = appendString(b, "# Modelfile generated by \"ollama show\"\nFROM "+ollamaTagged(cfg.ModelName)+"\nPARAMETER num_ctx "+strconv.Itoa(cfg.ContextLength)+"\nPARAMETER stop <|im_end|>\n")
	b = append(b, `,"parameters":`...)
	b = appendString(b, params)
	b = append(b, `,"template":"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n","details":`+ollamaDetails+`,"model_info":{"general.architecture":"qwen3","general.file_type":15,"general.parameter_count":27000000000,"general.quantization_version":2,"qwen3.attention.head_count":40,"qwen3.attention.head_count_kv":8,"qwen3.block_count":64,"qwen3.context_length":`...)
	b = appendInt(b, e.trainedContext())
	b = append(b, `,"qwen3.embedding_length":5120,"tokenizer.ggml.model":"gpt2","tokenizer.ggml.eos_token_id":151645},"capabilities":["completion","tools"],"modified_at":"`+modelModified+`"}`...)
	answerJSON(ctx, ctJSONUTF8, b)
}

// ollamaNativeError is the native API's {"error": "..."} (gin.H).
func ollamaNativeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	answerJSON(ctx, ctJSONUTF8, append(appendString([]byte(`{"error":`), msg), '}'))
}
