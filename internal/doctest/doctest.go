// Package doctest reads the shell blocks of a Markdown document (README.md,
// GUIDE.md) and what they are shown to print, so that a test can run them
// as printed and hold their output to what the document says.
//
// A fenced block's info string says what it is:
//
//	sh        a command sequence the test runs, in order with the others, in one shell
//	sh long   the same, run only in the long test tier (it takes minutes)
//	sh gpu    needs GPUs, real servers or a cluster: never run, the only kind skipped
//	sh build  the build; the test builds the same tools itself and checks the text
//	sh suite  the test suite's command; the test checks that CI runs exactly it
//	output    lines the sh block before it prints (stdout and stderr), in any
//	          order, other lines between; "..." stands for any text within a
//	          line, and runs of white space compare as one space
//	json, yaml  data, not run
//
// Any other info string, an unfenced (indented) code block, and an output
// block with no sh block before it are errors: a command cannot escape the
// test by the way it is written.
//
// The fleet's ports are written as real ones (127.0.0.1:30000-30007,
// --port 30040): Remap moves every port 30000-30999 written after ':' or
// '-' or --port by one offset, so that a test can run the document on free
// ports while the document shows the usual ones.
package doctest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kinds of block, from the info string.
const (
	Run    = "sh"
	Long   = "sh long"
	GPU    = "sh gpu"
	Build  = "sh build"
	Suite  = "sh suite"
	Output = "output"
)

var data = []string{"json", "yaml"}

// Block is one fenced block of a document.
type Block struct {
	Kind string // the info string
	Text string // its lines, without the fences
	Line int    // the line of its opening fence, from 1
	// Shown is the text of the output block that follows an sh block, if any.
	Shown string
}

// Parse returns the shell blocks of doc (sh of every kind), each with the
// output block shown after it, in order.
func Parse(doc string) ([]Block, error) {
	lines := strings.Split(doc, "\n")
	var blocks []Block
	prevBlank := true
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" && prevBlank && !inList(lines, i) {
			return nil, fmt.Errorf("line %d: an indented code block: fence it (```sh, ```sh gpu, ```output) so that the test sees it", i+1)
		}
		prevBlank = strings.TrimSpace(line) == ""
		if !strings.HasPrefix(line, "```") {
			continue
		}
		info := strings.Join(strings.Fields(strings.TrimPrefix(line, "```")), " ")
		start := i + 1
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: a fence that is never closed", start)
		}
		text := strings.Join(body, "\n")
		switch info {
		case Run, Long, GPU, Build, Suite:
			blocks = append(blocks, Block{Kind: info, Text: text, Line: start})
		case Output:
			if len(blocks) == 0 || blocks[len(blocks)-1].Kind == GPU || blocks[len(blocks)-1].Shown != "" {
				return nil, fmt.Errorf("line %d: an output block with no sh block of its own before it", start)
			}
			blocks[len(blocks)-1].Shown = text
		default:
			if !contains(data, info) {
				return nil, fmt.Errorf("line %d: a block of kind %q: say sh, sh long, sh gpu, sh build, sh suite or output (json and yaml are data)", start, info)
			}
		}
		prevBlank = true
	}
	return blocks, nil
}

// inList reports whether the indented line i continues a list item: the
// nearest unindented line above it starts one ("- ", "1. ").
func inList(lines []string, i int) bool {
	for j := i - 1; j >= 0; j-- {
		l := lines[j]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if strings.HasPrefix(l, " ") {
			continue
		}
		return strings.HasPrefix(l, "- ") || numbered.MatchString(l)
	}
	return false
}

var numbered = regexp.MustCompile(`^\d+\. `)

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Missing returns the lines of shown (an output block) that printed does
// not hold: each shown line must match a printed line of its own.
func Missing(shown, printed string) []string {
	var have []string
	for _, l := range strings.Split(printed, "\n") {
		have = append(have, normalize(l))
	}
	used := make([]bool, len(have))
	var missing []string
	for _, want := range strings.Split(shown, "\n") {
		w := normalize(want)
		if w == "" {
			continue
		}
		re := pattern(w)
		found := false
		for j, h := range have {
			if !used[j] && re.MatchString(h) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	return missing
}

var space = regexp.MustCompile(`\s+`)

func normalize(s string) string { return strings.TrimSpace(space.ReplaceAllString(s, " ")) }

// pattern is a shown line as a regular expression: "..." matches any text.
func pattern(line string) *regexp.Regexp {
	parts := strings.Split(line, "...")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// BasePort is the port the documents' fleets start from.
const BasePort = 30000

var port = regexp.MustCompile(`(:|-|--port[ =])(30\d\d\d)\b`)

// Ports returns the ports a text names, BasePort and up.
func Ports(text string) []int {
	var ports []int
	for _, m := range port.FindAllStringSubmatch(text, -1) {
		p, _ := strconv.Atoi(m[2])
		ports = append(ports, p)
	}
	return ports
}

// Remap moves every port of text by base-BasePort.
func Remap(text string, base int) string {
	return port.ReplaceAllStringFunc(text, func(m string) string {
		s := port.FindStringSubmatch(m)
		p, _ := strconv.Atoi(s[2])
		return s[1] + strconv.Itoa(p-BasePort+base)
	})
}
