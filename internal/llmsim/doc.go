// Package llmsim is a simulated fleet of LLM servers: one process (or one
// test) serves one or many independent endpoints that speak the HTTP API
// of SGLang (the default) or, by Config.Flavor, of vLLM, llama.cpp's
// llama-server, Ollama or an OpenAI gateway (flavor.go, dialects.go),
// batch requests the way a continuous-batching scheduler does, and fail in
// every way a real fleet fails. tokenmill's tests, demos and benchmarks
// run against it because no GPU exists where they run.
//
// # In-process use
//
// Tests of HTTP clients start a fleet on loopback ports and point the client
// at its URLs:
//
//	fleet, err := llmsim.Start(ctx, llmsim.Config{TimeScale: 1000}, 8)
//	if err != nil { ... }
//	defer fleet.Close()
//	urls := fleet.URLs() // "http://127.0.0.1:PORT", one per endpoint
//
// Config's zero value is a faithful default (48 running slots, 32768-token
// context, real-time latencies calibrated to the production job); set
// TimeScale to run faster, Instant to answer at once, and Faults (or
// PerEndpoint) to inject failures. While the fleet runs, each endpoint can
// be steered and observed:
//
//	ep := fleet.Endpoint(2)
//	ep.Crash()                          // listener closed, connections dropped
//	ep.Restart()                        // back (after Faults.StartupDelay)
//	ep.SetHealthy(false)                // /health answers 503
//	ep.SetFaults(llmsim.Faults{FailRate: 1})
//	st := ep.Stats()                    // requests, tokens, max running seen
//
// Every completion's text starts with PromptDigest of its prompt, followed
// by one word per further generated token, so a client test can prove that
// each answer belongs to its prompt and that the usage it reports is right.
//
// # Tokenizers
//
// By default the endpoints count and tokenize with llmsim's own
// tokenizers (tokenizer.go): four-byte pieces, or with Config.ChatTemplate
// a word tokenizer and a ChatML-like template, each generated word one
// token whose id is a hash of its text. With Config.Tokenizer (--tokenizer
// DIR, a model's Hugging Face folder) they use the model's own tokenizer
// and chat template instead (realtok.go, through lib/tokenizer): a chat
// prompt is the template's rendering of the messages, tools and
// chat_template_kwargs, tokenized as vLLM and SGLang tokenize it, and what
// usage counts, the context checks and the prompt ids returned are its ids;
// /tokenize, /detokenize and /apply-template tokenize and render as the
// model does, and the template reported (/props, /get_server_info) is its
// text. The answer's words are chosen as before, then written as the model
// writes them (its thinking markup, its template's tool-call markup) and
// encoded: each generated token is one of the model's ids, an answer that
// ends on its own ends with the end-of-turn id, max_tokens cuts the ids.
// Config.TemplateDrift renders with the template of another version, one
// that puts a default system prompt before a conversation without one.
//
// # Timing model
//
// Each endpoint runs a scheduler step loop: a step admits waiting requests
// into free running slots (MaxRunning), produces one token for every running
// request, and lasts StepBase + StepPerRequest*running + PrefillPerToken*
// (prompt tokens of the requests joining in this step), times the endpoint's
// Slow factor. The defaults reproduce the production fleet: one request
// alone decodes about 26.5 tokens/s, 48 running requests about 1,180
// tokens/s per endpoint. All durations (latencies, StartupDelay,
// RestartAfter) are simulated time; TimeScale S runs them S times faster
// than real time. The step loop is the pure state machine Model, which tests
// drive on a virtual clock.
//
// # Caches, tools, degenerate answers
//
// With KVTokens an endpoint has a prefix cache (cache.go) and a KV cache
// that bounds the batch besides MaxRunning; Faults.Slots changes
// MaxRunning over simulated time. ToolCallRate answers requests with tools
// by tool calls (tools.go); LoopRate and its siblings make answers
// degenerate (degenerate.go). RequestLog records every generation request
// (reqlog.go).
//
// # What is not simulated
//
// Stop strings, sampling settings (but for the seed and temperature that
// pick an answer, sampling.go, and the thinking switches, thinking.go) and
// logprobs are accepted and ignored;
// tools are not counted as prompt tokens but with a model's template,
// which renders them; /v1/completions, /generate and
// llama.cpp's /completion take one prompt, not a batch. Keep-alive connections idle for 5 s (real
// time) are closed, as uvicorn does.
//
// # Clients that go away
//
// SGLang aborts a request whose client disconnected, which frees its slot.
// The simulator does the same: a request waiting for its whole answer has
// its connection watched (the socket is peeked at, never read, whenever it
// turns readable), and a streamed one notices at its next write; either is
// then cancelled and leaves the batch at the next scheduler step. Stats
// count such requests as Cancelled and show the Running and Waiting
// requests and the open Connections now, so a client test can prove that
// its timeouts and cancellations free the server's slots. The hang fault
// is a stuck request that holds its slot until its client gives up.
//
// # API key
//
// With Config.APIKey (--api-key) every request but OPTIONS, /health* and
// /metrics needs "Authorization: Bearer <key>"; others are answered 401
// {"error":"Unauthorized"}, as SGLang started with --api-key answers (the
// other flavours guard their own paths with their own 401s).
//
// # Wire format
//
// Request and response types are written here from each server's source
// and documentation (SGLang: python/sglang/srt/entrypoints/http_server.py,
// openai/protocol.py, openai/serving_chat.py, serving_completions.py,
// managers/tokenizer_manager.py; the others in dialects.go) and pinned by
// the golden files in testdata/llmsim, each naming where its shape comes
// from. This package deliberately shares no code with the
// client side, so a protocol mistake fails a test instead of cancelling out.
//
// Everything a flavour does differently is a field of its dialect (the
// type in flavor.go, one filled in per flavour in dialects.go): the rest
// of the package asks the dialect, never which flavour it is. A request's
// way through the scheduler (generate.go) is apart from the bytes it reads
// and writes (handlers.go, wire.go, respond.go, oai.go).
package llmsim
