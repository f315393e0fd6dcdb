package doctest

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	doc := strings.Join([]string{
		"# title",
		"```sh",
		"llmsim --listen 127.0.0.1:30000-30001 &",
		"```",
		"prose",
		"```output",
		"infer: answers 3: ok 3",
		"```",
		"```json",
		`{"id": 1}`,
		"```",
		"- a list item",
		"",
		"    its indented continuation",
		"```sh gpu",
		"serve --gpus 0-7 -- sglang",
		"```",
	}, "\n")
	got, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Kind: Run, Text: "llmsim --listen 127.0.0.1:30000-30001 &", Line: 2, Shown: "infer: answers 3: ok 3"},
		{Kind: GPU, Text: "serve --gpus 0-7 -- sglang", Line: 15},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

// TestParseRefuses: a command cannot escape the test by how it is
// written: an unknown kind, an unfenced block, an output of no block.
func TestParseRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown kind":       "```bash\nrm -rf /\n```\n",
		"skipped otherwise":  "```sh skip\ninfer\n```\n",
		"indented block":     "prose\n\n    infer -e 127.0.0.1:30000 x.jsonl\n",
		"output of nothing":  "```output\ninfer: done\n```\n",
		"output of gpu":      "```sh gpu\nserve\n```\n```output\nready\n```\n",
		"two outputs":        "```sh\nls\n```\n```output\na\n```\n```output\nb\n```\n",
		"fence never closed": "```sh\nls\n",
	} {
		if _, err := Parse(doc); err == nil {
			t.Errorf("%s: Parse took it", name)
		}
	}
}

func TestMissing(t *testing.T) {
	printed := "infer: http://127.0.0.1:30000: ready\n" +
		"merge: read 1537, unique out 1189, missing 0\n" +
		"stats: read 1,189 records (6.9 MiB) from 1 input in 32ms, rejected 0\n" +
		"  per endpoint  in flight   answers/s\n"
	for _, c := range []struct {
		shown   string
		missing []string
	}{
		{"merge: read 1537, unique out 1189, missing 0", nil},
		{"stats: read 1,189 records (... MiB) from 1 input in ..., rejected 0", nil},
		{"per endpoint in flight answers/s", nil}, // white space runs compare as one
		{"stats: read ...\nmerge: read ...", nil}, // in any order
		{"merge: read 1537, unique out 1190, missing 0", []string{"merge: read 1537, unique out 1190, missing 0"}},
		{"merge: read ...", nil},
		{"merge: read ...\nmerge: read ...", []string{"merge: read ..."}}, // each shown line a printed line of its own
		{"merge: read 1537", []string{"merge: read 1537"}},                // a whole line, not a prefix
		{"rerun-missing.sh: every prompt has a good answer", []string{"rerun-missing.sh: every prompt has a good answer"}},
	} {
		if got := Missing(c.shown, printed); !reflect.DeepEqual(got, c.missing) {
			t.Errorf("Missing(%q) = %q, want %q", c.shown, got, c.missing)
		}
	}
}

func TestRemap(t *testing.T) {
	text := "llmsim --listen 127.0.0.1:30000-30007 &\nserve --port 30040 --servers 2\ncompose --total 30000 -o x\nhttp://127.0.0.1:30041"
	want := "llmsim --listen 127.0.0.1:21000-21007 &\nserve --port 21040 --servers 2\ncompose --total 30000 -o x\nhttp://127.0.0.1:21041"
	if got := Remap(text, 21000); got != want {
		t.Errorf("Remap:\n got %q\nwant %q", got, want)
	}
	if got, want := Ports(text), []int{30000, 30007, 30040, 30041}; !reflect.DeepEqual(got, want) {
		t.Errorf("Ports = %v, want %v", got, want)
	}
}
