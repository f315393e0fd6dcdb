package cli

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

type flagsCmd struct {
	Globals
	OutputFlag `set:"output_what=the kept records"`
	RejectsFlag
	ForceFlag
	WorkersFlag
	ProgressFlag
	seen string
}

func (c *flagsCmd) Run(ctx context.Context, env *Env) error {
	n, err := c.Count()
	if err != nil {
		return err
	}
	c.seen = fmt.Sprintf("o=%s stdout=%v rejects=%s force=%v workers=%d progress=%v", c.Output, c.Stdout(), c.Rejects, c.Force, n, c.Progress)
	return nil
}

// The shared flags: one spelling, one default, their environment
// variables, and the old --progress-interval as a hidden alias (its
// variable too, which the current one overrides).
func TestSharedFlags(t *testing.T) {
	cpus := runtime.GOMAXPROCS(0)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
		code int
	}{
		{"defaults", nil, nil, fmt.Sprintf("o=- stdout=true rejects= force=false workers=%d progress=%v", cpus, DefaultProgress), 0},
		{"set", []string{"-o", "x.jsonl", "--rejects", "r.jsonl", "--force", "--workers", "3", "--progress", "2s"}, nil,
			"o=x.jsonl stdout=false rejects=r.jsonl force=true workers=3 progress=2s", 0},
		{"long output", []string{"--output", ""}, nil, fmt.Sprintf("o= stdout=true rejects= force=false workers=%d progress=10s", cpus), 0},
		{"old spelling", []string{"--progress-interval", "5s"}, nil, "progress=5s", 0},
		{"env", nil, map[string]string{"TOKENMILL_DEMO_PROGRESS": "3s", "TOKENMILL_DEMO_FORCE": "true", "TOKENMILL_DEMO_OUTPUT": "e.jsonl"},
			"o=e.jsonl stdout=false rejects= force=true", 0},
		{"old env", nil, map[string]string{"TOKENMILL_DEMO_PROGRESS_INTERVAL": "4s"}, "progress=4s", 0},
		{"new env wins", nil, map[string]string{"TOKENMILL_DEMO_PROGRESS_INTERVAL": "4s", "TOKENMILL_DEMO_PROGRESS": "6s"}, "progress=6s", 0},
		{"flag beats old env", []string{"--progress", "7s"}, map[string]string{"TOKENMILL_DEMO_PROGRESS_INTERVAL": "4s"}, "progress=7s", 0},
		{"negative workers", []string{"--workers", "-1"}, nil, "", ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			env := &Env{Name: "demo", Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}
			cmd := &flagsCmd{}
			if code := Run(context.Background(), env, "demo", cmd, tt.args); code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, stderr.String())
			}
			if !strings.Contains(cmd.seen, tt.want) {
				t.Fatalf("got %q, want %q", cmd.seen, tt.want)
			}
		})
	}
	var stdout bytes.Buffer
	env := &Env{Name: "demo", Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stdout}
	Run(context.Background(), env, "demo", &flagsCmd{}, []string{"--help"})
	help := stdout.String()
	for _, want := range []string{"-o, --output=FILE", "Write the kept records to FILE", "--rejects=FILE", "--force", "--workers=N",
		"--progress=DURATION", "Default 10s (", "$TOKENMILL_DEMO_PROGRESS", "$TOKENMILL_DEMO_OUTPUT"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "progress-interval") || strings.Contains(help, "PROGRESS_INTERVAL") {
		t.Errorf("--help shows the old spelling:\n%s", help)
	}
}
