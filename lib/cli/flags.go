package cli

import (
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// The flags several tools share, spelled, defaulted and explained once.
// Embed the ones a tool has in its command struct:
//
//	type Command struct {
//		cli.Globals
//		cli.OutputFlag `set:"output_what=the kept records"`
//		cli.RejectsFlag
//		cli.ForceFlag
//		cli.ProgressFlag
//	}
//
// Each gets its TOKENMILL_<TOOL>_<FLAG> variable like any flag. A tool may
// fill the help's ${..._what} blanks with set:"name=text" on the embedded field.

// OutputFlag is -o/--output FILE: "-" or empty is stdout.
type OutputFlag struct {
	Output string `short:"o" default:"-" placeholder:"FILE" help:"Write ${output_what=the records} to FILE ('-' or empty: stdout; .gz/.zst compress by name). The file appears only when complete; an existing one is refused unless --force."`
}

// Stdout reports whether the output is stdout.
func (o OutputFlag) Stdout() bool { return o.Output == "" || o.Output == "-" }

// RejectsFlag is --rejects FILE.
type RejectsFlag struct {
	Rejects string `default:"" placeholder:"FILE" help:"Also write every rejected record, with its reason, file and line, to FILE (refused if it exists unless --force)."`
}

// DefaultProgress is the one progress interval every tool uses.
const DefaultProgress = 10 * time.Second

// ProgressFlag is --progress DURATION: how often plain progress lines go to
// stderr when it is not a terminal (a terminal gets a live display). The
// old spelling --progress-interval is a hidden alias.
type ProgressFlag struct {
	Progress time.Duration `default:"10s" aliases:"progress-interval" placeholder:"DURATION" help:"Report progress on stderr this often when it is not a terminal (a terminal gets a live display); 0: never. Default ${default}."`
}

// ForceFlag is --force: the one replace rule. An existing output file is
// refused (exit 2, before anything is written) unless --force.
type ForceFlag struct {
	Force bool `default:"false" help:"Replace existing output files (${force_what=-o and --rejects}) instead of refusing them."`
}

// WorkersFlag is --workers N, where 0 means one per CPU.
type WorkersFlag struct {
	Workers int `default:"0" placeholder:"N" help:"Goroutines that ${workers_what=parse records} (0: one per CPU)."`
}

// Count is the number of workers to start, or a usage error for a
// negative one.
func (w WorkersFlag) Count() (int, error) {
	switch {
	case w.Workers < 0:
		return 0, Usagef("--workers must not be negative")
	case w.Workers == 0:
		return runtime.GOMAXPROCS(0), nil
	}
	return w.Workers, nil
}

// aliasEnvars lets a flag's hidden aliases keep their environment
// variables (TOKENMILL_SHARD_PROGRESS_INTERVAL for --progress-interval), so
// a script written for an old spelling keeps working, while --help lists
// only the current name. The current variable wins when both are set.
func aliasEnvars(prefix string) kong.Option {
	return kong.Resolvers(kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
		for _, env := range f.Envs {
			if _, ok := os.LookupEnv(env); ok {
				return nil, nil
			}
		}
		for _, a := range f.Aliases {
			if v, ok := os.LookupEnv(prefix + "_" + strings.ToUpper(strings.ReplaceAll(a, "-", "_"))); ok && len(a) > 1 {
				return v, nil
			}
		}
		return nil, nil
	}))
}
