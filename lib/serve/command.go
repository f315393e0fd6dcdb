// Package serve starts the fleet's inference servers, one per GPU group,
// keeps them up and tells infer where they are: each server in a process
// group of its own with CUDA_VISIBLE_DEVICES set to its GPUs and its
// command line's {port}, {gpus}, {index} and {host} filled in, its output
// in its own rotated log; the readiness check infer uses (lib/fleet's,
// per kind of server) asked until it is ready and while it runs; a server
// that exits or stops answering restarted with backoff, one that cannot
// start given up; the servers ready listed in an endpoints file that
// infer --endpoints-file follows. Everything serve knows is in a state
// directory (status file, lock, logs), for serve status, serve stop and
// the next serve, which refuses to start servers where others still run.
package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/procgroup"
)

// Description is serve's --help text.
const Description = `Start the fleet's inference servers, one per GPU group, keep them up, and
write the endpoints file infer reads.

Each server runs COMMAND with CUDA_VISIBLE_DEVICES set to its GPUs and
{port} (--port + its index), {gpus}, {index} and {host} put in for its
arguments; its output goes to STATE-DIR/logs/server-INDEX.log (rotated).
serve waits until each answers the readiness check infer uses (/health, or
/v1/models where a server has none), lists the ready ones in the endpoints
file, restarts a server that exits or stops answering (with backoff), and
gives up on one that fails to start --max-failures times in a row.
SIGINT/SIGTERM stops every server (SIGTERM, then SIGKILL after --grace).

Examples:
  # eight SGLang servers on eight GPUs, then the pipeline
  serve --gpus 0-7 --port 30000 -- python -m sglang.launch_server --model-path Qwen/Qwen3-8B --port {port}
  extract data/*.parquet | dedup | infer --endpoints-file tokenmill-serve/endpoints.txt -o gen.jsonl

  # vLLM with two GPUs per server (tensor parallel), llama.cpp
  serve --gpus 0-7 --gpus-per-server 2 -- vllm serve Qwen/Qwen3-32B --port {port} --tensor-parallel-size 2
  serve --gpus 0,1 -- llama-server -m model.gguf --port {port}

  # two Ollama servers (no GPU list: --servers)
  serve --servers 2 --port 11434 -- env OLLAMA_HOST=127.0.0.1:{port} ollama serve

  serve status     # each server's state, restarts and last exit
  serve stop       # stop a serve, or servers a killed serve left behind

The default command is run: serve [flags] -- COMMAND is serve run [flags] -- COMMAND.
`

// StateFlag is --state-dir, shared by run, status and stop.
type StateFlag struct {
	StateDir string `default:"tokenmill-serve" placeholder:"DIR" help:"Directory of serve's state: its status file (state.json), its lock, the servers' logs (logs/) and, unless --endpoints-file says otherwise, the endpoints file."`
}

// Run is serve's default command: start the servers and keep them up.
type Run struct {
	Command []string `arg:"" optional:"" passthrough:"partial" name:"command" help:"The server's command line, after --: {port}, {gpus}, {index} and {host} are put in for in every argument."`

	GPUs          string `name:"gpus" placeholder:"LIST" help:"GPUs to use, e.g. 0-7 or 0,1,4-7 (or GPU-/MIG- ids): one server per --gpus-per-server of them, in order, each with CUDA_VISIBLE_DEVICES set to its group ({gpus}). Default: none (give --servers)."`
	GPUsPerServer int    `name:"gpus-per-server" default:"1" placeholder:"N" help:"GPUs per server (tensor parallelism): the list is cut into groups of N."`
	Servers       int    `default:"0" placeholder:"N" help:"Number of servers without a GPU list (CPU servers, Ollama); with --gpus it must match the groups. Default: one per GPU group."`
	Port          int    `default:"30000" help:"Port of the first server; server INDEX listens on --port + INDEX ({port})."`
	Host          string `default:"127.0.0.1" help:"Host infer reaches the servers at: written in the endpoints file and put in for {host}. On a cluster, this node's name (--host $(hostname)), with the servers listening on it (e.g. --host 0.0.0.0 in their own flags)."`
	StateFlag     `embed:""`
	EndpointsFile string `placeholder:"FILE" help:"Where the URLs of the servers ready now are written, one a line, replaced at once whenever one comes or goes: infer --endpoints-file FILE reads it and follows it. Default: STATE-DIR/endpoints.txt."`

	StartTimeout   time.Duration `default:"30m" help:"Longest a server may take from its start to its first ready answer (loading a large model takes minutes); past it, it is stopped and its start counts as failed."`
	ProbeInterval  time.Duration `default:"2s" help:"How often each server's readiness is asked (/health, or /v1/models where a server has no /health; --health-path), while it starts and while it runs."`
	UnhealthyAfter time.Duration `default:"1m" help:"A ready server whose readiness check keeps failing this long is restarted."`
	Backoff        time.Duration `default:"5s" help:"Wait before a server is restarted; it doubles with each restart in a row, up to --max-backoff, and starts over once the server has stayed ready for --max-backoff."`
	MaxBackoff     time.Duration `default:"5m" help:"Longest wait before a restart."`
	MaxFailures    int           `default:"5" placeholder:"N" help:"Starts in a row that end before the server is ready (it exits, or is not ready within --start-timeout) after which serve gives up on it and names it; the other servers go on."`
	Grace          time.Duration `default:"30s" help:"How long a server being stopped (SIGINT/SIGTERM to serve, or a restart) has to exit after SIGTERM before its whole process group gets SIGKILL."`
	HealthPath     string        `name:"health-path" placeholder:"PATH" help:"Route that answers 200 once a server is ready, e.g. /ping. Default: /health, or /v1/models where a server has no /health (Ollama)."`
	APIKey         string        `name:"api-key" placeholder:"KEY" help:"Bearer token for readiness checks on servers started with an API key (/v1/models asks for it). Never printed. Default: none."`
	LogMaxSize     int           `default:"100" placeholder:"MB" help:"A server's log is rotated once it reaches this many megabytes."`
	LogKeep        int           `default:"5" placeholder:"N" help:"Rotated logs kept per server, the oldest removed first."`
	Progress       time.Duration `default:"10s" placeholder:"DURATION" help:"While some server is not ready, say how many are and what the others' checks see this often; 0: never."`
	Cgroup         string        `default:"auto" enum:"auto,off" help:"auto: on Linux, each start of a server in a cgroup (v2) of its own beside serve's, where serve may make one (root, or a cgroup delegated to the user), so that stopping it ends every process it started, those that left its process group too (setsid); off: none. Either way serve is the servers' subreaper and follows their processes by descent and by a mark in their environment (TOKENMILL_SERVE_TREE)."`

	clk clock.Clock // nil: the real clock
}

// command is the server's command line without the -- before it.
func (c *Run) command() []string {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		return c.Command[1:]
	}
	return c.Command
}

// config is one serve run, taken from the flags once.
type config struct {
	specs                     []spec
	command                   []string
	host, stateDir, endpoints string
	gpusPerServer             int
	healthPath, apiKey        string
	probeInterval, grace      time.Duration
	unhealthyAfter, progress  time.Duration
	pol                       policy
	logMaxSize, logKeep       int
	cgroup                    bool
	clk                       clock.Clock
}

// config checks the flags and turns them into a config.
func (c *Run) config() (config, error) {
	specs, err := c.plan()
	if err != nil {
		return config{}, err
	}
	if err := c.checkDurations(); err != nil {
		return config{}, err
	}
	endpoints := c.EndpointsFile
	if endpoints == "" {
		endpoints = filepath.Join(c.StateDir, endpointsName)
	}
	return config{specs: specs, command: c.command(), host: c.Host, stateDir: c.StateDir, endpoints: endpoints,
		gpusPerServer: c.GPUsPerServer, healthPath: c.HealthPath, apiKey: c.APIKey,
		probeInterval: c.ProbeInterval, grace: c.Grace, unhealthyAfter: c.UnhealthyAfter, progress: c.Progress,
		pol:        policy{startTimeout: c.StartTimeout, unhealthyAfter: c.UnhealthyAfter, backoff: c.Backoff, maxBackoff: c.MaxBackoff, maxFailures: c.MaxFailures},
		logMaxSize: c.LogMaxSize, logKeep: c.LogKeep, cgroup: c.Cgroup == "auto", clk: clock.Or(c.clk)}, nil
}

// Run starts the servers and keeps them up until interrupted.
func (c *Run) Run(ctx context.Context, env *cli.Env) error {
	if err := procgroup.Supported(); err != nil {
		return err
	}
	return cli.RunConfig(ctx, env, c.config, config.run)
}

// run starts the servers cfg plans and keeps them up until interrupted.
func (cfg config) run(ctx context.Context, env *cli.Env) error {
	specs := cfg.specs
	if err := checkFiles(cfg.stateDir, cfg.endpoints, len(specs)); err != nil {
		return err
	}
	// The key is never printed, nor stored in the status file: a server's
	// readiness answer or its command line may hold it.
	secrets := env.Protect()
	secrets.Add(cfg.apiKey)
	lockFile, err := claim(cfg.stateDir, specs)
	if err != nil {
		return err
	}
	defer lockFile.Close()
	// One serve writes an endpoints file: two would replace each other's
	// list. Each node's serve writes its own, into one directory infer
	// reads whole.
	epLock, err := jsonl.LockFile("--endpoints-file", cfg.endpoints)
	if err != nil {
		return fmt.Errorf("%w (another serve writes it: give each serve an --endpoints-file of its own, e.g. DIR/$(hostname).txt, and infer --endpoints-file DIR reads them all)", err)
	}
	defer epLock.Release()
	defer setupTrees(cfg.cgroup)()

	pool, closePool, err := cfg.pool()
	if err != nil {
		return err
	}
	defer closePool()
	sup := cfg.supervisor(pool, env, secrets)
	defer sup.closeLogs()
	cfg.onSignals(env, sup)
	env.Logf("starting %d servers on %s, ports %d-%d%s: %s; status, logs and endpoints in %s",
		len(specs), cfg.host, specs[0].port, specs[len(specs)-1].port, gpuText(specs, cfg.gpusPerServer), strings.Join(cfg.command, " "), cfg.stateDir)
	env.Logf("%s", trees.describe())
	err = sup.run(ctx)
	final, _ := sup.snapshot()
	restarts := 0
	for _, s := range final.Servers {
		restarts += s.Restarts
	}
	env.Logf("%s: %d servers, %d restarts in all; status in %s", final.State, len(specs), restarts, filepath.Join(cfg.stateDir, stateName))
	return err
}

// pool is the readiness checks of the servers, asked from their start.
func (cfg config) pool() (*fleet.Pool, func(), error) {
	var targets []fleet.Target
	for _, s := range cfg.specs {
		ts, err := fleet.ParseEndpoints(s.url)
		if err != nil {
			return nil, nil, fmt.Errorf("server %d: %w", s.index, err)
		}
		targets = append(targets, ts...)
	}
	poolCtx, cancelPool := context.WithCancel(context.Background())
	pool := fleet.NewPool(poolCtx, targets, fleet.Config{
		HealthPath: cfg.healthPath, APIKey: cfg.apiKey, ProbeInterval: cfg.probeInterval, EjectAfter: 1,
		ControlTimeout: min(10*time.Second, max(cfg.unhealthyAfter/2, 100*time.Millisecond)),
	})
	return pool, func() {
		cancelPool()
		pool.Close()
	}, nil
}

// supervisor is the servers' supervisor, their logs open.
func (cfg config) supervisor(pool *fleet.Pool, env *cli.Env, secrets *cli.Secrets) *supervisor {
	st := State{PID: os.Getpid(), PIDStart: procgroup.StartTime(os.Getpid()), State: serveRunning, Started: cfg.clk.Now(), Host: cfg.host,
		Command: cfg.command, EndpointsFile: cfg.endpoints}
	for _, s := range cfg.specs {
		st.Servers = append(st.Servers, Server{Index: s.index, URL: s.url, Port: s.port, GPUs: s.gpus, State: stateStarting})
	}
	sup := newSupervisor(cfg.specs, st)
	sup.pol = cfg.pol
	sup.clk, sup.probeEvery, sup.grace, sup.progress = cfg.clk, cfg.probeInterval, cfg.grace, cfg.progress
	sup.check, sup.dir, sup.endpoints, sup.logf, sup.secrets = pool, cfg.stateDir, cfg.endpoints, env.Logf, secrets
	sup.openLogs(cfg.logMaxSize, cfg.logKeep)
	return sup
}

// onSignals says what the first signal does, and lets a second kill the
// servers at once unless it is the first told twice.
func (cfg config) onSignals(env *cli.Env, sup *supervisor) {
	var first atomic.Int64 // when the first signal came, in Unix nanoseconds
	env.OnInterrupt(func() {
		first.Store(time.Now().UnixNano())
		env.Logf("interrupted: stopping %d servers (SIGTERM, then SIGKILL after %v: --grace); signal again to kill them at once", len(cfg.specs), cfg.grace)
	})
	env.OnSecondInterrupt(func() bool {
		if time.Since(time.Unix(0, first.Load())) < sameSignal {
			return false // one stop, told twice (Slurm signals serve, and srun passes its own on)
		}
		sup.killAll()
		return true
	})
}

// gpuText names the GPU groups, for the first line.
func gpuText(specs []spec, per int) string {
	if specs[0].gpus == "" {
		return ""
	}
	groups := make([]string, len(specs))
	for i, s := range specs {
		groups[i] = s.gpus
	}
	return fmt.Sprintf(", GPUs %s (%d per server)", strings.Join(groups, " "), per)
}

// sameSignal is how soon after the first a signal is taken for the same
// one: a job scheduler's SIGTERM comes to serve both straight and through
// its launcher; a person signalling again does so after reading the line.
const sameSignal = time.Second

// checkDurations refuses settings that cannot work.
func (c *Run) checkDurations() error {
	switch {
	case c.StartTimeout <= 0 || c.ProbeInterval <= 0 || c.Backoff <= 0:
		return usagef("--start-timeout, --probe-interval and --backoff must be positive")
	case c.UnhealthyAfter < 0 || c.Grace < 0 || c.Progress < 0:
		return usagef("--unhealthy-after, --grace and --progress must not be negative")
	case c.MaxBackoff < c.Backoff:
		return usagef("--max-backoff %v is shorter than --backoff %v", c.MaxBackoff, c.Backoff)
	case c.MaxFailures < 1:
		return usagef("--max-failures %d: want at least 1", c.MaxFailures)
	case c.LogMaxSize < 1 || c.LogKeep < 0:
		return usagef("--log-max-size must be at least 1 (MB) and --log-keep not negative")
	case c.HealthPath != "" && (!strings.HasPrefix(c.HealthPath, "/") || strings.ContainsAny(c.HealthPath, " \t?#")):
		return usagef("--health-path %q: want a path such as /health", c.HealthPath)
	}
	return nil
}

func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

// Help is run's detailed help: serve's own, since serve --help shows
// run's flags.
func (c *Run) Help() string { return Description }
