package quality

import "fmt"

// What the tests ask of the checker and a run does not: the full measures
// of a text, to hold the loop check, which stops at the first measure over
// its threshold, to every measure computed and compared; whether a check
// is on.

// Enabled reports whether the check is on.
func (c *Checker) Enabled(check string) bool {
	i := checkIndex(check)
	return i >= 0 && c.enabled[i]
}

// MeasureLoop computes every loop measure of text (no early stop).
func MeasureLoop(text string, s *Scratch) LoopMeasures {
	if s == nil {
		s = &Scratch{}
	}
	var m LoopMeasures
	m.TailCopies, m.TailSpan, m.TailBytes = repeatedTail(text)
	if len(text) == 0 {
		return m
	}
	total := float64(len(text))
	var lb, pb float64
	m.DupLines, lb, m.DupParagraphs, pb = s.lineMeasures(text)
	m.DupLineBytes, m.DupParagraphBytes = lb/total, pb/total
	s.hashWords(text)
	for n := 2; n <= 10 && len(s.starts)-1 >= n; n++ {
		if n <= 4 {
			top, _, _ := s.topNgram(n)
			m.TopNgram[n] = top / total
		} else {
			m.DupNgram[n] = s.dupNgram(n) / total
		}
	}
	return m
}

// Exceeded lists the measures of m over the thresholds of cfg, in the
// order of MeasureNames. Short texts (cfg.MinBytes) are judged by the tail
// alone; textLen is the length of the measured text.
func (m *LoopMeasures) Exceeded(cfg *LoopConfig, textLen int) []string {
	var out []string
	if cfg.TailCopies > 0 && m.TailCopies >= cfg.TailCopies && m.TailBytes >= cfg.TailBytes {
		out = append(out, MeasureTail)
	}
	if textLen < cfg.MinBytes {
		return out
	}
	for _, c := range []struct {
		name      string
		v, thresh float64
	}{
		{MeasureDupLines, m.DupLines, cfg.DupLines},
		{MeasureDupLineBytes, m.DupLineBytes, cfg.DupLineBytes},
		{MeasureDupParagraphs, m.DupParagraphs, cfg.DupParagraphs},
		{MeasureDupParagraphBytes, m.DupParagraphBytes, cfg.DupParagraphBytes},
	} {
		if over(c.v, c.thresh) {
			out = append(out, c.name)
		}
	}
	for n := 2; n <= 4; n++ {
		if over(m.TopNgram[n], cfg.TopNgram[n]) {
			out = append(out, fmt.Sprintf("top_%dgram", n))
		}
	}
	for n := 5; n <= 10; n++ {
		if over(m.DupNgram[n], cfg.DupNgram[n]) {
			out = append(out, fmt.Sprintf("dup_%dgram", n))
		}
	}
	return out
}
