package infer

import (
	"slices"
	"sync"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"tokenmill/lib/fleet"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// Counting a prompt's tokens, to fit its request into the model's
// context: by the server's tokenizer where it offers one (vLLM's
// /tokenize counts the chat prompt; llama.cpp's /tokenize and SGLang's
// /v1/tokenize count the texts, to which the chat template's tokens are
// added), else estimated from the prompt's bytes. The estimate is kept
// conservative: its bytes per token are a low percentile of what this
// run's answered prompts measured (the server's prompt_tokens over their
// bytes), and before there are enough of them a low guess.

// tokenKind is what an endpoint's tokenizer counts.
type tokenKind int

const (
	tokUnknown tokenKind = iota // not asked yet
	tokNone                     // no tokenizer
	tokChat                     // /tokenize with messages: the chat prompt (vLLM)
	tokText                     // /tokenize with content: the text (llama.cpp)
	tokTexts                    // /v1/tokenize with prompts: each text (SGLang)
)

const (
	// guessBytesPerToken is the estimate's bytes per token before the run
	// has measured its own: fewer than any common tokenizer averages on
	// text (English runs about 4, Chinese about 3, code 3 to 4), so the
	// estimate is high.
	guessBytesPerToken = 2.5
	// templateGuess is the chat template's tokens per message (and for the
	// answer's turn) until measured: ChatML's are 4 or 5.
	templateGuess = 8
	// learnAfter is how many answered prompts the estimate waits for.
	learnAfter  = 20
	ratioWindow = 512
)

// tokenCounter counts prompts' tokens; safe for concurrent use.
type tokenCounter struct {
	pool    *fleet.Pool
	apiKey  string
	model   func() string
	timeout time.Duration

	mu       sync.Mutex
	ratios   []float64 // bytes per token of answered prompts, the last ratioWindow
	next     int
	bpt      float64 // the estimate's bytes per token now
	template float64 // chat template tokens per message, measured (0: not yet)
	kinds    map[*fleet.Endpoint]tokenKind
	clients  map[*fleet.Endpoint]*fleet.Client
}

func newTokenCounter(pool *fleet.Pool, apiKey string, model func() string, timeout time.Duration) *tokenCounter {
	return &tokenCounter{pool: pool, apiKey: apiKey, model: model, timeout: timeout, bpt: guessBytesPerToken,
		kinds: map[*fleet.Endpoint]tokenKind{}, clients: map[*fleet.Endpoint]*fleet.Client{}}
}

// promptSize is what the estimate reads of a prompt: the bytes of its
// texts (contents, tool calls, tools) and its messages.
type promptSize struct {
	bytes, msgs int
}

func sizeOf(msgs []record.Message, tools []byte) promptSize {
	s := promptSize{bytes: len(tools), msgs: len(msgs)}
	for _, m := range msgs {
		s.bytes += len(m.Content) + len(m.ToolCalls) + len(m.ReasoningContent)
	}
	return s
}

// estimate is the conservative guess of a prompt's tokens.
func (tc *tokenCounter) estimate(s promptSize) int {
	tc.mu.Lock()
	bpt, tpl := tc.bpt, tc.template
	tc.mu.Unlock()
	if tpl == 0 {
		tpl = templateGuess
	}
	return int(float64(s.bytes)/bpt+0.999) + int(tpl*float64(s.msgs+1)+0.999)
}

// learn takes an answered prompt's size and the prompt_tokens the server
// charged for it.
func (tc *tokenCounter) learn(s promptSize, promptTokens int) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tpl := tc.template
	if tpl == 0 {
		tpl = templateGuess
	}
	text := float64(promptTokens) - tpl*float64(s.msgs+1)
	if s.bytes < 64 || text <= 0 {
		return
	}
	r := float64(s.bytes) / text
	if len(tc.ratios) < ratioWindow {
		tc.ratios = append(tc.ratios, r)
	} else {
		tc.ratios[tc.next] = r
		tc.next = (tc.next + 1) % ratioWindow
	}
	if n := len(tc.ratios); n >= learnAfter && n%8 == 0 || n == learnAfter {
		sorted := slices.Clone(tc.ratios)
		slices.Sort(sorted)
		tc.bpt = min(sorted[len(sorted)/20], 8) // the 5th percentile
	}
}

// learnTemplate takes the chat template's share of a prompt whose texts
// the tokenizer counted: the most per message seen, and never less than
// templateGuess, so the count stays high whatever the texts' rounding.
func (tc *tokenCounter) learnTemplate(msgs, textTokens, promptTokens int) {
	per := float64(promptTokens-textTokens) / float64(msgs+1)
	tc.mu.Lock()
	if per > max(tc.template, templateGuess) {
		tc.template = per
	}
	tc.mu.Unlock()
}

// count asks a ready endpoint's tokenizer for the prompt's tokens; false
// when no endpoint offers one (or they failed).
func (tc *tokenCounter) count(msgs []record.Message, tools []byte) (n int, textTokens int, ok bool) {
	for _, ep := range tc.pool.Endpoints() {
		if !tc.pool.Keep(ep) {
			continue
		}
		tc.mu.Lock()
		kind := tc.kinds[ep]
		tc.mu.Unlock()
		if kind == tokNone {
			continue
		}
		n, text, kind, ok := tc.ask(ep, kind, msgs, tools)
		tc.mu.Lock()
		if kind != tokUnknown {
			tc.kinds[ep] = kind
		}
		tpl := tc.template
		tc.mu.Unlock()
		if !ok {
			continue
		}
		if kind == tokChat {
			return n, 0, true
		}
		if tpl == 0 {
			tpl = templateGuess
		}
		return text + int(tpl*float64(len(msgs)+1)+0.999), text, true
	}
	return 0, 0, false
}

// ask tries ep's tokenizer of kind (tokUnknown: finds which it has).
func (tc *tokenCounter) ask(ep *fleet.Endpoint, kind tokenKind, msgs []record.Message, tools []byte) (n, text int, found tokenKind, ok bool) {
	joined := ""
	texts := make([]string, 0, len(msgs))
	wire := make([]openai.Message, len(msgs))
	for i, m := range msgs {
		t := m.Content + string(m.ToolCalls)
		texts = append(texts, t)
		joined += m.Role + "\n" + t + "\n"
		wire[i] = openai.Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	if len(tools) > 0 {
		texts = append(texts, string(tools))
		joined += string(tools)
	}
	if kind == tokUnknown || kind == tokChat || kind == tokText {
		body, _ := json.Marshal(struct {
			openai.TokenizeRequest
			Tools json.RawMessage `json:"tools,omitempty"`
		}{openai.TokenizeRequest{Model: tc.model(), Messages: wire, Content: &joined}, tools})
		status, resp := tc.post(ep, openai.PathTokenize, body)
		if status == fasthttp.StatusOK {
			if k, counted, err := openai.ParseTokenize(resp); err == nil {
				if counted {
					return k, 0, tokChat, true
				}
				return 0, k, tokText, true
			}
		}
		if kind != tokUnknown || status == 0 {
			return 0, 0, tokUnknown, false // a failure, not an answer: ask again later
		}
	}
	body, _ := json.Marshal(openai.TokenizeRequest{Model: tc.model(), Prompt: texts})
	status, resp := tc.post(ep, openai.PathTokenizeSGLang, body)
	if status == fasthttp.StatusOK {
		if k, counted, err := openai.ParseTokenize(resp); err == nil && counted {
			return 0, k, tokTexts, true
		}
	}
	if status == 0 {
		return 0, 0, tokUnknown, false
	}
	return 0, 0, tokNone, false
}

func (tc *tokenCounter) post(ep *fleet.Endpoint, path string, body []byte) (int, []byte) {
	tc.mu.Lock()
	c := tc.clients[ep]
	if c == nil {
		c = fleet.NewClient(ep.Target(), tc.apiKey, false)
		tc.clients[ep] = c
	}
	tc.mu.Unlock()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	c.Post(req, path, body)
	if err := c.DoTimeout(req, resp, tc.timeout); err != nil {
		return 0, nil
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

// close closes the tokenizers' connections.
func (tc *tokenCounter) close() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, c := range tc.clients {
		c.CloseIdle()
	}
}
