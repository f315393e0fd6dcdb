package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
)

// dataSteps are every data file a section can need, each after the ones
// it is made from. Their commands are the tools' own; what no tool does
// (the first lines of a file, the conversations of 3 questions or more) is
// done here, since it is not measured.
var dataSteps = []*dataStep{
	toolStep("corpus", "data/corpus.jsonl", nil, func(h *harness) []string {
		return []string{"corpus", "--force", "-n", strconv.Itoa(h.sz.Main), "-o", "data/corpus.jsonl"}
	}),
	toolStep("corpus-parquet", "data/corpus.parquet", nil, func(h *harness) []string {
		return []string{"corpus", "--force", "-n", strconv.Itoa(h.sz.Main), "-o", "data/corpus.parquet"}
	}),
	toolStep("prompts", "data/prompts.jsonl", []string{"corpus"}, func(*harness) []string {
		return []string{"extract", "--force", "--progress", "0", "-o", "data/prompts.jsonl", "data/corpus.jsonl"}
	}),
	toolStep("gens", "data/gens.jsonl", []string{"prompts"}, func(*harness) []string {
		return []string{"benchsuite", "generations", "--rerun", "data/rerun.jsonl", "-o", "data/gens.jsonl", "data/prompts.jsonl"}
	}),
	headStep("prompts-slurp", "data/prompts-slurp.jsonl", "prompts", "data/prompts.jsonl", func(h *harness) int { return h.sz.Slurp }),
	toolStep("gens-slurp", "data/gens-slurp.jsonl", []string{"prompts-slurp"}, func(*harness) []string {
		return []string{"benchsuite", "generations", "--rerun", "data/rerun-slurp.jsonl", "-o", "data/gens-slurp.jsonl", "data/prompts-slurp.jsonl"}
	}),
	toolStep("corpus-big", "data/corpus-big.jsonl", nil, func(h *harness) []string {
		return []string{"corpus", "--force", "-n", strconv.Itoa(h.sz.Big), "-o", "data/corpus-big.jsonl"}
	}),
	toolStep("prompts-big", "data/prompts-big.jsonl", []string{"corpus-big"}, func(*harness) []string {
		return []string{"extract", "--force", "--progress", "0", "-o", "data/prompts-big.jsonl", "data/corpus-big.jsonl"}
	}),
	toolStep("filter-gens", "data/filter-gens.jsonl", []string{"corpus"}, func(h *harness) []string {
		return []string{"benchsuite", "filter-gens", "--bytes", strconv.FormatInt(h.sz.FilterBytes, 10), "-o", "data/filter-gens.jsonl", "data/corpus.jsonl"}
	}),
	{name: "filter-gens-lang", file: "data/filter-gens-lang.jsonl", deps: []string{"filter-gens"},
		key: func(h *harness) string {
			return fmt.Sprintf("the whole lines of the first %d bytes of data/filter-gens.jsonl", h.sz.FilterLangBytes)
		},
		make: func(ctx context.Context, h *harness) error {
			return copyLines(h.path("data/filter-gens.jsonl"), h.path("data/filter-gens-lang.jsonl"), 0, h.sz.FilterLangBytes)
		}},
	{name: "prompts-exact", file: "data/prompts-exact.jsonl",
		key: func(h *harness) string { return fmt.Sprintf("corpus -n %d | extract", h.sz.Exact) },
		make: func(ctx context.Context, h *harness) error {
			return h.pipeline(ctx, "data/prompts-exact.jsonl", nil, 0,
				[]string{"corpus", "-n", strconv.Itoa(h.sz.Exact)}, []string{"extract", "--progress", "0"})
		}},
	{name: "servers-prompts", file: "data/servers-prompts.jsonl",
		key: func(*harness) string { return "corpus -n 10000 | extract" },
		make: func(ctx context.Context, h *harness) error {
			return h.pipeline(ctx, "data/servers-prompts.jsonl", nil, 0,
				[]string{"corpus", "-n", "10000"}, []string{"extract", "--progress", "0"})
		}},
	{name: "regen", file: "data/regen.jsonl",
		key: func(h *harness) string {
			return fmt.Sprintf("corpus -n %d --conversations --seed 1 | extract --turns all, 3+ questions", h.sz.RegenCorpus)
		},
		make: func(ctx context.Context, h *harness) error {
			return h.pipeline(ctx, "data/regen.jsonl", func(line []byte) bool { return userTurns(line) >= 3 }, 0,
				[]string{"corpus", "-n", strconv.Itoa(h.sz.RegenCorpus), "--conversations", "--seed", "1"},
				[]string{"extract", "--turns", "all", "--progress", "0"})
		}},
	{name: "ollama-prompts", file: "data/ollama-prompts.jsonl",
		key: func(h *harness) string {
			if a := h.alpaca(); a != "" {
				return fmt.Sprintf("extract %s | dedup | head -n %d", a, h.sz.OllamaPrompts)
			}
			return fmt.Sprintf("corpus -n 10000 | extract | head -n %d", h.sz.OllamaPrompts)
		},
		make: func(ctx context.Context, h *harness) error {
			if a := h.alpaca(); a != "" {
				return h.pipeline(ctx, "data/ollama-prompts.jsonl", nil, h.sz.OllamaPrompts,
					[]string{"extract", "--progress", "0", a}, []string{"dedup"})
			}
			return h.pipeline(ctx, "data/ollama-prompts.jsonl", nil, h.sz.OllamaPrompts,
				[]string{"corpus", "-n", "10000"}, []string{"extract", "--progress", "0"})
		}},
}

// toolStep is a step made by one tokenmill command.
func toolStep(name, file string, deps []string, argv func(*harness) []string) *dataStep {
	return &dataStep{name: name, file: file, deps: deps,
		key:  func(h *harness) string { return strings.Join(argv(h), " ") },
		make: func(ctx context.Context, h *harness) error { return h.pipeline(ctx, "", nil, 0, argv(h)) }}
}

// headStep is the first lines of another step's file.
func headStep(name, file, dep, from string, n func(*harness) int) *dataStep {
	return &dataStep{name: name, file: file, deps: []string{dep},
		key:  func(h *harness) string { return fmt.Sprintf("head -n %d %s", n(h), from) },
		make: func(ctx context.Context, h *harness) error { return copyLines(h.path(from), h.path(file), n(h), 0) }}
}

// alpaca is Alpaca's English instructions in the real datasets beside the
// repository, or "" when they are not there.
func (h *harness) alpaca() string {
	d := h.repo
	for range 5 {
		d = filepath.Dir(d)
		p := filepath.Join(d, "shared", "data", "real", "alpaca_en_demo.json")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// userTurns counts the user messages of a conversation record.
func userTurns(line []byte) int {
	var r struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if json.Unmarshal(line, &r) != nil {
		return 0
	}
	n := 0
	for _, m := range r.Messages {
		if m.Role == "user" {
			n++
		}
	}
	return n
}

// pipeline runs tokenmill commands (named by their binaries' names), each
// reading the one before, from the scratch directory; their diagnostics
// go to logs/data.log. With out set, the last one's output is written
// there: the lines keep accepts (nil: all), at most limit of them (0: no
// limit), the rest read to the end so no command dies of a closed pipe.
func (h *harness) pipeline(ctx context.Context, out string, keep func([]byte) bool, limit int, argvs ...[]string) error {
	log, err := os.OpenFile(h.path("logs/data.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	var cmds []*exec.Cmd
	var prev io.Reader
	for _, argv := range argvs {
		fmt.Fprintf(log, "== %s\n", strings.Join(argv, " "))
		cmd := exec.CommandContext(ctx, h.tool(argv[0]), argv[1:]...)
		cmd.Dir, cmd.Env, cmd.Stderr, cmd.Stdin = h.dir, h.environ, log, prev
		cmds = append(cmds, cmd)
		if len(cmds) < len(argvs) || out != "" {
			r, err := cmd.StdoutPipe()
			if err != nil {
				return err
			}
			prev = r
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			for _, started := range cmds[:i] {
				started.Process.Kill()
				started.Wait()
			}
			return err
		}
	}
	var werr error
	if out != "" {
		werr = jsonl.WriteFile(h.path(out), jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
			return filterLines(prev, w, keep, limit)
		})
		if werr != nil {
			io.Copy(io.Discard, prev) // the last command must not block on a full pipe
		}
	}
	var errs []error
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v (see logs/data.log)", strings.Join(argvs[i], " "), err))
		}
	}
	return errors.Join(append(errs, werr)...)
}

// filterLines copies the lines keep accepts, limit at most (0: all), and
// reads the rest of r to its end.
func filterLines(r io.Reader, w io.Writer, keep func([]byte) bool, limit int) error {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriterSize(w, 1<<20)
	n := 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && (limit == 0 || n < limit) && (keep == nil || keep(bytes.TrimRight(line, "\n"))) {
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			bw.Write(line)
			n++
		}
		if err == io.EOF {
			return bw.Flush()
		}
		if err != nil {
			return err
		}
	}
}

// copyLines writes the first lines of src to dst: n of them at most (0: no
// limit), and no more than maxBytes (0: no limit) of whole lines.
func copyLines(src, dst string, n int, maxBytes int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return jsonl.WriteFile(dst, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		br := bufio.NewReaderSize(in, 1<<20)
		bw := bufio.NewWriterSize(w, 1<<20)
		var lines int
		var written int64
		for n == 0 || lines < n {
			line, err := br.ReadBytes('\n')
			if err == io.EOF {
				break // a last line without its newline is not a whole line
			}
			if err != nil {
				return err
			}
			if maxBytes > 0 && written+int64(len(line)) > maxBytes {
				break
			}
			bw.Write(line)
			lines++
			written += int64(len(line))
		}
		return bw.Flush()
	})
}
