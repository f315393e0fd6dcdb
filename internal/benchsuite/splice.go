package benchsuite

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// docTitle opens a report written from nothing.
const docTitle = "# Benchmarks"

// Splice puts a section (Markdown whose first line is its "## " heading)
// into doc, the one way a part of BENCHMARKS.md is replaced: in place of
// the part under the same heading, which runs to the next "#" or "##"
// heading outside a code fence; else before the first part whose heading
// comes after it in order; else at the end. Parts are separated by one
// blank line. A doc that holds the heading twice is refused: which of the
// two is meant cannot be told.
func Splice(doc, section []byte, order []string) ([]byte, error) {
	sec := strings.TrimRight(string(section), "\n")
	heading, _, _ := strings.Cut(sec, "\n")
	if !strings.HasPrefix(heading, "## ") {
		return nil, fmt.Errorf("a section starts with its \"## \" heading, not %q", heading)
	}
	heading = strings.TrimRight(heading, " ")
	if len(bytes.TrimSpace(doc)) == 0 {
		doc = []byte(docTitle + "\n")
	}
	parts := splitParts(string(doc))
	at := -1
	for i, p := range parts {
		if p.heading == heading {
			if at >= 0 {
				return nil, fmt.Errorf("the report holds %q twice", heading)
			}
			at = i
		}
	}
	if at >= 0 {
		parts[at].text = sec
	} else {
		at = len(parts)
		if k := slices.Index(order, heading); k >= 0 {
			for i, p := range parts {
				if slices.Contains(order[k+1:], p.heading) {
					at = i
					break
				}
			}
		}
		parts = slices.Insert(parts, at, part{heading: heading, text: sec})
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(p.text)
	}
	b.WriteString("\n")
	return []byte(b.String()), nil
}

// part is the text under one heading (the preamble has none), without its
// trailing blank lines.
type part struct {
	heading string
	text    string
}

// splitParts cuts a Markdown document at its "#" and "##" headings; a line
// inside a code fence is never a heading.
func splitParts(doc string) []part {
	var parts []part
	var cur []string
	heading := ""
	flush := func() {
		text := strings.TrimRight(strings.Join(cur, "\n"), "\n ")
		if heading != "" || strings.TrimSpace(text) != "" {
			parts = append(parts, part{heading: heading, text: text})
		}
	}
	fenced := false
	for _, line := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if !fenced && (strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "# ")) {
			flush()
			cur, heading = nil, strings.TrimRight(line, " ")
		}
		cur = append(cur, line)
	}
	flush()
	return parts
}
