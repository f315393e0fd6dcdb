package llmsim

import (
	"encoding/binary"
	"math"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/record"
)

// Message is one chat turn as the simulator reads it: only role and text
// content matter to it.
type Message struct {
	Role    string
	Content string
}

// Prompt is what a request asks the model to continue: chat messages (for
// /v1/chat/completions), or Text (a /v1/completions prompt or /generate
// text), or InputIDs (/generate with token ids).
type Prompt struct {
	Messages []Message
	Text     string
	InputIDs []int
	// history holds, message by message, the reasoning and tool calls of
	// the assistant turns, which a chat template renders (tokenizer.go).
	history []turnExtra
	// template is the conversation as a model's own chat template reads
	// it (realtok.go).
	template templateInput
}

// AppendCanonical appends the prompt's canonical form, the bytes its
// digest and its simulated answer are derived from. Chat messages and text
// take tokenmill's canonical prompt form (record.Prompt.AppendCanonical of
// the same roles and contents, or of the completion text), so a test can
// compute the digest of a prompt record; token ids take 'I', their count
// and the ids, as uvarints.
func (p *Prompt) AppendCanonical(dst []byte) []byte {
	switch {
	case len(p.Messages) > 0:
		rp := record.Prompt{Messages: make([]record.Message, len(p.Messages))}
		for i, m := range p.Messages {
			rp.Messages[i] = record.Message{Role: m.Role, Content: m.Content}
		}
		return rp.AppendCanonical(dst)
	case len(p.InputIDs) > 0:
		dst = append(dst, 'I')
		dst = binary.AppendUvarint(dst, uint64(len(p.InputIDs)))
		for _, id := range p.InputIDs {
			dst = binary.AppendUvarint(dst, uint64(id))
		}
		return dst
	}
	rp := record.Prompt{Prompt: &p.Text}
	return rp.AppendCanonical(dst)
}

// PromptDigest is the first token of every simulated answer to p: the
// xxh3-64 hash of p's canonical form (see AppendCanonical) as 16 lower-case
// hex digits. A client test checks that each completion text starts with
// PromptDigest of the prompt it was sent for.
func PromptDigest(p Prompt) string {
	return string(appendHex64(nil, xxh3.Hash(p.AppendCanonical(nil))))
}

func appendHex64(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&0xf])
	}
	return dst
}

// Token estimation. The simulator has no tokenizer; it counts about four
// bytes of UTF-8 per token (English text runs 4-4.5 characters per token,
// CJK about one character of three bytes per token), at least one token for
// any non-empty text. A chat prompt costs, on top of its contents, the
// chat template's markers: 4 tokens per message (<|im_start|>role\n ...
// <|im_end|>\n) and 3 for the assistant turn that opens the answer.
const (
	bytesPerToken         = 4
	chatTokensPerMessage  = 4
	chatTokensForGenerate = 3
)

// TextTokens estimates the tokens of s.
func TextTokens(s string) int {
	if s == "" {
		return 0
	}
	return (len(s) + bytesPerToken - 1) / bytesPerToken
}

// PromptTokens estimates the prompt tokens of p.
func PromptTokens(p *Prompt) int {
	switch {
	case len(p.Messages) > 0:
		n := chatTokensForGenerate
		for _, m := range p.Messages {
			n += chatTokensPerMessage + TextTokens(m.Content)
		}
		return n
	case len(p.InputIDs) > 0:
		return len(p.InputIDs)
	}
	return TextTokens(p.Text)
}

// Output lengths are lognormal, the shape of real instruction-following
// answers: median 600 tokens, mean 1,000 (sigma = sqrt(2 ln(1000/600))),
// about 0.5% beyond 8,000 tokens.
const (
	lengthMedian = 600.0
	lengthSigma  = 1.0107676525947897
)

// NaturalLength is how many tokens the simulated model wants to write for
// the prompt with the given digest hash before it stops on its own; choice
// tells apart the n answers of one request (0 for the first).
func NaturalLength(promptHash uint64, choice int) int {
	u1 := unitFloat(mix64(promptHash ^ uint64(choice)*0x9e3779b97f4a7c15))
	u2 := unitFloat(mix64(promptHash + 0x632be59bd9b4e019 + uint64(choice)))
	// Box-Muller: a standard normal from two uniforms in (0, 1].
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	n := int(math.Round(lengthMedian * math.Exp(lengthSigma*z)))
	return max(n, 1)
}

// mix64 is splitmix64's finalizer: a fast bijective scrambler.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unitFloat maps x to (0, 1].
func unitFloat(x uint64) float64 {
	return (float64(x>>11) + 1) / (1 << 53)
}

// vocabulary is what the simulated model writes after the digest: common
// English words, so texts look and compress like prose.
var vocabulary = [...]string{
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it",
	"as", "was", "with", "be", "by", "on", "not", "he", "this", "are",
	"or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
	"you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
	"been", "if", "more", "when", "will", "would", "who", "so", "no", "she",
	"other", "its", "may", "these", "what", "them", "than", "some", "him", "time",
	"into", "only", "do", "out", "first", "also", "new", "could", "because", "any",
	"people", "two", "many", "then", "most", "like", "over", "such", "our", "even",
	"well", "made", "after", "must", "should", "much", "way", "through", "where", "years",
	"work", "system", "data", "model", "answer", "example", "value", "result", "problem", "step",
	"first", "second", "next", "each", "every", "number", "function", "method", "case", "part",
	"point", "order", "process", "form", "level", "question", "language", "world", "between", "both",
	"under", "while", "before", "without", "during", "since", "however", "therefore", "because", "although",
	"simple", "important", "different", "possible", "general", "specific", "clear", "common", "small", "large",
}

// appendToken appends the text of token k (0-based) of an answer whose
// first token is digest: the digest itself, then word k.
func appendToken(dst []byte, digest string, h uint64, k int) []byte {
	if k == 0 {
		return append(dst, digest...)
	}
	return appendWord(dst, h, k)
}

// appendWord appends word k of the text seeded h: a space and a word of
// the vocabulary, with a full stop every so often so the text reads as
// sentences.
func appendWord(dst []byte, h uint64, k int) []byte {
	r := mix64(h + uint64(k)*0x9e3779b97f4a7c15)
	dst = append(dst, ' ')
	dst = append(dst, vocabulary[r%uint64(len(vocabulary))]...)
	if (r>>32)%13 == 0 {
		dst = append(dst, '.')
	}
	return dst
}

// appendTokens appends tokens [from, to) of the answer.
func appendTokens(dst []byte, digest string, h uint64, from, to int) []byte {
	for k := from; k < to; k++ {
		dst = appendToken(dst, digest, h, k)
	}
	return dst
}
