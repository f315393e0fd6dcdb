// Package merge combines generation and error files into one record per
// (id, sample), lists the prompts still lacking a good answer, and writes
// training-ready records. A record of a regular file is not held: only
// where it is, and the winners are read back when written (readback.go).
// Memory stays within a budget: past it, entries are hash-partitioned by
// key into temporary files and each partition is resolved on its own.
package merge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/quality"
	"tokenmill/lib/record"
	"tokenmill/lib/tokenizer"
)

// Description is merge's --help text.
const Description = `Combine generation and error files into one record per (id, sample).

  merge gen*.jsonl gen*.errors.jsonl -o final.jsonl
  merge --prompts prompts.jsonl --missing gen*.jsonl > todo.jsonl
  merge --to messages --with-reasoning --sort gen*.jsonl -o train.jsonl
  merge --to conversations --with-reasoning regen*.jsonl -o train.parquet
  merge --to tokens --tokenizer models/Qwen3-8B gen.jsonl -o rows.jsonl    # rows for answers of any server

For each (id, sample) one record wins: an answer beats an error, finish_reason
stop (or tool_calls: an answer that calls tools is complete) beats length beats
abort, and among equals the record read last wins. A regenerated conversation
(infer --regenerate) ranks by its turns: complete beats truncated, then every
turn stop beats a length turn. A good answer (stop, or length unless
--drop-length; not empty with --drop-empty; for a conversation, every turn so,
and complete unless --keep-truncated, or cut to its last complete exchange when
a tool call nobody answered ended it) is written byte for byte, or with --to as
a training record; a key without one is counted as missing, and its best record
goes to --errors FILE if given. With
--prompts FILE --missing, the output is instead the prompts that still lack a
good answer, ready to rerun.

Filter's rejects file (filter --rejects) may be given among the inputs: an
answer it rejected is not good, wherever it is read, while another answer for
the same (id, sample), a rerun's, still wins.
Records come out in the order their key was first read, or by id with --sort.
Missing answers do not change the exit code; bad lines are rejected (exit 3).`

// Command is the merge tool: one field per flag (27), as kong reads them.
type Command struct {
	cli.Globals
	Inputs         []string `arg:"" optional:"" help:"Generation and error files, in the order to read them (later wins among equals). None or - reads stdin."`
	cli.OutputFlag `set:"output_what=the merged records (a name ending in .parquet, with --to, is written as Parquet)"`
	Errors         string `placeholder:"FILE" help:"Write here the best record of each (id, sample) without a good answer (its error, or an aborted or dropped answer)." default:""`
	Prompts        string `help:"The prompt file of the run: its prompts without a good answer are counted as missing, or listed with --missing." default:""`
	Missing        bool   `help:"Write the prompts from --prompts that still lack a good answer (the to-do list to rerun) instead of the answers." default:"false"`
	Samples        int    `help:"Samples per prompt of the run (infer --samples): each (id, sample) from 0 to K-1 needs a good answer; with K > 1, --missing lists each missing one as its prompt plus \"sample\": s." default:"1"`
	To             string `help:"Output format: generation (the records as read), messages ({id, messages} with the answer as the last, assistant turn, or the regenerated conversation), conversations (the same under \"conversations\"; the file a trainer loads is --for's) or sharegpt ({id, conversations} of {from, value}), or tokens (token-exact rows {id, sample, turn, input_ids, loss_mask, num_prompt_tokens, num_answer_tokens} from infer --token-ids, or rebuilt with --tokenizer, with a manifest beside them)." enum:"generation,messages,conversations,sharegpt,tokens" default:"generation"`
	For            string `help:"Write the training file one drafter trainer's data path loads, in exactly its shape (JSON Lines, ids as strings), instead of a --to form (it implies the one the trainer reads; another is refused): specforge ({id, conversations, tools}, one row per answer of the model's own ending with it; train with: specforge train --config RUN.yaml data.train_data_path=train.jsonl data.train_only_last_turn=true), speculators ({id, conversations, tools}, one line per conversation; prepare with: python scripts/prepare_data.py --model MODEL --data train.jsonl --render-endpoint http://localhost:8000 --output data/), modelopt ({id, messages} of role and content; train with: ./launch_train.sh --config eagle3.yaml model.model_name_or_path=MODEL data.data_path=train.jsonl data.chat_template=chat_template_train.jinja training.answer_only_loss=true) or eagle ({id, conversations} of human and gpt turns; train with: cd eagle/traineagle3 && deepspeed main.py --deepspeed_config ds_config.json --basepath MODEL --trainpath train.jsonl --testpath test.jsonl). Only the model's own answers are trained on: a record the trainer cannot carry as the model saw and wrote it (an assistant turn kept as context that the trainer would train on, tools or tool turns where it has none, a system prompt for eagle, turns in an order its loader cuts) is rejected with its reason (context_turn_unmaskable, tools_unsupported, tool_turns_unsupported, system_unsupported, turn_order_unsupported, role_unsupported). With --with-reasoning, reasoning goes where the trainer reads it: reasoning_content (specforge: on each row's answer; speculators), or a <think> block before the answer (modelopt, eagle). Default: none, the --to form." enum:",specforge,speculators,modelopt,eagle" default:""`
	AllowMixed     bool   `help:"With --to tokens, put rows of different models or chat templates into one file (refused by default)." default:"false"`

	// AllowMixedSettings: see settings.go.
	AllowMixedSettings bool `help:"With --to (but generation) or --for, put answers made with different settings (infer's output.settings_family: the model, --max-tokens, --temperature, --top-p, --stop, --extra-body, --mix, --api, --regenerate) into one training file (refused by default, naming both and what differs; another seed, --samples, arm, record params, server version or --token-ids is no difference). --allow-mixed is about models and chat templates of --to tokens." default:"false"`

	Manifest       string `placeholder:"FILE" help:"With --to tokens, where the manifest goes (default: beside -o, FILE.manifest.json; none with stdout)." default:""`
	Tokenizer      string `placeholder:"DIR" help:"With --to tokens, the served model's Hugging Face folder (tokenizer.json, tokenizer_config.json): answers without the server's ids (Ollama, a gateway, infer without --token-ids, a text dataset) get their rows from the model's own chat template and tokenizer, each answer's span up to and including its end-of-turn token; server ids lacking that token get it. Nothing is downloaded." default:""`
	TemplateKwargs string `placeholder:"JSON" help:"With --tokenizer, the chat_template_kwargs the run sent (infer --extra-body's, e.g. {\"enable_thinking\": false}) for records whose own params and arm name none." default:""`
	ReasoningLoss  bool   `negatable:"" help:"With --tokenizer, train on each answer's reasoning (its <think> block); --no-reasoning-loss keeps it in the row with loss 0." default:"true"`
	WithReasoning  bool   `help:"With --to, keep each answer's reasoning: as reasoning_content on its assistant message, or as a <think> block before it in sharegpt." default:"false"`
	SoftSwitch     bool   `help:"With --to messages, conversations or sharegpt, end the system prompt with Qwen3's soft switch, /think or /no_think, as the answer's arm (infer --mix) set chat_template_kwargs.enable_thinking (a system turn /think or /no_think is added where there is none; answers whose arm says nothing of thinking are left as they are). Every form carries the arm's name as \"arm\" anyway." default:"false"`
	DropLength     bool   `help:"Do not count answers cut at the token limit (finish_reason length) as good." default:"false"`
	DropEmpty      bool   `help:"Do not count answers whose text is empty or white space (and that call no tool) as good." default:"false"`
	KeepTruncated  bool   `help:"Count a truncated regenerated conversation (output.truncated) as good, written whole up to its last regenerated turn. By default one that a tool call nobody answered ended (tool_unpaired, tool_rounds) is written up to its last complete exchange, the dangling calls left out (missing when that leaves no answer), and one whose context filled (context_full) counts as missing." default:"false"`
	Sort           bool   `help:"Write records sorted by id (integers numerically, then strings), then sample." default:"false"`
	Memory         Size   `help:"Memory budget: records held in memory stay under half of it (the rest is the garbage collector's headroom); past that, records are spilled to temporary files by key." default:"512MiB"`
	TempDir        string `help:"Directory for spill files (default: the system's temporary directory)." default:""`
	cli.RejectsFlag
	cli.WorkersFlag `set:"workers_what=parse and rank records (and convert them with --to), the output the same whatever their number"`
	cli.ForceFlag   `set:"force_what=-o, --errors and --rejects"`
	cli.ProgressFlag
}

const minMemoryLimit = 64 << 20

// Config is one merge, taken from the flags once. It has a field for
// each flag that shapes the run, as Command has one for each flag: 26,
// kept flat so that each reads as the flag it comes from.
type Config struct {
	Inputs                                     []string
	Prompts, Output, Errors, Rejects, Manifest string
	TempDir                                    string
	Missing                                    bool
	Samples                                    int
	To, For                                    string
	AllowMixed, AllowMixedSettings             bool
	Tokenizer, TemplateKwargs                  string
	ReasoningLoss, WithReasoning, SoftSwitch   bool
	DropLength, DropEmpty, KeepTruncated, Sort bool
	Memory                                     int64
	Workers                                    int
	Force                                      bool
	Progress                                   time.Duration
}

// stdout reports whether -o is stdout.
func (c *Config) stdout() bool { return c.Output == "" || c.Output == "-" }

// merger is the state of one merge.
type merger struct {
	ctx        context.Context
	cfg        *Config
	budget     int64
	missing    bool
	sortByID   bool
	dropLength bool
	keepCut    bool // --keep-truncated
	tempParent string
	workers    int

	// sources are the input files records are read back from
	// (readback.go), by name in sourceIndex.
	sources     []*source
	sourceIndex map[string]int32
	windows     windows

	out  sink
	errs *jsonl.Writer
	conv *converter
	// trained is what --for wrote (trainer.go).
	trained *trainerTally
	// tokens is --to tokens (tokens.go), tally what its sink wrote.
	tokens *tokenForm
	tally  tokenTally
	// settings are the answers' settings (settings.go).
	settings *settingsTally

	dropEmpty bool
	// rejected holds rejectKey of every answer filter rejected.
	rejected map[uint64]struct{}
	qrec     quality.GenerationView

	mergeCounts
}

// mergeCounts are a merge's counts, for the progress line and the summary.
type mergeCounts struct {
	read, bytes atomic.Int64 // answer records and bytes read (progress)
	resolved    atomic.Int64 // keys emitted (progress)
	prompts     int64
	dupPrompts  int64
	spills      int
	spilled     atomic.Int64 // bytes written to spill files
	spilledDisk int64        // the same, compressed, as they took on disk
	// emitted counts
	answered, good, missingN, notInPrompts, toErrors int64
	rejectedN, droppedN, emptyN                      int64 // records read as filter's rejects, answers they rejected, empty answers
	earlierRejects                                   int64 // bad lines from an earlier stage's rejects file
	// Tool-truncated conversations written cut to their last complete
	// exchange, and the turns and tool calls the cuts left out; truncated
	// conversations missing for want of one (or of --keep-truncated).
	cutN, cutTurns, cutCalls, truncMissing int64
}

// Run merges.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	return cli.RunConfig(ctx, env, c.config, (*Config).Run)
}

// Run merges the files cfg names.
func (cfg *Config) Run(ctx context.Context, env *cli.Env) error {
	m, err := newMerger(ctx, cfg)
	if err != nil {
		return err
	}
	// The budget also becomes the heap's soft limit (never raising one the
	// user set with GOMEMLIMIT), so garbage does not carry the process past
	// it; tiny test budgets are floored so the collector does not spin.
	if limit := max(cfg.Memory, minMemoryLimit); limit < debug.SetMemoryLimit(-1) {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	}
	inputs := append(jsonl.InputsFrom(cfg.Inputs, env.Stdin), jsonl.Named{Flag: "--prompts", Path: cfg.Prompts})
	outputs := []jsonl.Output{{Flag: "-o", Path: cfg.Output, MayBeInput: true},
		{Flag: "--errors", Path: cfg.Errors}, {Flag: "--rejects", Path: cfg.Rejects}}
	outputs = append(outputs, cfg.tokenOutputs()...)
	outputs = append(outputs, cfg.settingsOutputs()...)
	outputs = append(outputs, jsonl.LockSidecar("-o", cfg.Output)...)
	outs, err := jsonl.CheckOutputs(env.Stdout, inputs, outputs, cfg.Force)
	if err != nil {
		return err
	}
	lock, err := jsonl.LockOutput("-o", cfg.Output)
	if err != nil {
		return err
	}
	defer lock.Release()
	// Outputs are opened first, so that a name conflict fails before the
	// reading, and written atomically, so that a failed merge leaves none.
	if err := outs.Open(); err != nil {
		return err
	}
	defer outs.Abort()
	rejects := outs.Rejects(env)
	if err := m.run(env, outs, rejects); err != nil {
		return err
	}
	if err := outs.Close(); err != nil {
		return err
	}
	env.Logf("%s", m.summary(rejects))
	return rejects.Err()
}

// config checks the flags and turns them into a Config.
func (c *Command) config() (*Config, error) {
	if err := c.forUsage(); err != nil {
		return nil, err
	}
	switch {
	case c.Missing && c.Prompts == "":
		return nil, cli.Usagef("--missing needs --prompts FILE: the prompts to check for answers")
	case isParquet(c.Output) && c.Missing:
		return nil, cli.Usagef("-o %s: --missing writes the prompts to rerun, as JSON Lines for infer: name a .jsonl file", c.Output)
	case isParquet(c.Output) && c.To == toGeneration:
		return nil, cli.Usagef("-o %s: Parquet holds training records: give --to messages, conversations or sharegpt", c.Output)
	case isParquet(c.Errors):
		return nil, cli.Usagef("--errors %s: the errors file holds generation and error records as JSON Lines, not Parquet", c.Errors)
	case c.Missing && c.To != toGeneration:
		return nil, cli.Usagef("--missing writes prompts; it does not go with --to")
	case c.Missing && c.Errors != "":
		return nil, cli.Usagef("--missing writes prompts; it does not go with --errors")
	case c.WithReasoning && c.To == toGeneration:
		return nil, cli.Usagef("--with-reasoning applies to --to messages, conversations or sharegpt (generation records keep their reasoning anyway)")
	case c.SoftSwitch && (c.To == toGeneration || c.To == toTokens):
		return nil, cli.Usagef("--soft-switch applies to --to messages, conversations or sharegpt (generation records are written as read; token rows hold the ids the server ran)")
	case c.Samples < 1 || c.Samples > maxSample:
		return nil, cli.Usagef("--samples must be from 1 to %d", maxSample)
	case c.Memory <= 0:
		return nil, cli.Usagef("--memory must be positive")
	case c.Prompts == "-" && readsStdin(c.Inputs):
		return nil, cli.Usagef("--prompts - and the answers cannot both come from stdin")
	case c.Errors == "-" && c.Stdout():
		return nil, cli.Usagef("-o and --errors name the same place (-o is stdout unless given)")
	}
	workers, err := c.WorkersFlag.Count()
	if err != nil {
		return nil, err
	}
	if err := c.tokenUsage(); err != nil {
		return nil, err
	}
	return &Config{Inputs: c.Inputs, Prompts: c.Prompts, Output: c.Output, Errors: c.Errors, Rejects: c.Rejects,
		Manifest: c.Manifest, TempDir: c.TempDir, Missing: c.Missing, Samples: c.Samples, To: c.To, For: c.For,
		AllowMixed: c.AllowMixed, AllowMixedSettings: c.AllowMixedSettings, Tokenizer: c.Tokenizer,
		TemplateKwargs: c.TemplateKwargs, ReasoningLoss: c.ReasoningLoss, WithReasoning: c.WithReasoning,
		SoftSwitch: c.SoftSwitch, DropLength: c.DropLength, DropEmpty: c.DropEmpty, KeepTruncated: c.KeepTruncated,
		Sort: c.Sort, Memory: int64(c.Memory), Workers: workers, Force: c.Force, Progress: c.Progress}, nil
}

func newMerger(ctx context.Context, c *Config) (*merger, error) {
	// Records held may take half the budget: Go's collector lets the heap
	// grow to about twice what is live before it reclaims garbage.
	m := &merger{ctx: ctx, cfg: c, budget: c.Memory / 2, missing: c.Missing, sortByID: c.Sort, workers: c.Workers,
		dropLength: c.DropLength, keepCut: c.KeepTruncated, tempParent: c.TempDir, dropEmpty: c.DropEmpty,
		rejected: map[uint64]struct{}{}}
	var err error
	switch c.To {
	case toGeneration:
	case toTokens:
		m.tokens = &tokenForm{keepTruncated: c.KeepTruncated, reasoningLoss: c.ReasoningLoss}
		if c.Tokenizer != "" {
			if m.tokens.tok, err = tokenizer.Load(c.Tokenizer); err != nil {
				return nil, cli.Usagef("--tokenizer: %v", err)
			}
			if !m.tokens.tok.HasTemplate() {
				return nil, cli.Usagef("--tokenizer %s: %v", c.Tokenizer, tokenizer.ErrNoTemplate)
			}
			m.tokens.kwargs = []byte(c.TemplateKwargs)
		}
	default:
		m.conv = &converter{to: c.To, withReasoning: c.WithReasoning, keepTruncated: c.KeepTruncated, softSwitch: c.SoftSwitch, trainer: c.For}
		if c.For != "" {
			m.trained = &trainerTally{trainer: c.For}
		}
	}
	if m.settings, err = c.newSettings(m.conv != nil || m.tokens != nil); err != nil {
		return nil, err
	}
	return m, nil
}

func readsStdin(inputs []string) bool {
	for _, in := range inputs {
		if in == "-" {
			return true
		}
	}
	return len(inputs) == 0
}

// check stops long loops once the run is interrupted.
func (m *merger) check(n int) error {
	if n&1023 == 0 && m.ctx.Err() != nil {
		return context.Cause(m.ctx)
	}
	return nil
}

func (m *merger) run(env *cli.Env, outs *jsonl.Outputs, rejects *jsonl.Rejects) error {
	c := m.cfg
	file := outs.Writer("-o")
	m.out = file
	if isParquet(c.Output) {
		m.out = newParquetSink(file, c.To, c.Memory)
	}
	if m.trained != nil {
		m.out = &trainerSink{inner: m.out, tally: m.trained}
	}
	if m.tokens != nil {
		ts := newTokenSink(m.out, outs, c, &m.tally)
		ts.tok = m.tokens.tok
		ts.settings = m.settings
		m.out = ts
	}
	m.errs = outs.Writer("--errors")
	defer m.closeSources()
	progress := cli.StartProgress(m.ctx, env, c.Progress, func() []string {
		return []string{fmt.Sprintf("read %d records, %.1f MB; spilled %.1f MB; resolved %d keys",
			m.read.Load(), float64(m.bytes.Load())/1e6, float64(m.spilled.Load())/1e6, m.resolved.Load())}
	})
	defer progress.Stop()

	if err := m.collectRejected(env, rejects); err != nil {
		return err
	}
	top := m.newTable(0)
	var seq int64
	if c.Prompts != "" {
		if err := m.readPrompts(top, &seq, env, rejects); err != nil {
			return err
		}
	}
	if err := m.readAnswers(top, &seq, env, rejects); err != nil {
		return err
	}
	if afterReading != nil {
		afterReading()
	}
	if err := m.checkSources(); err != nil {
		return err
	}
	if err := top.finish(m.emit); err != nil {
		return err
	}
	if err := m.settings.writeSidecar(c, outs); err != nil {
		return err
	}
	return m.out.Finish()
}

// scanned is a worker's result for one answer record.
type scanned struct {
	p   parsed
	rej *rejection
	sum uint64 // xxh3 of the record, when it can be read back
	// With --to, a good answer's training record (a copy of its own,
	// unless the record can be read back: it is then converted again when
	// written) or why it cannot be made; whether the answer stays good is
	// decided in order (judge), and only then is the conversion used.
	converted bool
	conv      []byte
	convRej   *rejection
}

// formWorker is one worker's own converter for --to.
type formWorker struct {
	conv   *converter
	tokens *tokenForm
}

// convert makes the training record of a parsed answer that is good
// before judge looks at it (judge only lowers the rank of a good one,
// beside the tool cut it applies here too).
func (m *merger) convert(w formWorker, v *scanned, data []byte, keep bool) {
	p := v.p
	if p.toolCut && !m.keepCut && p.cutRank != rankNone && p.rank > rankAbort {
		p.rank = p.cutRank
	}
	if v.rej != nil || p.rank == rankNone || !m.isGood(p.rank) {
		return
	}
	var out []byte
	switch {
	case w.tokens != nil:
		out, v.convRej = w.tokens.convert(data)
	case w.conv != nil:
		out, v.convRej = w.conv.convert(data)
	default:
		return
	}
	v.converted = true
	if v.convRej == nil && keep {
		v.conv = append([]byte(nil), out...)
	}
}

// readAnswers folds every generation and error record into the table.
// Workers parse batches of records in parallel; the batches are folded in
// input order (jsonl.Parallel), so the result does not depend on timing.
func (m *merger) readAnswers(top *table, seq *int64, env *cli.Env, rejects *jsonl.Rejects) error {
	in := jsonl.NewReader(m.ctx, env, m.cfg.Inputs, env.Stdin, jsonl.Options{})
	var e entry
	forms := make([]formWorker, max(m.workers, 1))
	for i := range forms {
		if m.conv != nil {
			c := *m.conv
			forms[i].conv = &c
		}
		if m.tokens != nil {
			t := *m.tokens
			forms[i].tokens = &t
		}
	}
	err := jsonl.Parallel(m.ctx, in, m.workers, func(w int, b *jsonl.Batch[scanned]) {
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err != nil {
				continue
			}
			it.V.p, it.V.rej = parseRecord(it.Data)
			if it.Seekable && !m.missing {
				it.V.sum = xxh3.Hash(it.Data)
			}
			m.convert(forms[w], &it.V, it.Data, !it.Seekable)
		}
	}, func(b *jsonl.Batch[scanned]) error {
		for i := range b.Items {
			it := &b.Items[i]
			if it.Err != nil {
				if err := rejects.Input(it.Err); err != nil {
					return err
				}
				continue
			}
			if err := m.answer(top, seq, &e, it, rejects); err != nil {
				return err
			}
		}
		m.bytes.Store(b.Read.Bytes)
		return nil
	})
	if err == nil && m.ctx.Err() != nil {
		err = context.Cause(m.ctx)
	}
	return err
}

// answer folds one parsed answer record into the table.
func (m *merger) answer(top *table, seq *int64, e *entry, it *jsonl.Item[scanned], rejects *jsonl.Rejects) error {
	rec, p, rej := it.RawLine, &it.V.p, it.V.rej
	if rej == nil && p.rank == rankNone {
		rej = reject(ReasonNotAGeneration, "neither output nor error: a prompt record among the answers?")
	}
	if rej == nil {
		m.judge(p, rec.Data)
	}
	data, converted := rec.Data, false
	if rej == nil && (m.tokens != nil || m.conv != nil) && m.isGood(p.rank) {
		// Converted as read, so a record that cannot be is rejected where
		// it was read, and only the smaller training record is held.
		if !it.V.converted {
			return fmt.Errorf("%s:%d: a good answer was not converted", rec.File, rec.Line)
		}
		data, rej, converted = it.V.conv, it.V.convRej, true
	}
	if rej != nil {
		if v, err := record.FieldValue(rec.Data, "reject"); err == nil && v != nil && p.rank != rankRejected {
			// A line an earlier stage rejected, as its rejects file
			// holds it: reported there already.
			m.earlierRejects++
			return nil
		}
		return rejects.Add(rec, rej.reason, rej.detail)
	}
	m.read.Add(1)
	*e = entry{id: p.id.Text, sample: p.sample, numeric: p.id.Numeric, rank: p.rank, digest: p.digest, order: *seq, seq: *seq}
	e.group = m.settings.group(p.settings, p.family)
	if isCut(p.rank) {
		e.cut = p.cut
	}
	switch {
	case m.missing:
	case rec.Seekable && m.address(e, rec.File, rec.Offset, rec.Data, it.V.sum):
		// A training record is made again from the record read back.
	default:
		if converted && data == nil {
			// A seekable file that could not be opened again.
			data, _ = m.training(rec.Data)
			data = append([]byte(nil), data...)
		}
		// A training record is the worker's copy, and a long line is kept
		// as the reader assembled it: neither is copied again.
		e.data, e.owned = data, converted || it.Long()
	}
	*seq++
	return top.add(e)
}

// rejectKey identifies one rejected answer: its (id, sample) and the
// digest of its output.
func rejectKey(p *parsed) uint64 {
	h := xxh3.HashString(p.id.Text)
	return xxh3.HashSeed(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, h), p.digest), uint64(p.sample)+1)
}

// collectRejected reads, before anything else, the inputs that are
// filter's rejects files (their first valid record is a reject record), so that
// the answers they reject are known wherever those answers are read.
// Reject records elsewhere are recognised when read.
func (m *merger) collectRejected(env *cli.Env, rejects *jsonl.Rejects) error {
	discard := jsonl.NewRejects(nil, nil) // bad lines are reported when read again below
	for _, name := range m.cfg.Inputs {
		// Only regular files can be read twice: stdin, a pipe or a FIFO is
		// read once, with the rest.
		if st, err := os.Stat(name); name == "-" || err != nil || !st.Mode().IsRegular() {
			continue
		}
		in := jsonl.NewReader(m.ctx, env, []string{name}, nil, jsonl.Options{})
		first := true
		err := eachRecord(m, in, discard, func(rec jsonl.RawLine) error {
			p, rej := parseRecord(rec.Data)
			if first {
				// Decided by the first record that parses: filter writes the
				// bad lines it met to the same file, as {"raw": ...}.
				if rej != nil {
					return nil
				}
				if p.rank != rankRejected {
					return errNotRejects
				}
				first = false
			}
			if rej == nil && p.rank == rankRejected {
				m.rejected[rejectKey(&p)] = struct{}{}
			}
			return nil
		})
		in.Close()
		if err != nil && err != errNotRejects {
			return err
		}
	}
	return nil
}

var errNotRejects = errors.New("not a rejects file")

// judge ranks a tool-truncated conversation by what its cut leaves
// (unless --keep-truncated), and lowers the rank of an answer filter
// rejected, and with --drop-empty of an empty one.
func (m *merger) judge(p *parsed, data []byte) {
	if p.toolCut && !m.keepCut && p.cutRank != rankNone && p.rank > rankAbort {
		p.rank = p.cutRank
	}
	switch {
	case p.rank == rankRejected:
		m.rejectedN++
		m.rejected[rejectKey(p)] = struct{}{}
	case p.rank <= rankRejected || p.output == nil:
	case len(m.rejected) > 0 && hasKey(m.rejected, rejectKey(p)):
		p.rank = rankDropped
		m.droppedN++
	case m.dropEmpty && p.rank > rankAbort && m.empty(data):
		p.rank = rankEmpty
		m.emptyN++
	}
}

// isGood tells the ranks of a good answer: stop; length unless
// --drop-length; a cut conversation's likewise; a truncated conversation's
// likewise with --keep-truncated.
func (m *merger) isGood(rank uint8) bool {
	switch rank {
	case rankStop, rankCutStop:
		return true
	case rankLength, rankCutLength:
		return !m.dropLength
	case rankTruncStop:
		return m.keepCut
	case rankTruncLength:
		return m.keepCut && !m.dropLength
	}
	return false
}

func hasKey(set map[uint64]struct{}, k uint64) bool {
	_, ok := set[k]
	return ok
}

// empty reports an answer with no text (or a regenerated turn with none)
// and no tool call, as filter's empty check finds it.
func (m *merger) empty(data []byte) bool {
	if m.qrec.Parse(data) != nil {
		return false
	}
	for _, a := range m.qrec.Answers {
		if len(a.ToolCalls) == 0 && quality.Blank(a.Text) {
			return true
		}
	}
	return false
}

// readPrompts folds in the prompt keys: each prompt needs samples 0 to K-1,
// or only its own when it carries a top-level sample.
func (m *merger) readPrompts(top *table, seq *int64, env *cli.Env, rejects *jsonl.Rejects) error {
	in := jsonl.NewReader(m.ctx, env, []string{m.cfg.Prompts}, env.Stdin, jsonl.Options{})
	defer in.Close()
	var e entry
	var buf, clean []byte
	return eachRecord(m, in, rejects, func(rec jsonl.RawLine) error {
		p, rej := parseRecord(rec.Data)
		if rej != nil {
			return rejects.Add(rec, rej.reason, rej.detail)
		}
		m.prompts++
		data := rec.Data
		if p.rank != rankNone {
			// A generation record holds its prompt: rerun that, not the answer.
			clean, _ = record.WithoutFields(clean[:0], data, "output", "error")
			data = clean
		}
		first, last := p.sample, p.sample
		if !p.topSample {
			first, last = 0, m.cfg.Samples-1
		}
		for s := first; s <= last; s++ {
			e = entry{id: p.id.Text, sample: s, numeric: p.id.Numeric, prompt: true, head: s == first, order: *seq, seq: *seq}
			if m.missing {
				e.data = data
				if first == last && p.rank == rankNone && rec.Seekable && m.address(&e, rec.File, rec.Offset, rec.Data, xxh3.Hash(rec.Data)) {
					e.data = nil
				} else if first != last {
					buf, _ = record.AppendField(buf[:0], data, "sample", strconv.AppendInt(nil, int64(s), 10))
					e.data = buf
				}
			}
			*seq++
			if err := top.add(&e); err != nil {
				return err
			}
		}
		return nil
	})
}

// eachRecord runs fn on every record of in, reporting input errors as
// rejects, until the end or an interrupt.
func eachRecord(m *merger, in *jsonl.Reader, rejects *jsonl.Rejects, fn func(jsonl.RawLine) error) error {
	for n := 0; ; n++ {
		if err := m.check(n); err != nil {
			return err
		}
		rec, err := in.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if err := rejects.Input(err); err != nil {
				return err
			}
			continue
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// isCut tells the ranks of a conversation cut to its last complete
// exchange.
func isCut(rank uint8) bool { return rank == rankCutStop || rank == rankCutLength }

// emit writes one resolved (id, sample) where it belongs and counts it.
func (m *merger) emit(e *entry) error {
	m.resolved.Add(1)
	hasPrompts := m.cfg.Prompts != ""
	good := m.isGood(e.rank)
	if e.rank > rankNone {
		m.answered++
	}
	switch {
	case good && isCut(e.rank):
		m.cutN++
		m.cutTurns += int64(e.cut.turns)
		m.cutCalls += int64(e.cut.calls)
	case !good && (e.rank == rankTruncStop || e.rank == rankTruncLength) && (!hasPrompts || e.prompt):
		m.truncMissing++
	}
	if hasPrompts && !e.prompt {
		m.notInPrompts++
	}
	if m.missing {
		switch {
		case !e.prompt:
		case good:
			m.good++
		default:
			m.missingN++
			return m.write(m.out, e, false)
		}
		return nil
	}
	if good {
		m.good++
		if err := m.settings.written(e.group); err != nil {
			return err
		}
		return m.write(m.out, e, true)
	}
	if !hasPrompts || e.prompt {
		m.missingN++
	}
	if m.errs != nil && e.rank > rankNone {
		m.toErrors++
		return m.write(m.errs, e, false)
	}
	return nil
}

// write writes e's record, held or read back, to w; a good answer read
// back is converted first with --to.
func (m *merger) write(w interface{ Write([]byte) error }, e *entry, good bool) error {
	data, err := m.recordOf(e)
	if err != nil {
		return err
	}
	if good && e.src != 0 && (m.conv != nil || m.tokens != nil) {
		var rej *rejection
		if data, rej = m.training(data); rej != nil {
			return fmt.Errorf("%s: the record at byte %d was converted when read but not when written: %s", m.sources[e.src-1].name, e.off, rej.detail)
		}
	}
	return w.Write(data)
}

// training is the --to form of a good answer.
func (m *merger) training(data []byte) ([]byte, *rejection) {
	if m.tokens != nil {
		return m.tokens.convert(data)
	}
	return m.conv.convert(data)
}

// summary is the final line: merge: read N, unique out M, replaced R,
// missing K (with --missing: good M, and the to-do lines written), then
// whatever else happened.
func (m *merger) summary(rejects *jsonl.Rejects) string {
	read := m.read.Load()
	parts := []string{fmt.Sprintf("read %d, unique out %d, replaced %d, missing %d", read, m.good, read-m.answered, m.missingN)}
	if m.missing {
		parts = []string{fmt.Sprintf("read %d, good %d, replaced %d, missing %d", read, m.good, read-m.answered, m.missingN)}
	}
	if m.cfg.Prompts != "" {
		parts = append(parts, fmt.Sprintf("prompts %d", m.prompts))
	}
	if m.notInPrompts > 0 {
		parts = append(parts, fmt.Sprintf("answers without a prompt in --prompts %d", m.notInPrompts))
	}
	if m.dupPrompts > 0 {
		parts = append(parts, fmt.Sprintf("repeated prompt ids %d", m.dupPrompts))
	}
	if m.errs != nil {
		parts = append(parts, fmt.Sprintf("to %s %d", m.errs.Path(), m.toErrors))
	}
	if m.rejectedN+m.droppedN > 0 {
		parts = append(parts, fmt.Sprintf("filter rejects %d (answers they reject read elsewhere %d)", m.rejectedN, m.droppedN))
	}
	if m.earlierRejects > 0 {
		parts = append(parts, fmt.Sprintf("bad lines of an earlier stage's rejects skipped %d", m.earlierRejects))
	}
	if m.emptyN > 0 {
		parts = append(parts, fmt.Sprintf("empty answers dropped %d", m.emptyN))
	}
	if m.cutN > 0 {
		what := "written whole as generation records; --to cuts them"
		if m.conv != nil || m.tokens != nil {
			what = fmt.Sprintf("left out %d turns, %d tool calls", m.cutTurns, m.cutCalls)
		}
		parts = append(parts, fmt.Sprintf("tool-truncated conversations cut to their last complete exchange %d (%s)", m.cutN, what))
	}
	if m.truncMissing > 0 {
		parts = append(parts, fmt.Sprintf("truncated conversations missing %d", m.truncMissing))
	}
	if m.tokens != nil {
		parts = append(parts, m.tally.summary())
	}
	if s := m.settings.summary(); s != "" {
		parts = append(parts, s)
	}
	if m.trained != nil {
		parts = append(parts, m.trained.summary())
	}
	if m.spills > 0 {
		parts = append(parts, fmt.Sprintf("spilled %d times, %.1f MB in %.1f MB of temporary files",
			m.spills, float64(m.spilled.Load())/1e6, float64(m.spilledDisk)/1e6))
	}
	if rejects.Total() > 0 {
		parts = append(parts, rejects.Summary())
	}
	if m.missing {
		to := "stdout"
		if !m.cfg.stdout() {
			to = m.cfg.Output
		}
		parts = append(parts, fmt.Sprintf("wrote %d to-do lines to %s", m.missingN, to))
	}
	return strings.Join(parts, ", ")
}
