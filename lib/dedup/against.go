package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// Decontamination (--against): a prompt that shares a run of n words with
// any prompt or answer of a benchmark file is dropped, so that a model is
// never trained on what it is evaluated on.
//
// Texts are compared as words of their canonical form: the text
// normalized as --normalize aggressive does (Unicode NFKC, lowercase,
// punctuation removed, white space collapsed), split at white space. Each
// message of a prompt (every role, the top-level system and a completion
// prompt) is a text of its own; an n-gram never spans two of them. A text
// of fewer than n words is one shingle of all its words: a short prompt
// message matches a benchmark text of exactly its words (such as an
// MT-Bench follow-up turn), never a part of a longer one.
//
// The benchmark n-grams are held twice: their 64-bit hashes in a bloom
// filter, which answers the lookups of clean prompts (nearly all of them)
// from a few bits, and in an exact table from hash to the places they
// occur. A filter hit is confirmed against the benchmark's own words, so a
// false positive of the filter, or a collision of hashes, costs a lookup
// and never drops a prompt.

// ReasonContaminated is the reject reason of a prompt dropped by --against.
const ReasonContaminated = "contaminated"

// DefaultAgainstNgram is --against-ngram's default: 13 words, the usual
// length in decontamination of training sets.
const DefaultAgainstNgram = 13

// benchFields are the fields a benchmark record's texts are read from: the
// layouts extract reads (record.Fields) and the answer fields of the
// usual evaluation sets.
type benchFields struct {
	record.Fields
	Answer            json.RawMessage `json:"answer"`             // GSM8K, MATH
	CanonicalSolution json.RawMessage `json:"canonical_solution"` // HumanEval
	Code              json.RawMessage `json:"code"`               // MBPP
	Reference         json.RawMessage `json:"reference"`          // MT-Bench's reference answers
}

// texts lists the fields whose values are a benchmark's prompts and
// answers. Ids, roles, categories, tool schemas and media are not text.
func (f *benchFields) texts() []json.RawMessage {
	return []json.RawMessage{f.Conversation, f.LMSYS, f.Messages, f.System, f.SystemPrompt, f.SystemMessage,
		f.Instruction, f.Input, f.Context, f.Output, f.Response, f.History, f.Turns, f.Prompt, f.Question,
		f.Text, f.Query, f.Problem, f.Solution, f.ToyInput, f.ToyOutput, f.Data, f.Chosen, f.Rejected,
		f.ChosenMessages, f.RejectedMessages, f.Preferred, f.NonPreferred, f.Body,
		f.Answer, f.CanonicalSolution, f.Code, f.Reference}
}

// textNode holds the fields of an object inside a text field that carry
// text: a turn's content or value (or a content part's text), a question
// and answer pair, an OpenAssistant tree's replies, a request body's
// messages and prompt.
type textNode struct {
	Content  json.RawMessage `json:"content"`
	Value    json.RawMessage `json:"value"`
	Text     json.RawMessage `json:"text"`
	Input    json.RawMessage `json:"input"`
	Output   json.RawMessage `json:"output"`
	System   json.RawMessage `json:"system"`
	Prompt   json.RawMessage `json:"prompt"`
	Messages json.RawMessage `json:"messages"`
	Replies  json.RawMessage `json:"replies"`
}

// appendTexts appends the JSON string tokens of raw: a string, the texts
// of each element of a list, the text fields of an object.
func appendTexts(dst []json.RawMessage, raw json.RawMessage, depth int) ([]json.RawMessage, error) {
	if !record.Present(raw) {
		return dst, nil
	}
	if depth > record.MaxDepth {
		return nil, errors.New("nested too deeply")
	}
	switch raw[0] {
	case '"':
		return append(dst, raw), nil
	case '[':
		var list []json.RawMessage
		if err := record.Decode(raw, &list); err != nil {
			return nil, err
		}
		for _, el := range list {
			var err error
			if dst, err = appendTexts(dst, el, depth+1); err != nil {
				return nil, err
			}
		}
	case '{':
		var n textNode
		if err := record.Decode(raw, &n); err != nil {
			return nil, err
		}
		for _, v := range [...]json.RawMessage{n.Content, n.Value, n.Text, n.Input, n.Output, n.System, n.Prompt, n.Messages, n.Replies} {
			var err error
			if dst, err = appendTexts(dst, v, depth+1); err != nil {
				return nil, err
			}
		}
	}
	return dst, nil // numbers and booleans carry no words
}

// gramRef is where a shingle occurs in the benchmarks: a text and the
// byte range of the shingle in the text's canonical form.
type gramRef struct {
	text       int32
	start, end int32
}

// benchText is one canonical benchmark text and where it was read.
type benchText struct {
	canon string
	file  int32
	line  int64
}

// Benchmarks is the n-gram index of the --against files. It is read-only
// once built, and shared by every worker.
type Benchmarks struct {
	n      int
	files  []string
	texts  []benchText
	filter *bloom.BloomFilter
	grams  map[uint64][]gramRef
	// Records and Short count what was read: benchmark records, and texts
	// shorter than n words (held whole).
	Records, Short int
}

// Contamination is the benchmark text a prompt was found to share an
// n-gram with.
type Contamination struct {
	File  string // the --against file
	Line  int64  // its record
	Ngram string // the shared words, canonical
}

// LoadBenchmarks reads the benchmark files (any layout extract reads, in
// any input format but stdin) into an index of their n-grams of n words;
// fp is the bloom filter's false-positive rate. Every problem (a file that
// cannot be read, a record that is not JSON or has no layout extract
// reads, a file without a text) is a usage error: a benchmark read in part
// would let its other questions into the training set unseen.
func LoadBenchmarks(ctx context.Context, files []string, n int, fp float64) (*Benchmarks, error) {
	b := &Benchmarks{n: n, files: files, grams: map[uint64][]gramRef{}}
	var (
		f       benchFields
		texts   []json.RawMessage
		raw     []byte
		canon   []byte
		scratch []byte
		starts  []int
	)
	for fi, name := range files {
		if name == "-" || name == "" {
			return nil, cli.Usagef("--against needs a file: stdin carries the records")
		}
		in := jsonl.NewReader(ctx, nil, []string{name}, nil, jsonl.Options{CSV: &jsonl.CSVOptions{}})
		before := len(b.texts)
		for {
			rec, err := in.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				in.Close()
				if ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				return nil, cli.Usagef("--against %v", err)
			}
			f = benchFields{}
			if data := bytes.TrimSpace(rec.Data); len(data) > 0 && data[0] == '[' && json.Valid(data) {
				f.Messages = data // a line that is a list of messages (xtuner's openai layout)
			} else if err := record.Decode(rec.Data, &f); err != nil {
				in.Close()
				return nil, cli.Usagef("--against %s:%d: not a JSON object: %s", name, rec.Line, cli.Plain(err.Error()))
			}
			if record.DetectLayout(&f.Fields) == "" {
				in.Close()
				return nil, cli.Usagef("--against %s:%d: no layout extract reads (no prompt, question, instruction, turns, messages or conversations field)", name, rec.Line)
			}
			if texts, err = appendTextFields(texts[:0], &f); err != nil {
				in.Close()
				return nil, cli.Usagef("--against %s:%d: %s", name, rec.Line, cli.Plain(err.Error()))
			}
			b.Records++
			for _, tok := range texts {
				raw = record.AppendUnquoted(raw[:0], tok)
				canon, scratch = Aggressive.Append(canon[:0], unsafe.String(unsafe.SliceData(raw), len(raw)), scratch)
				if len(canon) == 0 {
					continue
				}
				b.add(string(canon), int32(fi), rec.Line, &starts)
			}
		}
		if err := in.Close(); err != nil {
			return nil, cli.Usagef("--against %s: %v", name, err)
		}
		if len(b.texts) == before {
			return nil, cli.Usagef("--against %s: no benchmark text in it", name)
		}
	}
	b.seal(fp)
	return b, nil
}

// seal builds the bloom filter of the shingles added, at rate fp.
func (b *Benchmarks) seal(fp float64) {
	b.filter = bloom.NewWithEstimates(uint(max(len(b.grams), 1)), fp)
	var key [8]byte
	for h := range b.grams {
		binary.LittleEndian.PutUint64(key[:], h)
		b.filter.Add(key[:])
	}
}

func appendTextFields(dst []json.RawMessage, f *benchFields) ([]json.RawMessage, error) {
	for _, raw := range f.texts() {
		var err error
		if dst, err = appendTexts(dst, raw, 1); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// add indexes one canonical text's shingles.
func (b *Benchmarks) add(canon string, file int32, line int64, starts *[]int) {
	ti := int32(len(b.texts))
	b.texts = append(b.texts, benchText{canon: canon, file: file, line: line})
	*starts = wordStarts((*starts)[:0], canon)
	if len(*starts) < b.n {
		b.Short++
	}
	eachShingle(canon, *starts, b.n, func(start, end int) bool {
		h := xxh3.HashString(canon[start:end])
		b.grams[h] = append(b.grams[h], gramRef{text: ti, start: int32(start), end: int32(end)})
		return true
	})
}

// wordStarts appends the byte offset of every word of a canonical text,
// whose words are separated by exactly one space.
func wordStarts(dst []int, canon string) []int {
	if canon == "" {
		return dst
	}
	dst = append(dst, 0)
	for i := 0; i < len(canon); i++ {
		if canon[i] == ' ' {
			dst = append(dst, i+1)
		}
	}
	return dst
}

// eachShingle calls fn with the byte range of each n-word shingle of a
// canonical text (a contiguous range: the words' single spaces are part
// of it), or of the whole text when it has fewer than n words, until fn
// returns false.
func eachShingle(canon string, starts []int, n int, fn func(start, end int) bool) {
	if len(starts) == 0 {
		return
	}
	if len(starts) < n {
		fn(0, len(canon))
		return
	}
	for i := 0; i+n <= len(starts); i++ {
		end := len(canon)
		if i+n < len(starts) {
			end = starts[i+n] - 1
		}
		if !fn(starts[i], end) {
			return
		}
	}
}

// Grams is the number of distinct n-gram hashes held.
func (b *Benchmarks) Grams() int { return len(b.grams) }

// FilterBytes is the bloom filter's size.
func (b *Benchmarks) FilterBytes() int { return int(b.filter.Cap() / 8) }

// FalsePositiveRate is the bloom filter's false-positive rate at the
// n-grams it holds: (1 - e^(-k n / m))^k.
func (b *Benchmarks) FalsePositiveRate() float64 {
	k, m := float64(b.filter.K()), float64(b.filter.Cap())
	return math.Pow(-math.Expm1(-k*float64(len(b.grams))/m), k)
}

// find returns the benchmark text one shingle of a prompt occurs in, or
// nil. overruled counts the filter's hits that the exact check refuted.
func (b *Benchmarks) find(shingle string, overruled *int64) *Contamination {
	var key [8]byte
	h := xxh3.HashString(shingle)
	binary.LittleEndian.PutUint64(key[:], h)
	if !b.filter.Test(key[:]) {
		return nil
	}
	for _, ref := range b.grams[h] {
		if t := &b.texts[ref.text]; t.canon[ref.start:ref.end] == shingle {
			return &Contamination{File: b.files[t.file], Line: t.line, Ngram: shingle}
		}
	}
	*overruled++
	return nil
}

// againstChecker checks prompts against the benchmarks; one per worker.
type againstChecker struct {
	b         *Benchmarks
	prompt    rawPrompt
	raw       []byte
	canon     []byte
	scratch   []byte
	starts    []int
	overruled int64 // filter hits the exact check refuted
}

func newAgainstChecker(b *Benchmarks) *againstChecker { return &againstChecker{b: b} }

// check returns the contamination of the record line, nil if it is clean,
// or a *KeyError when it has no prompt to check.
func (c *againstChecker) check(line []byte) (*Contamination, error) {
	clear(c.prompt.Messages[:cap(c.prompt.Messages)])
	c.prompt = rawPrompt{Messages: c.prompt.Messages[:0]}
	if err := record.Decode(line, &c.prompt); err != nil {
		return nil, decodeError(line, err)
	}
	if len(c.prompt.Messages) == 0 && !record.Present(c.prompt.Prompt) {
		return nil, &KeyError{ReasonNoKey, "no messages or prompt to check against the benchmarks"}
	}
	found, ok := c.text(c.prompt.System)
	if !ok {
		return nil, &KeyError{ReasonBadPrompt, "system is not a string"}
	}
	for i := 0; found == nil && i < len(c.prompt.Messages); i++ {
		if found, ok = c.text(c.prompt.Messages[i].Content); !ok {
			return nil, &KeyError{ReasonBadPrompt, fmt.Sprintf("message %d: content is not a string", i+1)}
		}
	}
	if found == nil {
		if found, ok = c.text(c.prompt.Prompt); !ok {
			return nil, &KeyError{ReasonBadPrompt, "prompt is not a string"}
		}
	}
	return found, nil
}

// text checks one text of the prompt, a raw JSON string or null; ok is
// false when it is neither.
func (c *againstChecker) text(tok json.RawMessage) (found *Contamination, ok bool) {
	if !record.Present(tok) {
		return nil, true
	}
	if tok[0] != '"' {
		return nil, false
	}
	c.raw = record.AppendUnquoted(c.raw[:0], tok)
	c.canon, c.scratch = Aggressive.Append(c.canon[:0], unsafe.String(unsafe.SliceData(c.raw), len(c.raw)), c.scratch)
	canon := unsafe.String(unsafe.SliceData(c.canon), len(c.canon))
	c.starts = wordStarts(c.starts[:0], canon)
	eachShingle(canon, c.starts, c.b.n, func(start, end int) bool {
		if found = c.b.find(canon[start:end], &c.overruled); found != nil {
			found.Ngram = string([]byte(found.Ngram)) // canon is reused
		}
		return found == nil
	})
	return found, true
}

// againstBatch checks every keyed record of b against the benchmarks.
func againstBatch(c *againstChecker, b *jsonl.Batch[key]) {
	for i := range b.Items {
		it := &b.Items[i]
		if it.Err != nil {
			continue
		}
		it.V.contam, it.Err = c.check(it.Data)
	}
}

// againstReject is the reject field of a contaminated prompt: where it
// was read, and the benchmark record and words it shares.
type againstReject struct {
	Reason      string `json:"reason"`
	Detail      string `json:"detail"`
	File        string `json:"file"`
	Line        int64  `json:"line"`
	Against     string `json:"against"`
	AgainstLine int64  `json:"against_line"`
	Ngram       string `json:"ngram"`
}

// contaminated counts a prompt dropped by --against, reports the first
// few on stderr and writes it to the rejects file, if any, with its
// reject field. It is not a bad record: the exit code stays 0.
func (s *sink) contaminated(rec jsonl.RawLine, found *Contamination) error {
	n := s.n.contaminated.Add(1)
	detail := fmt.Sprintf("shares %q with %s:%d", found.Ngram, found.File, found.Line)
	if n <= reportContaminated && s.logf != nil {
		msg := fmt.Sprintf("%s:%d: %s: %s", rec.File, rec.Line, ReasonContaminated, detail)
		if n == reportContaminated {
			msg += " (further contaminated prompts are counted, not shown)"
		}
		s.logf("%s", cli.Plain(msg))
	}
	if s.rejectsOut == nil {
		return nil
	}
	value, err := json.Marshal(againstReject{Reason: ReasonContaminated, Detail: detail, File: rec.File, Line: rec.Line,
		Against: found.File, AgainstLine: found.Line, Ngram: found.Ngram})
	if err != nil {
		return err
	}
	if s.buf, err = record.AppendField(s.buf[:0], rec.Data, "reject", value); err != nil {
		return err
	}
	if err := s.rejectsOut.Write(s.buf); err != nil {
		return fmt.Errorf("writing %s: %w", s.rejectsOut.Path(), err)
	}
	return nil
}

// reportContaminated is how many contaminated prompts are described on
// stderr; all are counted, and all go to --rejects.
const reportContaminated = 5

// overruled is the number of bloom filter hits the exact check refuted.
func overruled(checkers []*againstChecker) int64 {
	var n int64
	for _, c := range checkers {
		n += c.overruled
	}
	return n
}
