package quality

import (
	"fmt"
	"strconv"
	"strings"
)

// Flags are the checks' settings as command-line flags, shared by filter
// and stats so that both judge alike. Their defaults are DefaultLoop's and
// DefaultLang's (a test keeps them equal).
type Flags struct {
	LoopMinBytes       int     `default:"500" help:"Answers shorter than this many bytes are judged by the loop check's repeated tail only, not by its Gopher measures."`
	LoopLines          float64 `default:"0.5" help:"Loop: lines repeating an earlier line, as a fraction of lines, above which an answer loops (1: off)."`
	LoopLineBytes      float64 `default:"0.3" help:"Loop: bytes of those repeated lines, as a fraction of the answer (1: off)."`
	LoopParagraphs     float64 `default:"0.3" help:"Loop: paragraphs repeating an earlier paragraph, as a fraction of paragraphs (1: off)."`
	LoopParagraphBytes float64 `default:"0.3" help:"Loop: bytes of those repeated paragraphs, as a fraction of the answer (1: off)."`
	LoopTopNgram       string  `default:"2=0.2,3=0.18,4=0.16" help:"Loop: for n=2..4, bytes of the most frequent word n-gram times its count, as a fraction of the answer (an n left out, or given 1, is off)."`
	LoopDupNgram       string  `default:"5=0.4,6=0.35,7=0.32,8=0.3,9=0.28,10=0.26" help:"Loop: for n=5..10, bytes of words inside repeated word n-grams, as a fraction of the answer (an n left out, or given 1, is off)."`
	LoopTailCopies     int     `default:"4" help:"Loop: an answer ending in at least this many copies of one span loops (0: no tail check)."`
	LoopTailBytes      int     `default:"100" help:"Loop: ... when those copies cover at least this many bytes."`
	LangMinChars       int     `default:"40" help:"Lang: prompts and answers with fewer letters than this (code blocks aside) are not judged."`
	Reasoning          string  `default:"parsed" placeholder:"MODE" help:"Where answers' reasoning is: parsed (the server's reasoning parser took it out: thinking markers in the text are residue) or inline (the parser was off: the text opens with one think block, checked by think_block, and markers after it are residue). For a mixture's arms, ARM=MODE, e.g. parsed,think=inline."`
}

// Config builds the configuration of checks with these settings.
func (f *Flags) Config(checks []string) (Config, error) {
	loop := LoopConfig{
		MinBytes: f.LoopMinBytes, DupLines: f.LoopLines, DupLineBytes: f.LoopLineBytes,
		DupParagraphs: f.LoopParagraphs, DupParagraphBytes: f.LoopParagraphBytes,
		TailCopies: f.LoopTailCopies, TailBytes: f.LoopTailBytes,
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"--loop-lines", f.LoopLines}, {"--loop-line-bytes", f.LoopLineBytes},
		{"--loop-paragraphs", f.LoopParagraphs}, {"--loop-paragraph-bytes", f.LoopParagraphBytes}} {
		if v.x <= 0 {
			return Config{}, fmt.Errorf("%s must be a fraction above 0 (1 turns it off), not %g", v.name, v.x)
		}
	}
	if f.LoopMinBytes < 0 || f.LoopTailCopies < 0 || f.LoopTailBytes < 0 || f.LangMinChars < 0 {
		return Config{}, fmt.Errorf("--loop-min-bytes, --loop-tail-copies, --loop-tail-bytes and --lang-min-chars must not be negative")
	}
	if f.LoopTailCopies == 1 {
		return Config{}, fmt.Errorf("--loop-tail-copies 1 would call every answer a loop: use 0 to turn the tail check off, or 2 and more")
	}
	if err := parseOrders("--loop-top-ngram", f.LoopTopNgram, 2, 4, loop.TopNgram[:]); err != nil {
		return Config{}, err
	}
	if err := parseOrders("--loop-dup-ngram", f.LoopDupNgram, 5, 10, loop.DupNgram[:]); err != nil {
		return Config{}, err
	}
	modes, err := ParseReasoning(f.Reasoning)
	if err != nil {
		return Config{}, err
	}
	return Config{Checks: checks, Loop: loop, Lang: LangConfig{MinChars: f.LangMinChars, Sample: DefaultLang.Sample}, Reasoning: modes}, nil
}

// parseOrders reads "n=fraction,..." for n in [lo, hi] into dst; orders
// not named are off.
func parseOrders(flag, list string, lo, hi int, dst []float64) error {
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ns, vs, ok := strings.Cut(part, "=")
		n, err1 := strconv.Atoi(strings.TrimSpace(ns))
		v, err2 := strconv.ParseFloat(strings.TrimSpace(vs), 64)
		if !ok || err1 != nil || err2 != nil || n < lo || n > hi || v <= 0 {
			return fmt.Errorf("%s: %q is not n=fraction with n from %d to %d and a fraction above 0", flag, part, lo, hi)
		}
		dst[n] = v
	}
	return nil
}
