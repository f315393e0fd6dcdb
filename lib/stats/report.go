package stats

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"tokenmill/lib/cli"
	"tokenmill/lib/quantile"
	"tokenmill/lib/record"
)

// Schema names the layout of the --json report. Fields are only ever added
// under this name; a change of meaning gets a new name.
const Schema = "tokenmill.stats/v1"

// Report is everything stats says, and the --json document.
type Report struct {
	Schema string `json:"schema"`
	// Inputs as named on the command line ("-" for stdin).
	Inputs []string `json:"inputs"`
	// Bytes read after decompression.
	Bytes int64 `json:"bytes"`
	// Records counted (rejects are not).
	Records       int64   `json:"records"`
	Kinds         Kinds   `json:"kinds"`
	Rejected      int64   `json:"rejected"`
	RejectReasons []Count `json:"reject_reasons"`
	Lengths       Lengths `json:"lengths"`
	// FinishReasons of generation records; "(none)" when absent.
	FinishReasons []Count    `json:"finish_reasons"`
	Errors        Errors     `json:"errors"`
	Duplicates    Duplicates `json:"duplicates"`
	// Sources by "source" field, most records first; "(none)" when absent.
	Sources []Source `json:"sources"`
	// Endpoints by name; Fleet adds them all up.
	Endpoints []Endpoint `json:"endpoints"`
	Fleet     Endpoint   `json:"fleet"`
	// WallSeconds is --wall, when given: the run's duration, which records
	// do not carry, needed for throughput over the run.
	WallSeconds float64 `json:"wall_seconds,omitempty"`
	// Interrupted is true when the report covers only what was read before
	// SIGINT/SIGTERM.
	Interrupted bool `json:"interrupted,omitempty"`
	// Empty counts generation records with an answer (or a regenerated
	// turn) whose text is empty or white space and that calls no tool:
	// still answers, which merge --drop-empty and filter drop.
	Empty int64 `json:"empty"`
	// Checks is what filter's quality checks find (--checks); nothing is
	// dropped.
	Checks *Checks `json:"checks,omitempty"`
	// Conversations describes the regenerated conversations, when there
	// are any.
	Conversations *Conversations `json:"conversations,omitempty"`
	// Context is the prompts' tokens against the model's context, and
	// how infer fitted them into it, when there are generation or error
	// records.
	Context *Context `json:"context,omitempty"`
	// Tokens is the training rows of the records' token ids (infer
	// --token-ids), and with --tokens their drift (tokens.go).
	Tokens *Tokens `json:"tokens,omitempty"`
	// Parity is --tokenizer's check of the records' ids against the
	// model's own template and tokenizer.
	Parity *Parity `json:"parity,omitempty"`
	// Arms breaks the answers down by their sampling mixture's arm (infer
	// --mix), when a record names one (arms.go).
	Arms []Arm `json:"arms,omitempty"`
	// Settings breaks the generation records down by the settings that
	// made them (infer's output.settings), when a record names some
	// (settings.go).
	Settings []SettingsGroup `json:"settings,omitempty"`
}

// Checks reports the quality checks over the generation records.
type Checks struct {
	// Checks run, in the order tried.
	Checks []string `json:"checks"`
	// Records checked (generation records) and the answers in them (one
	// per record, or one per regenerated turn).
	Records int64 `json:"records"`
	Answers int64 `json:"answers"`
	Fit     int64 `json:"fit"`
	Unfit   int64 `json:"unfit"`
	// ByReason counts unfit records by the first check they fail, as
	// filter counts its drops (a record whose output cannot be read has
	// the reason bad_output or bad_turn).
	ByReason []Count `json:"by_reason"`
	// PerCheck counts the records failing each check, whatever else they
	// fail, with the first few.
	PerCheck []CheckCount `json:"per_check"`
}

// CheckCount is one check's failures.
type CheckCount struct {
	Check    string         `json:"check"`
	Count    int64          `json:"count"`
	Examples []CheckExample `json:"examples"`
}

// CheckExample locates a record that failed a check; Detail and Turn are
// given when this check is the record's reason.
type CheckExample struct {
	ID     record.ID `json:"id"`
	Sample int       `json:"sample"`
	File   string    `json:"file"`
	Line   int64     `json:"line"`
	Turn   *int      `json:"turn,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// Kinds counts records by kind: a prompt, a generation (has "output"), or
// an error (has "error").
type Kinds struct {
	Prompt     int64 `json:"prompt"`
	Generation int64 `json:"generation"`
	Error      int64 `json:"error"`
}

// Count is a named count.
type Count struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

// Lengths are the length distributions. Characters are Unicode code points
// of the decoded text. prompt_chars covers every record (each carries its
// prompt: all message contents, or "prompt"); the answer figures cover
// generation records; the token figures only generations with
// output.usage; reasoning_chars only generations with a non-empty
// output.reasoning.
type Lengths struct {
	PromptChars    Distribution `json:"prompt_chars"`
	PromptTokens   Distribution `json:"prompt_tokens"`
	AnswerChars    Distribution `json:"answer_chars"`
	AnswerTokens   Distribution `json:"answer_tokens"`
	ReasoningChars Distribution `json:"reasoning_chars"`
}

// Distribution is count, mean, p50, p90, p99 (nearest rank, see package
// quantile) and max, with a histogram over 1-2-5 log-scale buckets.
type Distribution struct {
	quantile.Summary
	Histogram []Bucket `json:"histogram"`
}

// Bucket counts values in [Lo, Hi). Buckets run from the first to the last
// non-empty one.
type Bucket struct {
	Lo    int64 `json:"lo"`
	Hi    int64 `json:"hi"`
	Count int64 `json:"count"`
}

// Errors describes error records.
type Errors struct {
	ByStatus []StatusCount `json:"by_status"`
	// TopMessages groups messages that differ only in their numbers, most
	// frequent first; Message is the first one seen of its group.
	TopMessages []Message `json:"top_messages"`
}

type StatusCount struct {
	Status int   `json:"status"`
	Count  int64 `json:"count"`
}

type Message struct {
	Status  int    `json:"status"`
	Count   int64  `json:"count"`
	Message string `json:"message"`
}

// Duplicates counts records whose (id, sample) was already seen among
// records of their class: prompts apart from answers, where a generation and
// an error for one (id, sample) do repeat it. Records is the number of
// extra copies.
type Duplicates struct {
	Records  int64       `json:"records"`
	Examples []Duplicate `json:"examples"`
}

// Duplicate locates one repeated record.
type Duplicate struct {
	ID     record.ID `json:"id"`
	Sample int       `json:"sample"`
	Kind   string    `json:"kind"`
	File   string    `json:"file"`
	Line   int64     `json:"line"`
}

// Source is the records of one "source".
type Source struct {
	Source      string `json:"source"`
	Records     int64  `json:"records"`
	Prompts     int64  `json:"prompts"`
	Generations int64  `json:"generations"`
	Errors      int64  `json:"errors"`
	// Length counts answers cut by the token limit (finish_reason length).
	Length           int64   `json:"length"`
	CompletionTokens int64   `json:"completion_tokens"`
	MeanPromptChars  float64 `json:"mean_prompt_chars"`
	MeanAnswerChars  float64 `json:"mean_answer_chars"`
}

// Endpoint is what one endpoint served: answers from output.endpoint and
// errors from error.endpoint.
type Endpoint struct {
	Endpoint string `json:"endpoint"`
	// Requests is Answers + Errors (retries inside infer are not seen).
	Requests         int64 `json:"requests"`
	Answers          int64 `json:"answers"`
	Errors           int64 `json:"errors"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// LatencyMS describes output.latency_ms of the answers.
	LatencyMS quantile.Summary `json:"latency_ms"`
	// TokPerSecPerRequest is the completion tokens of answers with a
	// latency over their summed latency: the speed one request saw, queueing
	// and prefill included. It is not the endpoint's throughput, which is
	// that times the requests it ran at once.
	TokPerSecPerRequest float64 `json:"tok_per_s_per_request"`
	// TokPerSec (completion tokens / --wall) and InFlight (summed latency /
	// --wall, the mean requests running at once) need the run's duration
	// and are present only with --wall.
	TokPerSec *float64 `json:"tok_per_s,omitempty"`
	InFlight  *float64 `json:"in_flight,omitempty"`
}

// lengthRows names the distributions in report order.
func (r *Report) lengthRows() []namedDist {
	return []namedDist{
		{"prompt chars", &r.Lengths.PromptChars},
		{"prompt tokens", &r.Lengths.PromptTokens},
		{"answer chars", &r.Lengths.AnswerChars},
		{"answer tokens", &r.Lengths.AnswerTokens},
		{"reasoning chars", &r.Lengths.ReasoningChars},
	}
}

type namedDist struct {
	name string
	d    *Distribution
}

// barWidth is the width of the longest histogram bar, in cells.
const barWidth = 32

// WriteText writes the report as aligned tables with histograms; top
// limits the sources listed.
func (r *Report) WriteText(w io.Writer, top int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s from %s (%s)\n", plural(r.Records, "record"), plural(len(r.Inputs), "input"), bytesText(r.Bytes))
	if r.Interrupted {
		b.WriteString("interrupted: figures cover only what was read before the signal\n")
	}
	r.writeKinds(&b)
	r.writeLengths(&b)
	if len(r.Arms) > 0 {
		writeArms(&b, r.Arms, r.WallSeconds)
	}
	if len(r.Settings) > 0 {
		writeSettings(&b, r.Settings)
	}
	if r.Conversations != nil {
		writeConversations(&b, r.Conversations)
	}
	if r.Context != nil {
		writeContext(&b, r.Context, r.Conversations != nil)
	}
	if r.Checks != nil {
		writeChecks(&b, r.Checks)
	}
	if r.Parity != nil {
		writeParity(&b, r.Parity)
	}
	if r.Tokens != nil {
		writeTokens(&b, r.Tokens)
	}

	r.writeErrors(&b)
	r.writeDuplicates(&b)
	r.writeSources(&b, top)
	if len(r.Endpoints) > 0 {
		writeEndpoints(&b, r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKinds is the table of records by kind, the rejected by reason.
func (r *Report) writeKinds(b *strings.Builder) {
	kinds := table{align: "lrr", header: []string{"kind", "records", "%"}}
	for _, k := range []struct {
		name string
		n    int64
	}{{"prompt", r.Kinds.Prompt}, {"generation", r.Kinds.Generation}, {"error", r.Kinds.Error}} {
		kinds.add(k.name, num(k.n), percent(k.n, r.Records))
	}
	if r.Rejected > 0 {
		kinds.add("rejected", num(r.Rejected), "")
		for _, c := range r.RejectReasons {
			kinds.add("  "+c.Name, num(c.Count), "")
		}
	}
	kinds.write(b)
}

// writeLengths is the lengths' table, their histograms, and the finish
// reasons.
func (r *Report) writeLengths(b *strings.Builder) {
	lengths := table{align: "lrrrrrr", header: []string{"length", "count", "mean", "p50", "p90", "p99", "max"}}
	for _, l := range r.lengthRows() {
		lengths.add(lengthRow(l)...)
	}
	lengths.write(b)
	for _, l := range r.lengthRows() {
		if l.d.Count > 0 {
			writeHistogram(b, l.name, l.d)
		}
	}
	if len(r.FinishReasons) > 0 {
		fin := table{align: "lrrl", header: []string{"finish_reason", "answers", "%", ""}}
		for _, c := range r.FinishReasons {
			fin.add(c.Name, num(c.Count), percent(c.Count, r.Kinds.Generation), bar(float64(c.Count)/float64(r.Kinds.Generation)))
		}
		fin.write(b)
		fmt.Fprintf(b, "empty answers: %s (no text, or white space only, and no tool call)\n\n", plural(r.Empty, "record"))
	}
}

// writeErrors is the errors by status and their commonest messages.
func (r *Report) writeErrors(b *strings.Builder) {
	if len(r.Errors.ByStatus) == 0 {
		return
	}
	st := table{align: "rrr", header: []string{"error status", "errors", "%"}}
	for _, s := range r.Errors.ByStatus {
		st.add(strconv.Itoa(s.Status), num(s.Count), percent(s.Count, r.Kinds.Error))
	}
	st.write(b)
	msgs := table{align: "rrl", header: []string{"errors", "status", "message (numbers aside, the first seen)"}}
	for _, m := range r.Errors.TopMessages {
		msgs.add(num(m.Count), strconv.Itoa(m.Status), oneLine(m.Message))
	}
	msgs.write(b)
}

// writeDuplicates is the (id, sample) pairs seen twice.
func (r *Report) writeDuplicates(b *strings.Builder) {
	fmt.Fprintf(b, "ids seen twice: %s repeating an (id, sample) already seen\n", plural(r.Duplicates.Records, "record"))
	for _, d := range r.Duplicates.Examples {
		id, _ := d.ID.MarshalJSON()
		fmt.Fprintf(b, "  id %s sample %d (%s) at %s:%d\n", id, d.Sample, d.Kind, d.File, d.Line)
	}
	b.WriteByte('\n')
}

// writeSources is the table of the top sources.
func (r *Report) writeSources(b *strings.Builder, top int) {
	if len(r.Sources) == 0 {
		return
	}
	src := table{align: "lrrrrrrrr", header: []string{"source", "records", "prompts", "answers", "errors", "length", "completion tok", "mean prompt chars", "mean answer chars"}}
	for i, s := range r.Sources {
		if i == top {
			src.add(fmt.Sprintf("(%d more: see --json)", len(r.Sources)-top), "", "", "", "", "", "", "", "")
			break
		}
		src.add(s.Source, num(s.Records), num(s.Prompts), num(s.Generations), num(s.Errors), num(s.Length),
			num(s.CompletionTokens), strconv.FormatFloat(s.MeanPromptChars, 'f', 1, 64), strconv.FormatFloat(s.MeanAnswerChars, 'f', 1, 64))
	}
	src.write(b)
}

func writeChecks(b *strings.Builder, c *Checks) {
	fmt.Fprintf(b, "quality checks (%s): %s checked (%s), %s fit, %s unfit; nothing dropped\n",
		strings.Join(c.Checks, ", "), plural(c.Records, "record"), plural(c.Answers, "answer"), num(c.Fit), num(c.Unfit))
	if len(c.ByReason) > 0 {
		t := table{align: "lrrl", header: []string{"reason (first check failed)", "records", "%", ""}}
		for _, x := range c.ByReason {
			t.add(x.Name, num(x.Count), percent(x.Count, c.Records), bar(float64(x.Count)/float64(c.Records)))
		}
		t.write(b)
	}
	t := table{align: "lrl", header: []string{"check", "fails", "first records failing it"}}
	for _, pc := range c.PerCheck {
		var ex []string
		for _, e := range pc.Examples {
			id, _ := e.ID.MarshalJSON()
			ex = append(ex, fmt.Sprintf("%s (%s:%d)", id, e.File, e.Line))
		}
		t.add(pc.Check, num(pc.Count), strings.Join(ex, ", "))
	}
	t.write(b)
}

func writeEndpoints(b *strings.Builder, r *Report) {
	wall := r.WallSeconds > 0
	t := table{align: "lrrrrrrr", header: []string{"endpoint", "requests", "answers", "errors", "completion tok", "tok/s/req", "latency p50", "latency p99"}}
	if wall {
		t.align += "rr"
		t.header = append(t.header, "tok/s", "in flight")
	}
	row := func(e Endpoint) {
		speed, p50, p99 := "-", "-", "-"
		if e.Answers > 0 {
			speed, p50, p99 = strconv.FormatFloat(e.TokPerSecPerRequest, 'f', 1, 64), seconds(e.LatencyMS.P50), seconds(e.LatencyMS.P99)
		}
		cells := []string{e.Endpoint, num(e.Requests), num(e.Answers), num(e.Errors), num(e.CompletionTokens), speed, p50, p99}
		if wall {
			cells = append(cells, strconv.FormatFloat(*e.TokPerSec, 'f', 1, 64), strconv.FormatFloat(*e.InFlight, 'f', 1, 64))
		}
		t.add(cells...)
	}
	for _, e := range r.Endpoints {
		row(e)
	}
	if len(r.Endpoints) > 1 {
		row(r.Fleet)
	}
	t.write(b)
	b.WriteString("tok/s/req: completion tokens / summed latency of answers (one request's speed, queueing included)\n")
	if wall {
		fmt.Fprintf(b, "tok/s: completion tokens / --wall %s; in flight: summed latency / --wall\n", wallText(r.WallSeconds))
	} else {
		b.WriteString("throughput over the run needs its duration: add --wall (e.g. --wall 31h20m)\n")
	}
}

// writeHistogram draws d's buckets as bars proportional to their counts.
func writeHistogram(b *strings.Builder, name string, d *Distribution) {
	var most int64
	for _, k := range d.Histogram {
		most = max(most, k.Count)
	}
	fmt.Fprintf(b, "%s, log-scale buckets [lo, hi)\n", name)
	t := table{align: "rlrr", header: []string{"", "", "count", "%"}}
	for _, k := range d.Histogram {
		t.add(short(k.Lo)+"–"+short(k.Hi), bar(float64(k.Count)/float64(most)), num(k.Count), percent(k.Count, int64(d.Count)))
	}
	t.write(b)
}

// bar is a horizontal bar of frac*barWidth cells in eighths of a cell; a
// non-zero fraction shows at least a sliver.
func bar(frac float64) string {
	eighths := int(math.Round(frac * barWidth * 8))
	if eighths == 0 && frac > 0 {
		eighths = 1
	}
	s := strings.Repeat("█", eighths/8)
	if r := eighths % 8; r > 0 {
		s += string([]rune("▏▎▍▌▋▊▉")[r-1])
	}
	return s
}

// table is an aligned text table; align has 'l' or 'r' per column.
type table struct {
	align  string
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(b *strings.Builder) {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for ri, row := range append([][]string{t.header}, t.rows...) {
		var line strings.Builder
		if ri > 0 {
			line.WriteString("  ")
		}
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				line.WriteString("  ")
			}
			switch {
			case ri == 0 && i == 0:
				line.WriteString(c + pad + "  ") // the header's first cell also covers the rows' indent
			case t.align[i] == 'r':
				line.WriteString(pad + c)
			default:
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
}

// num writes n with thousands separators.
func num[T int | int64](n T) string { return cli.Thousands(n) }

// numf writes a whole-valued float as num does.
func numf(f float64) string { return num(int64(f)) }

func percent(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 1, 64) + "%"
}

// short writes bucket bounds: 500, 2k, 50k, 1M, 2G.
func short(n int64) string {
	for _, u := range []struct {
		div    int64
		suffix string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if n >= u.div && n%u.div == 0 {
			return strconv.FormatInt(n/u.div, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// seconds writes milliseconds as seconds.
func seconds(ms float64) string {
	return strconv.FormatFloat(ms/1000, 'f', 1, 64) + "s"
}

// wallText writes --wall as it was given, more or less: 1h0m0s.
func wallText(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func plural[T int | int64](n T, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return num(n) + " " + word + "s"
}

// oneLine keeps a message on its table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
