package benchsuite

import (
	"context"
	"strings"
	"time"

	"tokenmill/lib/cli"
)

// TimeCmd runs a command --runs times and records each run.
type TimeCmd struct {
	Results     string        `help:"Append the result to this JSONL file." required:""`
	Group       string        `help:"Table the result belongs to." required:""`
	Name        string        `help:"Row name, e.g. the tool." required:""`
	Ours        bool          `help:"This is tokenmill's row: the group's other rows are compared with it."`
	Note        string        `help:"A remark shown with the row."`
	Size        string        `help:"Input size label (growth tables)."`
	Runs        int           `help:"Times to run the command; the median run is reported." default:"3"`
	Bytes       int64         `help:"Input bytes, for MB/s." default:"0"`
	BytesOf     []string      `help:"Input files whose sizes add up to the input bytes." sep:"none"`
	Records     int64         `help:"Input records, for records/s." default:"0"`
	Stdin       string        `help:"Feed this file to the command's stdin (default: nothing)."`
	Stdout      string        `help:"Write the command's stdout here (opened for appending, emptied before each run; default: a temporary file, removed at the end)."`
	Count       []string      `help:"Count the lines of these files (globs allowed) as the output, instead of stdout." sep:"none"`
	NoCount     bool          `help:"Do not count output lines."`
	Clean       []string      `help:"Remove this path before each run and after the last one." sep:"none"`
	Mkdir       []string      `help:"Create this directory (empty) before each run; removed after the last one." sep:"none"`
	Shell       bool          `help:"The command is one bash script (bash -c), e.g. a pipeline."`
	Show        string        `help:"The command as shown in the table (default: the command, quoted as for a shell)."`
	Exit        []int         `help:"Exit codes that count as success." default:"0"`
	Timeout     time.Duration `help:"Longest time one run may take." default:"30m"`
	StderrOut   string        `help:"Keep the last run's stderr in this file." name:"stderr"`
	Alias       []string      `help:"OLD=NEW: show NEW for OLD in the command shown, e.g. a random port (repeatable)." sep:"none"`
	Unavailable string        `help:"Do not run: record the row as not available, for this reason."`
	Rusage      string        `help:"Run commands through this rusage helper (internal/cmd/rusage), whose small footprint makes small peak RSS figures exact; without it they read as at least this program's own (~12 MB)."`
	Argv        []string      `arg:"" passthrough:"" help:"The command and its arguments (after --)."`
}

// Run measures the command.
func (c *TimeCmd) Run(ctx context.Context, env *cli.Env) error {
	argv := c.Argv
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return cli.Usagef("no command to run (put it after --)")
	}
	if c.Runs < 1 {
		return cli.Usagef("--runs must be at least 1")
	}
	if c.Shell && len(argv) != 1 {
		return cli.Usagef("--shell takes the script as one argument")
	}
	for _, a := range c.Alias {
		if old, _, ok := strings.Cut(a, "="); !ok || old == "" {
			return cli.Usagef("--alias %q: want OLD=NEW", a)
		}
	}
	if c.Unavailable != "" {
		env.Logf("%s/%s: not available: %s", c.Group, c.Name, c.Unavailable)
		return appendResult(c.Results, unavailable(c.Group, c.Name, c.Unavailable))
	}
	res, err := Measure(ctx, Spec{Group: c.Group, Name: c.Name, Ours: c.Ours, Note: c.Note, Size: c.Size, Runs: c.Runs,
		Bytes: c.Bytes, BytesOf: c.BytesOf, Records: c.Records, Stdin: c.Stdin, Stdout: c.Stdout, Count: c.Count,
		NoCount: c.NoCount, Clean: c.Clean, Mkdir: c.Mkdir, Shell: c.Shell, Show: c.Show, Exit: c.Exit,
		Timeout: c.Timeout, StderrFile: c.StderrOut, Alias: c.Alias, Rusage: c.Rusage, Argv: argv}, env.Logf)
	if err != nil {
		return err
	}
	return appendResult(c.Results, res)
}
