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

// dataStep makes one data file in the scratch directory.
type dataStep struct {
	name string
	deps []string // steps whose files this one reads
	file string   // what it makes, relative to the scratch directory
	// key is what the file depends on (its command and sizes): the file
	// of an earlier run is kept with --reuse-data only when it is the same.
	key  func(*harness) string
	make func(context.Context, *harness) error
}

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
	{name: "prompts-slurp", file: "data/prompts-slurp.jsonl", deps: []string{"prompts"},
		key: func(h *harness) string { return fmt.Sprintf("head -n %d data/prompts.jsonl", h.sz.Slurp) },
		make: func(ctx context.Context, h *harness) error {
			return copyLines(h.path("data/prompts.jsonl"), h.path("data/prompts-slurp.jsonl"), h.sz.Slurp, 0)
		}},
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
	pipeStep("prompts-exact", func(h *harness) ([]string, []string) {
		return []string{"corpus", "-n", strconv.Itoa(h.sz.Exact)}, []string{"extract", "--progress", "0"}
	}),
	pipeStep("servers-prompts", func(h *harness) ([]string, []string) {
		return []string{"corpus", "-n", "10000"}, []string{"extract", "--progress", "0"}
	}),
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
			if a := h.shared("real/alpaca_en_demo.json"); a != "" {
				return fmt.Sprintf("extract %s | dedup | head -n %d", a, h.sz.OllamaPrompts)
			}
			return fmt.Sprintf("corpus -n 10000 | extract | head -n %d", h.sz.OllamaPrompts)
		},
		make: func(ctx context.Context, h *harness) error {
			first, second := ollamaPromptsFrom(h)
			return h.pipeline(ctx, "data/ollama-prompts.jsonl", nil, h.sz.OllamaPrompts, first, second)
		}},
	toolStep("prompts-sources", "data/prompts-sources.jsonl", []string{"corpus"}, func(*harness) []string {
		return []string{"extract", "--force", "--progress", "0", "--keep", "source", "-o", "data/prompts-sources.jsonl", "data/corpus.jsonl"}
	}),
}

// toolStep is a step made by one tokenmill command, which writes file.
func toolStep(name, file string, deps []string, argv func(*harness) []string) *dataStep {
	return &dataStep{name: name, file: file, deps: deps,
		key:  func(h *harness) string { return strings.Join(argv(h), " ") },
		make: func(ctx context.Context, h *harness) error { return h.pipeline(ctx, "", nil, 0, argv(h)) }}
}

// pipeStep is a step made by two tokenmill commands in a pipe.
func pipeStep(name string, argv func(*harness) ([]string, []string)) *dataStep {
	file := "data/" + name + ".jsonl"
	return &dataStep{name: name, file: file,
		key: func(h *harness) string {
			a, b := argv(h)
			return strings.Join(a, " ") + " | " + strings.Join(b[:1], " ")
		},
		make: func(ctx context.Context, h *harness) error {
			a, b := argv(h)
			return h.pipeline(ctx, file, nil, 0, a, b)
		}}
}

// ollamaPromptsFrom is where the Ollama section's prompts come from:
// Alpaca's English instructions when the real datasets are beside the
// repository, else the corpus.
func ollamaPromptsFrom(h *harness) ([]string, []string) {
	if a := h.shared("real/alpaca_en_demo.json"); a != "" {
		return []string{"extract", "--progress", "0", a}, []string{"dedup"}
	}
	return []string{"corpus", "-n", "10000"}, []string{"extract", "--progress", "0"}
}

func stepByName(name string) *dataStep {
	for _, st := range dataSteps {
		if st.name == name {
			return st
		}
	}
	panic("no data step " + name)
}

// makeData makes the steps' files in order. With reuse, a file an earlier
// run made is kept when its stamp (file.done) holds the same key and none
// of the files it was made from was made again.
func (h *harness) makeData(ctx context.Context, steps []*dataStep) error {
	for _, st := range steps {
		key, stamp := st.key(h), h.path(st.file+".done")
		if h.reuse && h.reusable(st, key) {
			h.logf("data: keeping %s", st.file)
			continue
		}
		os.Remove(stamp)
		h.logf("data: making %s", st.file)
		if err := st.make(ctx, h); err != nil {
			return fmt.Errorf("making %s: %w", st.file, err)
		}
		if err := os.WriteFile(stamp, []byte(key+"\n"), 0o644); err != nil {
			return err
		}
		h.remade[st.name] = true
	}
	return nil
}

func (h *harness) reusable(st *dataStep, key string) bool {
	for _, d := range st.deps {
		if h.remade[d] {
			return false
		}
	}
	fi, err := os.Stat(h.path(st.file))
	stamp, err2 := os.ReadFile(h.path(st.file + ".done"))
	return err == nil && fi.Size() > 0 && err2 == nil && strings.TrimSuffix(string(stamp), "\n") == key
}

// shared is a file of ../shared/data beside the repository, or "" when
// it is not there.
func (h *harness) shared(rel string) string {
	d := h.repo
	for range 5 {
		d = filepath.Dir(d)
		if p := filepath.Join(d, "shared", "data", rel); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// userTurns counts the user messages of a conversation record.
func userTurns(line []byte) int {
	var r struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	n := 0
	if json.Unmarshal(line, &r) == nil {
		for _, m := range r.Messages {
			if m.Role == "user" {
				n++
			}
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
			if prev, err = cmd.StdoutPipe(); err != nil {
				return err
			}
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
	errs := []error{}
	if out != "" {
		err := jsonl.WriteFile(h.path(out), jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
			return filterLines(prev, w, keep, limit)
		})
		if err != nil {
			io.Copy(io.Discard, prev) // the last command must not block on a full pipe
			errs = append(errs, err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v (see logs/data.log)", strings.Join(argvs[i], " "), err))
		}
	}
	return errors.Join(errs...)
}

// filterLines copies the lines keep accepts, limit at most (0: all), and
// reads the rest of r to its end.
func filterLines(r io.Reader, w io.Writer, keep func([]byte) bool, limit int) error {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriterSize(w, 1<<20)
	for n := 0; ; {
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
		} else if err != nil {
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
		var written int64
		for lines := 0; n == 0 || lines < n; lines++ {
			line, err := br.ReadBytes('\n')
			if err == io.EOF || maxBytes > 0 && written+int64(len(line)) > maxBytes {
				break // a last line without its newline is not a whole line
			} else if err != nil {
				return err
			}
			bw.Write(line)
			written += int64(len(line))
		}
		return bw.Flush()
	})
}
