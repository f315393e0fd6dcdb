package tokens

import (
	"errors"
	"fmt"

	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// FitFlags are the flags of fitting requests into the model's context,
// the same for infer's run and its bench.
type FitFlags struct {
	FitContext      bool   `default:"true" negatable:"" help:"When the context length is known, lower each request's max_tokens to what the prompt leaves of the context, and do not send a prompt that leaves fewer than --min-answer-tokens (infer: an error record prompt_too_long; bench: the prompt is left out); a refusal for length is sent again fitted to the numbers it states."`
	ContextMargin   int    `default:"8" placeholder:"N" help:"Tokens kept free of the context beyond the prompt and the answer, for estimates' errors."`
	MinAnswerTokens int    `default:"32" placeholder:"N" help:"The fewest answer tokens worth asking for: a prompt that leaves fewer in the context is not sent."`
	Tokenizer       string `placeholder:"DIR" default:"" help:"The served model's Hugging Face folder (tokenizer.json, tokenizer_config.json): every prompt's tokens are counted exactly with its own chat template and tokenizer, where they are otherwise estimated (or asked of a server's tokenizer). Nothing is downloaded."`
}

// LoadTokenizer loads --tokenizer (nil without one); a folder that does
// not load is a usage error.
func (f FitFlags) LoadTokenizer() (*tokenizer.Tokenizer, error) {
	if f.Tokenizer == "" {
		return nil, nil
	}
	tok, err := tokenizer.Load(f.Tokenizer)
	if err != nil {
		return nil, err
	}
	if !tok.HasTemplate() {
		return nil, fmt.Errorf("%s: %w", f.Tokenizer, tokenizer.ErrNoTemplate)
	}
	return tok, nil
}

// Check refuses values the fitting cannot use.
func (f FitFlags) Check() error {
	if f.ContextMargin < 0 || f.MinAnswerTokens < 1 {
		return errors.New("--context-margin must not be negative, --min-answer-tokens at least 1")
	}
	return nil
}

// Fit is how a request fits the context.
type Fit struct {
	Max     int // max_tokens to send; 0: as requested
	Prompt  int // the prompt's tokens, counted or estimated (0: not needed)
	Exact   bool
	Text    int  // of them, the texts' alone (a text tokenizer counted)
	Refused bool // it leaves fewer than --min-answer-tokens
	// Unsure: the estimate says it does not fit, but no tokenizer counted
	// it and the estimate may be that far off: it is sent as asked, and
	// the server's refusal for length (which states the count) or its
	// prompt_tokens settle it, rather than a prompt that fits being lost.
	Unsure  bool
	Context int
}

// unsureBand is how far over the limit an estimated prompt may be and
// still be sent for the server to count: the estimate's first guess
// (2.5 bytes a token) is half of what English text averages.
const unsureBand = 2.0

// Prompt is what a request's prompt is counted from: its messages, its
// tools (canonical JSON), and Kwargs, which gives the request's
// chat_template_kwargs (nil, or nil from it: none); it is called only
// when the prompt is counted, as the kwargs cost a request body to find.
type Prompt struct {
	Msgs   []record.Message
	Tools  []byte
	Kwargs func() []byte
}

func (p Prompt) kwargs() []byte {
	if p.Kwargs == nil {
		return nil
	}
	return p.Kwargs()
}

// Fit is FitPrompt of a prompt of msgs and tools, without
// chat_template_kwargs.
func (c *Counter) Fit(fl FitFlags, ctx int, msgs []record.Message, tools []byte, requested, known int, exact bool) Fit {
	return c.FitPrompt(fl, ctx, Prompt{Msgs: msgs, Tools: tools}, requested, known, exact)
}

// FitPrompt works out the request of prompt p that asks for requested
// tokens (0: the server's default) in a context of ctx tokens (0:
// unknown, nothing fitted), given the prompt's tokens if known (exact, or
// a close figure from an earlier turn's usage). A prompt whose bound
// (Bound: no vocabulary makes it longer) leaves the room asked for is
// sent uncounted; any other is counted by a server's tokenizer where one
// offers it, so that none is sent to be refused; where none does, the
// estimate decides, and one it says may not fit but could (the estimate
// can be that far off) is sent for the server to settle (Unsure).
func (c *Counter) FitPrompt(fl FitFlags, ctx int, p Prompt, requested, known int, exact bool) Fit {
	if !fl.FitContext || ctx <= 0 || c == nil {
		return Fit{}
	}
	f := Fit{Context: ctx, Prompt: known, Exact: exact && known > 0}
	if !f.Exact && c.local != nil {
		if n, ok := c.countLocal(p); ok {
			f.Prompt, f.Exact = n, true
		}
	}
	size := SizeOf(p.Msgs, p.Tools)
	if f.Prompt <= 0 {
		f.Prompt = c.Estimate(size)
	}
	need := max(requested, fl.MinAnswerTokens)
	fits := func(n int) bool { return n+need+fl.ContextMargin < ctx }
	switch {
	case f.Exact || known > 0:
		if fits(f.Prompt) {
			return f
		}
	case fits(c.Bound(size)):
		return f
	}
	if !f.Exact {
		if n, text, ok := c.count(p); ok {
			f.Prompt, f.Text, f.Exact = n, text, true
		} else if fits(f.Prompt) {
			return f // no tokenizer: the estimate decides
		}
	}
	room := ctx - f.Prompt - fl.ContextMargin - 1
	switch {
	case room < fl.MinAnswerTokens && !f.Exact && float64(f.Prompt) <= unsureBand*float64(ctx-fl.ContextMargin-1-fl.MinAnswerTokens):
		f.Unsure = true
	case room < fl.MinAnswerTokens:
		f.Refused = true
	case requested > room:
		f.Max = room
	}
	return f
}

// Refusal says why a refused prompt does not fit.
func (f Fit) Refusal() string {
	how := "estimated"
	if f.Exact {
		how = "counted"
	}
	return fmt.Sprintf("the prompt's %d tokens (%s) leave fewer than --min-answer-tokens for an answer in the model's %d-token context", f.Prompt, how, f.Context)
}
