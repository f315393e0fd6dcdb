package openai

import (
	"regexp"
	"strconv"
)

// ContextLimit is what a server's refusal of a request too long for the
// model's context says: the context length, the prompt's tokens and the
// max_tokens asked for, each 0 when the message does not say.
type ContextLimit struct {
	Context    int
	Prompt     int
	AtLeast    bool // Prompt is a lower bound: the server stopped counting there
	Completion int
}

// The wordings, each from the server's source (testdata/llmsim pins them
// as llmsim sends them):
var contextWordings = []struct {
	re *regexp.Regexp
	// fields names what each group is: C context, P prompt, L prompt at
	// least, M completion, T total (not kept).
	fields string
}{
	// SGLang tokenizer_manager.py _validate_one_request: input >= context_len.
	{regexp.MustCompile(`The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)`), "PC"},
	// SGLang: input + max_new_tokens > context_len.
	{regexp.MustCompile(`maximum context length of (\d+) tokens\. You requested a total of (\d+) tokens: (\d+) tokens from the input messages and (\d+) tokens for the completion`), "CTPM"},
	// vLLM 0.10.1+ (renderers/params.py _token_len_check): the prompt is
	// tokenized only up to the room left, hence "at least".
	{regexp.MustCompile(`maximum context length is (\d+) tokens\. However, you requested (\d+) output tokens and your prompt contains at least (\d+) input tokens`), "CML"},
	// vLLM up to 0.10.0 (serving_engine.py _validate_input) and OpenAI,
	// with max_tokens.
	{regexp.MustCompile(`maximum context length is (\d+) tokens\. However, you requested (\d+) tokens \((\d+) in the messages, (\d+) in the completion\)`), "CTPM"},
	// vLLM up to 0.10.0 without max_tokens.
	{regexp.MustCompile(`maximum context length is (\d+) tokens\. However, you requested (\d+) tokens in the messages`), "CP"},
	// OpenAI context_length_exceeded without max_tokens.
	{regexp.MustCompile(`maximum context length is (\d+) tokens\. However, your messages resulted in (\d+) tokens`), "CP"},
	// vLLM 0.10.1+ (TokenizeParams.__post_init__): max_tokens alone too large.
	{regexp.MustCompile(`max_tokens=(\d+)\s*cannot be greater than max_model_len=(?:max_total_tokens=)?(\d+)`), "MC"},
	// llama.cpp server-context.cpp: a prompt of n_ctx tokens or more.
	{regexp.MustCompile(`request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)`), "PC"},
}

// ParseContextError reads a refusal for length from the message of an
// error body (ErrorMessage's), whichever server's wording it has; false
// when the message is not one.
func ParseContextError(msg string) (ContextLimit, bool) {
	for _, w := range contextWordings {
		m := w.re.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		var l ContextLimit
		for i, f := range w.fields {
			n, err := strconv.Atoi(m[i+1])
			if err != nil {
				return ContextLimit{}, false
			}
			switch f {
			case 'C':
				l.Context = n
			case 'P':
				l.Prompt = n
			case 'L':
				l.Prompt, l.AtLeast = n, true
			case 'M':
				l.Completion = n
			}
		}
		return l, true
	}
	return ContextLimit{}, false
}
