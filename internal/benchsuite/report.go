package benchsuite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"tokenmill/lib/cli"
)

// docTitle opens a report written from nothing.
const docTitle = "# Benchmarks"

// writeReport writes BENCHMARKS.md from the rows kept: whole after a run
// of every section, else each section measured in place of its old part.
func (h *harness) writeReport() error {
	var secs []*section
	for _, s := range sections {
		if slices.Contains(h.info.Sections, s.name) {
			secs = append(secs, s)
		}
	}
	if len(secs) < len(sections) {
		return h.spliceSections(secs)
	}
	var b strings.Builder
	err := h.text(&b, "title", h.view())
	for _, s := range sections {
		if err == nil {
			b.WriteString("\n")
			err = h.render(&b, s)
		}
	}
	if err == nil {
		b.WriteString("\n")
		err = h.text(&b, "reproduce", h.view())
	}
	if err == nil {
		err = writeFile(h.out, []byte(normalise(b.String())))
	}
	if err == nil {
		h.logf("wrote %s (%s of measuring)", h.out, elapsed(h.info.Took))
	}
	return err
}

func init() {
	parts["machine"] = func(w io.Writer, h *harness) {
		t := newTable("", "")
		for _, k := range machineFacts {
			t.add(k, h.fact(k))
		}
		t.add("load before", "`"+h.info.LoadBefore+"`").add("load after", "`"+h.info.LoadAfter+"`").write(w)
	}
	parts["targets"] = func(w io.Writer, h *harness) {
		var all []string
		for _, s := range sections {
			t, err := h.targets(s)
			if err != nil {
				panic(err)
			}
			all = append(all, t...)
		}
		if err := writeTargets(w, h.results, all); err != nil {
			panic(err)
		}
	}
}

// machineFacts are the Machine table's rows, kept as facts of the run.
var machineFacts = []string{"CPUs (nproc)", "CPU model", "memory", "kernel", "Go", "jq", "awk", "gawk", "node"}

// keepFacts notes what the report says of the machine, the peers and the
// data files, which a later rendering cannot ask again.
func (h *harness) keepFacts() {
	f := h.info.Facts
	first := func(argv ...string) string {
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		line, _, _ := strings.Cut(string(out), "\n")
		if err != nil || strings.TrimSpace(line) == "" {
			return "not installed"
		}
		return strings.TrimSpace(line)
	}
	f["CPUs (nproc)"], f["CPU model"], f["memory"] = strconv.Itoa(runtime.NumCPU()), procField("/proc/cpuinfo", "model name"), "unknown"
	if kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64); err == nil {
		f["memory"] = fmt.Sprintf("%.1f GiB", kb/(1<<20))
	}
	f["kernel"], f["Go"] = first("uname", "-sr"), strings.TrimPrefix(first("go", "version"), "go version ")
	f["jq"], f["gawk"], f["awk"] = first("jq", "--version"), first("gawk", "--version"), first("awk", "-W", "version") // mawk's way
	if f["awk"] == "not installed" {
		f["awk"] = first("awk", "--version")
	}
	if f["node"] = first("node", "--version"); f["node"] != "not installed" {
		f["node"] += " (openai " + cmp(h.nodeSDK(), "not installed") + ")"
	}
	var total int64
	filepath.WalkDir(h.dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	f["scratch"] = fmt.Sprintf("%.1f GB", float64(total)/1e9)
	for _, rel := range []string{"corpus", "prompts", "gens", "rerun", "prompts-sources", "filter-gens", "ollama-prompts"} {
		rel = "data/" + rel + ".jsonl"
		if n, err := countLines(h.path(rel)); err == nil {
			fi, _ := os.Stat(h.path(rel))
			f["lines "+rel], f["mb "+rel] = cli.Thousands(n), fmt.Sprintf("%d MB", fi.Size()/1000000)
		}
	}
}

// procField is a field of a /proc file of "key: value" lines.
func procField(path, key string) string {
	data, _ := os.ReadFile(path)
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// lines and mb are a data file's line count and size as the report's
// text gives them.
func (h *harness) lines(rel string) string { return h.fact("lines " + rel) }
func (h *harness) mb(rel string) string    { return cmp(h.info.Facts["mb "+rel], "? MB") }

// spliceSections writes each section measured into the report in place of
// its old one, with the circumstances of the run and its targets.
func (h *harness) spliceSections(secs []*section) error {
	doc, err := os.ReadFile(h.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var texts []string
	for _, s := range secs {
		text, err := h.sectionText(s)
		if err != nil {
			return err
		}
		texts = append(texts, text)
	}
	var b strings.Builder
	if err := h.text(&b, "reproduce", h.view()); err != nil { // names no figure of a run: it follows the harness
		return err
	}
	for _, text := range append(texts, b.String()) {
		if doc, err = Splice(doc, []byte(text), docOrder()); err != nil {
			return fmt.Errorf("%s: %w", h.out, err)
		}
	}
	if err := writeFile(h.out, doc); err != nil {
		return err
	}
	h.logf("wrote %d section(s) of %s", len(secs), h.out)
	return nil
}

// sectionText is a section measured alone as the report shows it: its
// heading, its body, the circumstances of the run and its targets.
func (h *harness) sectionText(s *section) (string, error) {
	var b strings.Builder
	v := h.view()
	v.Names = cmp(strings.Join(h.info.Sections, ","), s.name)
	note, err := h.runsNote(s)
	targets, err2 := h.targets(s)
	if err = errors.Join(err, err2); err == nil {
		v.Note = note
		err = h.render(&b, s)
	}
	if err == nil {
		err = h.text(&b, "alone", v)
	}
	if err == nil && len(targets) > 0 {
		b.WriteString("\n")
		err = writeTargets(&b, h.results, targets)
	}
	return normalise(b.String()), err
}

// runsText is "1 run", "3 runs".
func runsText(n int) string {
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

// normalise leaves one blank line between parts and one newline at the end.
func normalise(doc string) string {
	for strings.Contains(doc, "\n\n\n") {
		doc = strings.ReplaceAll(doc, "\n\n\n", "\n\n")
	}
	return strings.TrimRight(doc, "\n") + "\n"
}

// elapsed is "15 min 40 s".
func elapsed(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d min %d s", s/60, s%60)
}

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
			if i := slices.IndexFunc(parts, func(p part) bool { return slices.Contains(order[k+1:], p.heading) }); i >= 0 {
				at = i
			}
		}
		parts = slices.Insert(parts, at, part{heading: heading, text: sec})
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.text
	}
	return []byte(strings.Join(texts, "\n\n") + "\n"), nil
}

// part is the text under one heading (the preamble has none), without its
// trailing blank lines.
type part struct{ heading, text string }

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
