package benchsuite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/jsonl"
)

// dataStep makes one data file in the scratch directory with a shell
// command of tokenmill's tools (the command is also its key: a file an
// earlier run made with the same command is kept with --reuse-data);
// then, where no tool does it, keeps only some of the file's lines.
type dataStep struct {
	name string
	deps []string // steps whose files this one reads
	file string
	cmd  func(*harness) string
	keep func(h *harness, line []byte) bool // nil: every line
}

// dataSteps are every data file a section can need, each after the ones
// it is made from.
var dataSteps = []*dataStep{
	{name: "corpus", file: "data/corpus.jsonl", cmd: func(h *harness) string { return fmt.Sprintf("corpus --force -n %d -o data/corpus.jsonl", h.sz.Main) }},
	{name: "corpus-parquet", file: "data/corpus.parquet", cmd: func(h *harness) string {
		return fmt.Sprintf("corpus --force -n %d -o data/corpus.parquet", h.sz.Main)
	}},
	{name: "prompts", file: "data/prompts.jsonl", deps: []string{"corpus"}, cmd: cmd("extract --force --progress 0 -o data/prompts.jsonl data/corpus.jsonl")},
	{name: "gens", file: "data/gens.jsonl", deps: []string{"prompts"}, cmd: cmd("benchsuite generations --rerun data/rerun.jsonl -o data/gens.jsonl data/prompts.jsonl")},
	{name: "prompts-slurp", file: "data/prompts-slurp.jsonl", deps: []string{"prompts"}, cmd: func(h *harness) string {
		return fmt.Sprintf("head -n %d data/prompts.jsonl > data/prompts-slurp.jsonl", h.sz.Slurp)
	}},
	{name: "gens-slurp", file: "data/gens-slurp.jsonl", deps: []string{"prompts-slurp"},
		cmd: cmd("benchsuite generations --rerun data/rerun-slurp.jsonl -o data/gens-slurp.jsonl data/prompts-slurp.jsonl")},
	{name: "corpus-big", file: "data/corpus-big.jsonl", cmd: func(h *harness) string {
		return fmt.Sprintf("corpus --force -n %d -o data/corpus-big.jsonl", h.sz.Big)
	}},
	{name: "prompts-big", file: "data/prompts-big.jsonl", deps: []string{"corpus-big"}, cmd: cmd("extract --force --progress 0 -o data/prompts-big.jsonl data/corpus-big.jsonl")},
	{name: "filter-gens", file: "data/filter-gens.jsonl", deps: []string{"corpus"}, cmd: func(h *harness) string {
		return fmt.Sprintf("benchsuite filter-gens --bytes %d -o data/filter-gens.jsonl data/corpus.jsonl", h.sz.FilterBytes)
	}},
	// The whole lines of the first FilterLangBytes of filter-gens.
	{name: "filter-gens-lang", file: "data/filter-gens-lang.jsonl", deps: []string{"filter-gens"}, cmd: func(h *harness) string {
		return fmt.Sprintf("head -c %d data/filter-gens.jsonl > data/filter-gens-lang.jsonl", h.sz.FilterLangBytes)
	}, keep: func(h *harness, line []byte) bool { return line[len(line)-1] == '\n' }},
	{name: "prompts-exact", file: "data/prompts-exact.jsonl", cmd: func(h *harness) string {
		return fmt.Sprintf("corpus -n %d | extract --progress 0 > data/prompts-exact.jsonl", h.sz.Exact)
	}},
	{name: "servers-prompts", file: "data/servers-prompts.jsonl", cmd: cmd("corpus -n 10000 | extract --progress 0 > data/servers-prompts.jsonl")},
	// The conversations of 3 questions or more.
	{name: "regen", file: "data/regen.jsonl", cmd: func(h *harness) string {
		return fmt.Sprintf("corpus -n %d --conversations --seed 1 | extract --turns all --progress 0 > data/regen.jsonl", h.sz.RegenCorpus)
	}, keep: func(h *harness, line []byte) bool { return userTurns(line) >= 3 }},
	// Alpaca's English instructions where the real datasets are beside the
	// repository, else the corpus's prompts.
	{name: "ollama-prompts", file: "data/ollama-prompts.jsonl", cmd: func(h *harness) string {
		if a := h.shared("real/alpaca_en_demo.json"); a != "" {
			return fmt.Sprintf("extract --progress 0 %s | dedup | sed -n 1,%dp > data/ollama-prompts.jsonl", a, h.sz.OllamaPrompts)
		}
		return fmt.Sprintf("corpus -n 10000 | extract --progress 0 | sed -n 1,%dp > data/ollama-prompts.jsonl", h.sz.OllamaPrompts)
	}},
	{name: "prompts-sources", file: "data/prompts-sources.jsonl", deps: []string{"corpus"},
		cmd: cmd("extract --force --progress 0 --keep source -o data/prompts-sources.jsonl data/corpus.jsonl")},
}

func cmd(s string) func(*harness) string { return func(*harness) string { return s } }

func stepByName(name string) *dataStep {
	for _, st := range dataSteps {
		if st.name == name {
			return st
		}
	}
	panic("no data step " + name)
}

// makeData makes the steps' files in order. With reuse, a file an earlier
// run made is kept when its stamp (file.done) holds the same command and
// none of the files it was made from was made again.
func (h *harness) makeData(ctx context.Context, steps []*dataStep) error {
	for _, st := range steps {
		key, stamp := st.cmd(h), h.path(st.file+".done")
		old, err := os.ReadFile(stamp)
		fi, err2 := os.Stat(h.path(st.file))
		reusable := h.reuse && err == nil && err2 == nil && fi.Size() > 0 && strings.TrimSuffix(string(old), "\n") == key
		for _, d := range st.deps {
			reusable = reusable && !h.remade[d]
		}
		if reusable {
			h.logf("data: keeping %s", st.file)
			continue
		}
		os.Remove(stamp)
		h.logf("data: making %s", st.file)
		if err := h.sh(ctx, key); err != nil {
			return fmt.Errorf("making %s: %w", st.file, err)
		}
		if st.keep != nil {
			if err := filterFile(h.path(st.file), 0, func(line []byte) bool { return st.keep(h, line) }); err != nil {
				return fmt.Errorf("making %s: %w", st.file, err)
			}
		}
		if err := os.WriteFile(stamp, []byte(key+"\n"), 0o644); err != nil {
			return err
		}
		h.remade[st.name] = true
	}
	return nil
}

// sh runs a shell command of tokenmill's tools from the scratch directory,
// unmeasured, its diagnostics in logs/data.log.
func (h *harness) sh(ctx context.Context, script string) error {
	log, err := os.OpenFile(h.path("logs/data.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "== %s\n", script)
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = h.dir, h.environ, log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v (see logs/data.log)", script, err)
	}
	return nil
}

// generations answers prompts with made-up generation records and a rerun.
func (h *harness) generations(ctx context.Context, prompts, gens, rerun string) error {
	return h.sh(ctx, shellJoin([]string{"benchsuite", "generations", "--rerun", rerun, "-o", gens, prompts}))
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
func userTurns(line []byte) (n int) {
	var r struct {
		Messages []message `json:"messages"`
	}
	if json.Unmarshal(line, &r) == nil {
		for _, m := range r.Messages {
			if m.Role == "user" {
				n++
			}
		}
	}
	return n
}

// head writes the first n whole lines of a data file to another.
func (h *harness) head(src, dst string, n int) error {
	return copyLines(h.path(src), h.path(dst), n, nil)
}

// filterFile keeps the lines of a file keep accepts (a last line without
// its newline is given as it is), n of them at most (0: no limit).
func filterFile(path string, n int, keep func([]byte) bool) error {
	tmp := path + ".part"
	if err := copyLines(path, tmp, n, keep); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// copyLines writes the first whole lines of src that keep accepts (nil:
// all) to dst, n of them at most (0: no limit).
func copyLines(src, dst string, n int, keep func([]byte) bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return jsonl.WriteFile(dst, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		br, bw := bufio.NewReaderSize(in, 1<<20), bufio.NewWriterSize(w, 1<<20)
		for lines := 0; n == 0 || lines < n; {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 && (keep == nil && err == nil || keep != nil && keep(line)) {
				bw.Write(line)
				lines++
			}
			if err == io.EOF {
				break
			} else if err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}
