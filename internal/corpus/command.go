package corpus

import (
	"bufio"
	"context"
	"io"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// Description is the --help text of the corpus tool.
const Description = `Generate a deterministic synthetic dataset in the BAAI/Infinity-Instruct 0625
schema, for tests and benchmarks: long-tailed prompts, multi-turn
conversations, CJK and emoji, JSON escapes, and ~0.6% duplicated first-turn
prompts plus whitespace, case and punctuation variants, in numbers the
summary on stderr reports.

With --conversations it writes multi-turn ShareGPT conversations instead (2-10 turns,
long-tailed history lengths, some with tools, function calls and observations), for
extract --turns all.

Example:
  corpus -n 660000 -o corpus.jsonl.zst
  corpus -n 660000 --prompts | dedup --normalize lower > unique.jsonl
  corpus -n 10000 --conversations | extract --turns all > conversations.jsonl`

// Command is the corpus tool.
type Command struct {
	cli.Globals
	Records        int64 `short:"n" help:"Number of records to generate." default:"1000"`
	cli.OutputFlag `set:"output_what=the dataset (.jsonl, .jsonl.gz, .jsonl.zst or .parquet)"`
	cli.ForceFlag  `set:"force_what=-o"`
	Seed           uint64 `help:"Random seed: the same seed and -n give the same records." default:"1"`
	Prompts        bool   `help:"Write the prompt records extract would make (id, and the first human turn as the user message) instead of dataset rows." default:"false"`

	Conversations bool `help:"Write multi-turn ShareGPT conversations (2-10 turns; some with a system prompt, tools, function calls and observations) instead of Infinity-Instruct rows." default:"false"`
}

// Run writes the corpus and the summary.
func (c *Command) Run(ctx context.Context, env *cli.Env) error {
	if c.Records < 0 {
		return cli.Usagef("-n must not be negative")
	}
	isParquet := strings.HasSuffix(c.Output, ".parquet")
	switch {
	case isParquet && (c.Prompts || c.Conversations):
		return cli.Usagef("--prompts and --conversations write JSONL; choose a .jsonl output")
	case c.Prompts && c.Conversations:
		return cli.Usagef("--prompts and --conversations are two different outputs; choose one")
	}
	if err := jsonl.CheckPaths(nil, []jsonl.Output{{Flag: "-o", Path: c.Output}}, c.Force); err != nil {
		return err
	}
	if c.Conversations {
		return c.writeConversations(ctx, env)
	}
	gen := New(c.Seed)
	var written int64
	var err error
	if isParquet {
		written, err = writeParquetFile(ctx, c.Output, c.Force, gen, c.Records)
	} else {
		written, err = c.writeJSONL(ctx, env, gen)
	}
	if err != nil {
		return err
	}
	n := gen.Counts()
	env.Logf("wrote %d records (%d bytes) to %s: exact duplicates %d, whitespace variants %d, case variants %d, punctuation variants %d",
		n.Records, written, c.Output, n.Exact, n.Whitespace, n.Case, n.Punctuation)
	env.Logf("dedup of the first turns removes: none %d, ws %d, lower %d, aggressive %d",
		n.Removed("none"), n.Removed("ws"), n.Removed("lower"), n.Removed("aggressive"))
	return nil
}

func (c *Command) writeJSONL(ctx context.Context, env *cli.Env, gen *Generator) (int64, error) {
	return c.writeLines(ctx, env, func(buf []byte) []byte {
		if c.Prompts {
			return AppendPrompt(buf, gen.Next())
		}
		return AppendJSON(buf, gen.Next())
	})
}

// writeConversations writes the conversations corpus and its summary.
func (c *Command) writeConversations(ctx context.Context, env *cli.Env) error {
	gen := NewConversations(c.Seed)
	written, err := c.writeLines(ctx, env, func(buf []byte) []byte { return AppendConversation(buf, gen.Next()) })
	if err != nil {
		return err
	}
	n := gen.Counts()
	env.Logf("wrote %d conversations (%d bytes) to %s: %d turns, %d with a system prompt, %d with tools, %d function calls each answered by an observation, longest %d characters",
		n.Conversations, written, c.Output, n.Turns, n.WithSystem, n.WithTools, n.Calls, n.LongestChars)
	return nil
}

// writeLines writes -n lines, each appended by next, to -o.
func (c *Command) writeLines(ctx context.Context, env *cli.Env, next func([]byte) []byte) (int64, error) {
	w, err := jsonl.Create(c.Output, env.Stdout, jsonl.WriterOptions{Force: c.Force})
	if err != nil {
		return 0, err
	}
	var buf []byte
	var written int64
	for i := range c.Records {
		if i%4096 == 0 && ctx.Err() != nil {
			w.Abort()
			return written, context.Cause(ctx)
		}
		buf = next(buf[:0])
		written += int64(len(buf)) + 1
		if err := w.Write(buf); err != nil {
			w.Abort()
			return written, err
		}
	}
	return written, w.Close()
}

// WriteParquet writes n records as a zstd-compressed Parquet file with the
// dataset's nested schema (conversations as list<struct<from, value>>).
func WriteParquet(ctx context.Context, out io.Writer, gen *Generator, n int64) error {
	pw := parquet.NewGenericWriter[Row](out,
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault, Concurrency: 1}),
		parquet.MaxRowsPerRowGroup(16384))
	rows := make([]Row, 1)
	for i := range n {
		if i%4096 == 0 && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		rows[0] = *gen.Next()
		if _, err := pw.Write(rows); err != nil {
			return err
		}
	}
	return pw.Close()
}

// writeParquetFile writes the Parquet file through the one file-safety
// helper: it appears only when complete.
func writeParquetFile(ctx context.Context, path string, force bool, gen *Generator, n int64) (int64, error) {
	var size int64
	err := jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: force}, func(w io.Writer) error {
		cw := &countingWriter{w: w}
		bw := bufio.NewWriterSize(cw, 1<<20)
		if err := WriteParquet(ctx, bw, gen, n); err != nil {
			return err
		}
		err := bw.Flush()
		size = cw.n
		return err
	})
	return size, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
