package serve

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"tokenmill/lib/cli"
)

func TestParseGPUs(t *testing.T) {
	for _, tt := range []struct {
		list string
		want []string
		err  string
	}{
		{"0-7", []string{"0", "1", "2", "3", "4", "5", "6", "7"}, ""},
		{"0,1, 4-5", []string{"0", "1", "4", "5"}, ""},
		{"3", []string{"3"}, ""},
		{"GPU-8f2b1c3a-0000-1111-2222-333344445555,MIG-GPU-1/2/0", []string{"GPU-8f2b1c3a-0000-1111-2222-333344445555", "MIG-GPU-1/2/0"}, ""},
		{"7-0", nil, "runs backwards"},
		{"0-3,2", nil, "GPU 2 is listed twice"},
		{"a", nil, "is not a GPU number"},
		{"-1", nil, "is not a GPU number"},
		{"0-99999", nil, "too long"},
		{"GPU-x;rm", nil, "bad character"},
	} {
		got, err := parseGPUs(tt.list)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.list, err, tt.err)
		case tt.err == "" && (err != nil || !slices.Equal(got, tt.want)):
			t.Errorf("%q: %v, %v; want %v", tt.list, got, err, tt.want)
		}
	}
}

// The flags become one server per GPU group, on consecutive ports, with
// the placeholders put in wherever they stand and anything else in
// braces (a JSON argument) left alone.
func TestPlan(t *testing.T) {
	c := &Run{GPUs: "0-3", GPUsPerServer: 2, Port: 30000, Host: "gpu7",
		Command: []string{"--", "sh", "-c", "serve-model --port {port} --tp 2", "--json-override", `{"a": {"b": 1}}`, "--name", "s{index}-{gpus}@{host}"}}
	specs, err := c.plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 {
		t.Fatalf("%d servers, want 2", len(specs))
	}
	for i, want := range []struct {
		port       int
		gpus, url  string
		port2, tag string
	}{{30000, "0,1", "http://gpu7:30000", "serve-model --port 30000 --tp 2", "s0-0,1@gpu7"}, {30001, "2,3", "http://gpu7:30001", "serve-model --port 30001 --tp 2", "s1-2,3@gpu7"}} {
		s := specs[i]
		if s.port != want.port || s.gpus != want.gpus || s.url != want.url || s.args[2] != want.port2 || s.args[4] != `{"a": {"b": 1}}` || s.args[6] != want.tag {
			t.Errorf("server %d: %+v", i, s)
		}
		env := environ(s)
		if !slices.Contains(env, "CUDA_VISIBLE_DEVICES="+want.gpus) || slices.ContainsFunc(env, func(kv string) bool {
			return strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") && kv != "CUDA_VISIBLE_DEVICES="+want.gpus
		}) {
			t.Errorf("server %d: CUDA_VISIBLE_DEVICES not exactly %s", i, want.gpus)
		}
	}
	v6 := &Run{Servers: 1, GPUsPerServer: 1, Port: 8080, Host: "::1", Command: []string{"sh"}}
	if specs, err := v6.plan(); err != nil || specs[0].url != "http://[::1]:8080" || specs[0].gpus != "" {
		t.Errorf("IPv6 host: %+v, %v", specs, err)
	}
}

// Every mistake in the flags is a usage error (exit 2) that says what to
// do, before anything is started or written.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus", "0-1"}, "no server command"},
		{[]string{"--", "sh"}, "how many servers?"},
		{[]string{"--gpus", "0-2", "--gpus-per-server", "2", "--", "sh", "{port}"}, "3 GPUs do not split into groups of 2"},
		{[]string{"--gpus", "0-1", "--servers", "3", "--", "sh", "{port}"}, "--servers 3, but --gpus 0-1 makes 2 groups"},
		{[]string{"--gpus", "0-1", "--", "sh", "-c", "serve"}, "has no {port}"},
		{[]string{"--servers", "2", "--port", "65535", "--", "sh", "{port}"}, "need ports 65535-65536"},
		{[]string{"--servers", "1", "--host", "a b", "--", "sh"}, "bad character"},
		{[]string{"--servers", "1", "--", "no-such-command-anywhere"}, `server command "no-such-command-anywhere"`},
		{[]string{"--servers", "1", "--max-failures", "0", "--", "sh"}, "--max-failures 0"},
		{[]string{"--servers", "1", "--backoff", "10s", "--max-backoff", "1s", "--", "sh"}, "--max-backoff 1s is shorter"},
		{[]string{"--servers", "1", "--health-path", "health", "--", "sh"}, "--health-path"},
		{[]string{"--servers", "1", "--gpus-per-server", "0", "--", "sh"}, "--gpus-per-server 0"},
	} {
		var stderr strings.Builder
		env := &cli.Env{Name: "serve", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
		args := append([]string{"--state-dir", dir}, tt.args...)
		code := cli.Run(context.Background(), env, Description, &Run{}, args)
		if code != cli.ExitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, want %d with %q; stderr:\n%s", tt.args, code, cli.ExitUsage, tt.want, stderr.String())
		}
	}
	if entries, _ := readDir(dir); len(entries) != 0 {
		t.Errorf("a usage error wrote %v into the state directory", entries)
	}
}

func readDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

func TestShellJoin(t *testing.T) {
	got := ShellJoin([]string{"vllm", "serve", "--port=8000", "a b", "", "it's", "{x}@1%"})
	if want := `vllm serve --port=8000 'a b' '' 'it'\''s' {x}@1%`; got != want {
		t.Errorf("ShellJoin: %s, want %s", got, want)
	}
	if got := commandLine(spec{gpus: "0,1", args: []string{"sglang", "--tp", "2"}}); got != "CUDA_VISIBLE_DEVICES=0,1 sglang --tp 2" {
		t.Errorf("commandLine: %s", got)
	}
}
