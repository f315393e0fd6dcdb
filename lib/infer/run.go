package infer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/clock"
	"tokenmill/lib/fleet"
	"tokenmill/lib/forecast"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/ledger"
	"tokenmill/lib/metrics"
	"tokenmill/lib/mix"
	"tokenmill/lib/record"
	"tokenmill/lib/settings"
	"tokenmill/lib/tokens"
)

// Run generates. Its steps come in an order that keeps every promise to
// the user's files: every refusal comes before anything is written; the
// output's partial tail is cut only once nothing else can refuse the
// run; and no file is created, emptied or removed until a server is
// ready. Whatever step returns, close ends every goroutine the run
// started and closes every file it opened.
func Run(ctx context.Context, env *cli.Env, cfg *Config) error {
	r, err := plan(cfg, env)
	if err != nil {
		return err
	}
	defer r.close()
	steps := []func() error{r.prepareOutput, func() error { return r.startFleet(ctx) }, r.discoverModel,
		func() error { return r.checkModel(r.resumed) }, r.startTokenIDs, r.openFiles}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	start := r.clk.Now()
	r.generate(ctx)
	return r.summarise(ctx, r.clk.Now().Sub(start))
}

// runner is one run: it moves answers from the input to the output. A
// reader goroutine turns records into jobs on a small bounded channel (so
// memory stays bounded whatever the input size), one dispatcher hands
// each job to a free slot chosen by the pool, and a worker per request in
// flight sends it and files the outcome.
type runner struct {
	cfg  *Config
	env  *cli.Env
	clk  clock.Clock
	log  *logSink
	logf func(format string, args ...any)
	books
	flow
	halt
	// ctxLen is the model's context as the run learns it, and tokens
	// counts prompts' tokens to fit requests into it (fit.go).
	ctxLen     tokens.Context
	tokens     *tokens.Counter
	pool       *fleet.Pool
	systematic *fleet.Systematic
	model      string
	ready      *readyQueue // answers to send again, before new input
	eta        forecast.Estimator[*job]
	// shortestPrompt is the fewest prompt tokens a request sent has had
	// (0: none counted): the context less it bounds an answer (newETA).
	shortestPrompt atomic.Int64
	backoff        *backoff
	retries        retryTimers
	c              counters
	shownFail      atomic.Int64
	bufs           sync.Pool
	tok            *fleet.TokenIDs // --token-ids (tokenids.go); nil without
	arms           []armCounts     // each --mix arm's figures (mix.go)
	// cleanup undoes the steps taken so far, last first (see close).
	cleanup []func()
}

// books are what the run has done and how: its files, what they held
// when it began, and the settings of its answers.
type books struct {
	files    *ledger.Files   // -o, the errors file and the turn journal
	errPath  string          // the errors file ("": none), as files names it
	ledger   *ledger.Ledger  // the ids read and the answers done
	known    ledger.Refusals // --resume: the refusals the errors file records
	resumed  ledger.Info     // what reading the file continued found
	settings *settings.Book  // the answers' settings and their sidecar
	rejects  *jsonl.Rejects
}

// flow is how jobs move from the reader through the dispatcher to the
// workers, and what tells when all are done.
type flow struct {
	input       chan *job
	work        chan task     // attempts for idle workers
	workDone    chan struct{} // closed at the end: workers exit
	outstanding atomic.Int64  // jobs read and not yet ok or failed
	inflight    sync.WaitGroup
	readerDone  atomic.Bool
	readAll     atomic.Bool    // the reader saw the end of the input
	unread      *ledger.Unread // an interrupted run's count of the input it did not read
}

// halt is how the run stops: interrupted, on a fatal error, or with every
// endpoint failing every request alike.
type halt struct {
	stopping  atomic.Bool // interrupted or fatal: no more retries or error records
	fatalOnce sync.Once
	fatalErr  error
	cancelRun context.CancelCauseFunc
	// sendCtx is what slots are waited for under: the run's, ended too
	// when failing is set, every endpoint failing every request alike
	// (retry.go); from then on every answer not done is filed unsent.
	sendCtx     context.Context
	stopSending context.CancelCauseFunc
	failing     atomic.Pointer[fleet.FailingError]
}

// plan checks the flags and the files named, refusing what the run
// cannot do before it touches anything.
func plan(c *Config, env *cli.Env) (*runner, error) {
	r := &runner{
		cfg: c, env: env, clk: clock.Or(c.Clock), log: &logSink{env: env},
		books: books{ledger: ledger.New()}, ready: newReadyQueue(),
		flow: flow{input: make(chan *job, 64), work: make(chan task), workDone: make(chan struct{})},
	}
	r.logf = r.log.Logf
	if c.Mix != nil {
		r.arms = make([]armCounts, len(c.Mix.Arms))
	}
	files, known, err := ledger.PlanFiles(ledger.FileOptions{Inputs: c.Inputs, Stdin: env.Stdin, Output: c.Output, Errors: c.Errors,
		Rejects: c.Rejects, Continues: c.continues(), Force: c.Force, Regenerate: c.Regenerate})
	if err != nil {
		return nil, err
	}
	r.files, r.errPath, r.known = files, files.ErrPath, known
	r.onClose(files.Release)
	r.settings = settings.New(c.Settings, c.Arms, files.SettingsPath(), r.logf)
	return r, nil
}

// onClose adds f to what close undoes.
func (r *runner) onClose(f func()) { r.cleanup = append(r.cleanup, f) }

// close is the run's one way out: it stops what the steps started and
// closes what they opened, last first. It is safe after any step.
func (r *runner) close() {
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}
	r.cleanup = nil
}

// prepareOutput readies -o: continued (--resume: its partial last line cut,
// its answers marked done), replaced (--force) or new. The file is opened
// by openFiles.
func (r *runner) prepareOutput() error {
	c, jn := r.cfg, r.files.Journal
	r.files.Prepare(r.env.Stdout, r.env.Secrets)
	r.onClose(r.files.Abort)
	if !c.continues() {
		return nil
	}
	var counts map[xxh3.Uint128]int
	if jn != nil {
		var err error
		if counts, err = ledger.JournalKeys(jn.Path(), r.logf); err != nil {
			return err
		}
	}
	arms := mix.NewCheck(c.Mix, r.mixSeed())
	if err := r.settings.Read(); err != nil {
		return err
	}
	info, err := r.ledger.Resume(r.files.Path, ledger.Options{Skip: c.Resume, RedoLength: c.RedoLength, Counts: counts, Arm: arms.See, Warn: r.logf})
	if err != nil {
		return err
	}
	if err := arms.Err(c.Output); err != nil {
		return err
	}
	r.resumed = info
	if err := r.checkSettings(info); err != nil {
		return err
	}
	if err := r.pickSeedOffset(info); err != nil {
		return err
	}
	msg := fmt.Sprintf("resuming %s: %s answers already done", c.Output, cli.Thousands(info.Answers))
	if c.Append {
		msg = fmt.Sprintf("appending to %s: %s answers already in it, none skipped", c.Output, cli.Thousands(info.Answers))
	}
	if c.RedoLength {
		msg += fmt.Sprintf(", %s cut short by length to redo", cli.Thousands(info.Length))
	}
	if info.Unreadable > 0 {
		msg += fmt.Sprintf(", %s lines ignored", cli.Thousands(info.Unreadable))
	}
	if jn != nil {
		convs, turns, err := jn.Load(counts, r.ledger.Done, r.logf)
		if err != nil {
			return err
		}
		msg += fmt.Sprintf("; %s unfinished conversations continue from %s turns in %s", cli.Thousands(int64(convs)), cli.Thousands(int64(turns)), jn.Path())
	}
	r.logf("%s", msg)
	return nil
}

// pickSeedOffset sets --append's seed offset, when not given, past every
// seed the answers already in -o were asked with: a sampling server answers
// a seed the same way, so a rerun would get back the answers it replaces.
func (r *runner) pickSeedOffset(info ledger.Info) error {
	c := r.cfg
	if !c.PickSeedOffset || info.FreeSeedOffset == 0 {
		return nil
	}
	c.SeedOffset = info.FreeSeedOffset
	c.Builder.SetSeedOffset(c.SeedOffset)
	if c.Seed == nil {
		return nil // a record's own seed takes the offset too; --seed's runs say so
	}
	if seedOverflows(*c.Seed, c.SeedOffset, c.Samples-1) {
		return cli.Usagef("--append: the answers in %s took seeds up to --seed %d plus %d: give --seed-offset (or another --seed) that the last sample's seed does not pass the largest integer with",
			c.Output, *c.Seed, c.SeedOffset-1)
	}
	r.logf("appending to %s: asking with --seed-offset %s, one past the seeds its answers were asked with (give --seed-offset to choose)", c.Output, cli.Thousands(c.SeedOffset))
	return nil
}

// startFleet starts probing the endpoints and waits for one to be ready.
func (r *runner) startFleet(ctx context.Context) error {
	c := r.cfg
	poolCtx, cancelPool := context.WithCancel(context.Background())
	pc := c.Pool
	pc.Logf, pc.Clock = r.logf, r.clk
	r.pool = fleet.NewPool(poolCtx, c.Targets, pc)
	r.ctxLen.State(r.pool.Context)
	r.onClose(func() {
		cancelPool()
		r.pool.Close()
	})
	started := r.clk.Now()
	r.pool.Start()
	if c.EndpointsFile != "" {
		r.pool.Follow(c.EndpointsFile, c.Pool.ProbeInterval) // serve rewrites it as servers come and go
	}
	r.tokens = tokens.NewCounter(r.pool, func() string { return r.model })
	r.tokens.UseTokenizer(c.Tokenizer)
	if err := r.pool.WaitReady(ctx, c.WaitReady); err != nil {
		return err
	}
	// The run goes on with the endpoints that are ready; one still not
	// ready after the first minute is named, with why.
	r.onClose(r.pool.WarnNotReady(started, notReadyWarning))
	return nil
}

// notReadyWarning is when the endpoints not ready yet are named.
const notReadyWarning = time.Minute

// openFiles creates the run's files, now that it can go ahead: -o, the
// journal and the errors file (ledger.Files.Open), the settings sidecar
// and the rejects file.
func (r *runner) openFiles() error {
	if err := r.files.Open(r.env.Secrets); err != nil {
		return err
	}
	if err := r.settings.Open(r.cfg.continues(), r.env.Secrets); err != nil {
		return err
	}
	r.onClose(func() { r.settings.Close() })
	rejects, err := jsonl.CreateRejects(r.cfg.Rejects, r.env.Stdout, r.env, r.cfg.Force || r.cfg.continues())
	if err != nil {
		return err
	}
	r.rejects = rejects
	r.onClose(r.rejects.Abort) // a run that ends before its summary leaves the old file
	return nil
}

// discoverModel names the model the requests and records carry: --model,
// checked against what the servers list, or the first one /v1/models
// lists; and refuses an API whose route the servers lack.
func (r *runner) discoverModel() error {
	if err := fleet.CheckRun(r.pool, r.cfg.API, r.cfg.Model); err != nil {
		return cli.Usagef("%v", err)
	}
	// Requests are built with the first endpoint's model; each endpoint
	// is sent its own name for it (fleet.Pool.BodyFor).
	if r.model = r.pool.DiscoverModel(); r.model == "" {
		r.model = "default"
		r.logf("/v1/models names no model; sending model %q (set --model)", r.model)
	}
	r.cfg.Builder.SetModel(r.model)
	if text := r.pool.ModelsText(); text != "" {
		r.logf("the endpoints serve the model under different names, each sent its own: %s", text)
	}
	r.systematic = fleet.NewSystematic(r.pool, r.cfg.API, r.model)
	return nil
}

// newETA is the run's forecast: answers of at most --max-tokens, else of
// at most what the model's context (as the run learns it) leaves of the
// shortest prompt sent, capacity(i) of them written at once by endpoint i.
func (r *runner) newETA(capacity func(i int) int) forecast.Estimator[*job] {
	longest := func() int {
		n, p := r.context(), int(r.shortestPrompt.Load())
		if p > 0 && p < n {
			return n - p
		}
		return n
	}
	return forecast.NewEstimator[*job](time.Minute, r.cfg.MaxTokens, longest, capacity)
}

// etaStarted tells the forecast that j's first attempt went to endpoint
// ep at start, and notes its prompt's tokens.
func (r *runner) etaStarted(j *job, ep int, start time.Time) {
	for p := int64(j.fit.Prompt); p > 0; {
		old := r.shortestPrompt.Load()
		if (old > 0 && old <= p) || r.shortestPrompt.CompareAndSwap(old, p) {
			break
		}
	}
	r.eta.Started(j, ep, start)
	j.etaOn, j.started = true, start
}

// generate reads the input and sends every answer, until all are done,
// the run is interrupted or something fatal happens; then it lets the
// answers in flight land (for --grace when interrupted).
func (r *runner) generate(ctx context.Context) {
	c := r.cfg
	r.eta = r.newETA(r.pool.Running)
	r.backoff = newBackoff(c.Backoff, c.MaxBackoff, uint64(r.clk.Now().UnixNano()))
	runCtx, cancelRun := context.WithCancelCause(ctx)
	r.cancelRun = cancelRun
	r.sendCtx, r.stopSending = context.WithCancelCause(runCtx)
	r.env.OnInterrupt(r.sayStopping)
	r.startReporting(ctx, runCtx)
	r.onClose(func() {
		cancelRun(nil)
		r.stopSending(nil)
		r.retries.stop()
		close(r.workDone)
	})

	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		flushEvery(r.clk, c.FlushInterval, stopFlush, r.files.Out, r.files.Errs)
		close(flushed)
	}()
	rd := jsonl.NewReader(runCtx, r.env, c.Inputs, r.env.Stdin, jsonl.Options{MaxLine: c.MaxPromptBytes, LimitName: "--max-prompt-bytes"})
	readerExit := make(chan struct{})
	go func() {
		r.read(runCtx, rd)
		close(readerExit)
	}()

	if err := r.dispatch(runCtx); err != nil {
		r.fatal(err)
	}
	if runCtx.Err() != nil {
		r.stopping.Store(true)
		r.drain(c.Grace)
	}
	r.inflight.Wait()
	cancelRun(nil)
	select {
	case <-readerExit:
		if ctx.Err() != nil && r.fatalErr == nil && !r.readAll.Load() {
			// It reads rd to the end, or goes on past the summary; a pipe
			// whose writer goes on (or a terminal) is not waited for long.
			r.unread = r.ledger.CountUnread(rd, r.cfg.Samples, 3*time.Second)
		} else {
			rd.Close()
		}
	case <-time.After(time.Second): // blocked on a terminal's stdin, which cannot be interrupted: nothing more is read
	}
	close(stopFlush)
	<-flushed
}

// startReporting starts what shows the run while it goes: the progress
// display, the count of the input's lines behind its total, and the
// metrics endpoint. close stops them.
func (r *runner) startReporting(ctx, runCtx context.Context) {
	c := r.cfg
	prog := newProgress(r, r.env.Interactive, r.eta)
	counted := make(chan struct{})
	go func() {
		prog.inputLines.Store(forecast.CountInputLines(runCtx, c.Inputs))
		close(counted)
	}()
	// The display goes on through an interruption's grace period, showing
	// the answers in flight land; close stops it.
	cp := cli.StartProgressRows(context.WithoutCancel(ctx), r.env, c.Progress, prog.rows)
	r.log.p.Store(cp)
	r.onClose(func() {
		<-counted
		cp.Stop()
		r.log.p.Store(nil)
	})
	if c.MetricsAddr == "" {
		return
	}
	stop, addr, err := metrics.Serve(c.MetricsAddr, "tokenmill_infer_", r.collect)
	if err != nil {
		r.logf("--metrics-addr: %v (going on without metrics)", err)
		return
	}
	where := ""
	if h, _, err := net.SplitHostPort(addr); err == nil && net.ParseIP(h).IsUnspecified() {
		where = " (every interface: --metrics-addr without a host)"
	}
	r.logf("metrics at http://%s/metrics%s", addr, where)
	r.onClose(stop)
}

// summarise closes the files, prints the summary and says how the run
// ended.
func (r *runner) summarise(ctx context.Context, wall time.Duration) error {
	if p := r.log.p.Load(); p != nil {
		p.Stop()
		r.log.p.Store(nil)
	}
	werr := r.settings.Close() // its lines before the records that name them
	if err := r.files.Close(); werr == nil {
		werr = err
	}
	var rerr error
	if r.fatalErr != nil || ctx.Err() != nil {
		r.rejects.Abort() // an interrupted run leaves the old file as it was
	} else {
		rerr = r.rejects.Close()
	}
	s := r.summary(wall)
	if werr == nil {
		finished := r.fatalErr == nil && s.Failed == 0 && s.NotDone == 0 && r.readerDone.Load()
		werr = r.files.CloseJournal(finished)
	}
	for _, line := range summaryLines(r.env.Name, s, r.files.Name) {
		fmt.Fprintln(r.env.Stderr, cli.Escape(line, cli.MaxLogLine)) // it names files and endpoints
	}
	for _, line := range r.moreSummary(s) {
		fmt.Fprint(r.env.Stderr, r.env.Line("%s", line))
	}
	switch {
	case r.fatalErr != nil:
		return r.fatalErr
	case werr != nil:
		return werr
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case r.failingErr() != nil:
		return r.failingErr()
	case rerr != nil && !errors.Is(rerr, cli.ErrRejects):
		return rerr
	case s.Failed > 0:
		return fmt.Errorf("%d answers failed (see %s): %w", s.Failed, r.errPath, cli.ErrRejects)
	}
	return rerr
}

// moreSummary are the summary's lines beyond the answers': empty answers,
// and what --regenerate did.
func (r *runner) moreSummary(s Summary) []string {
	var lines []string
	c := &r.c
	if r.cfg.Regenerate {
		line := fmt.Sprintf("conversations: %s turns regenerated", cli.Thousands(c.turns.Load()))
		if n := c.replayed.Load(); n > 0 {
			line += fmt.Sprintf(", %s continued from the journal", cli.Thousands(n))
		}
		line += fmt.Sprintf(", %s tool calls answered from the records' results", cli.Thousands(c.paired.Load()))
		u, tr, cf := c.truncUnpaired.Load(), c.truncRounds.Load(), c.truncCtx.Load()
		line += fmt.Sprintf(", %s truncated", cli.Thousands(u+tr+cf))
		if u+tr+cf > 0 {
			line += fmt.Sprintf(" (tool_unpaired %s, tool_rounds %s, context_full %s)", cli.Thousands(u), cli.Thousands(tr), cli.Thousands(cf))
		}
		if s.PromptTokens > 0 {
			line += fmt.Sprintf("; prompt tokens served from cache %.1f%%", 100*float64(s.CachedTokens)/float64(s.PromptTokens))
		}
		lines = append(lines, line)
	}
	if cl, tl, cr := c.clamped.Load(), c.tooLong.Load(), c.contextRetries.Load(); cl+tl+cr > 0 {
		lines = append(lines, fmt.Sprintf("context of %s tokens: %s requests' max_tokens lowered to fit, %s prompts too long (%s), %s refusals for length sent again fitted",
			cli.Thousands(int64(r.context())), cli.Thousands(cl), cli.Thousands(tl), record.ReasonPromptTooLong, cli.Thousands(cr)))
	}
	if n := c.shifted.Load(); n > 0 {
		lines = append(lines, fmt.Sprintf("warning: %s answers ran past the %s-token context: the server dropped the start of their prompts while it wrote them (output.context_shifted)",
			cli.Thousands(n), cli.Thousands(int64(r.context()))))
	}
	if n := c.readdressed.Load(); n > 0 {
		lines = append(lines, fmt.Sprintf("tool calls re-addressed (their id repeated another call's in the same answer): %s", cli.Thousands(n)))
	}
	if n := c.refusedAgain.Load(); n > 0 {
		lines = append(lines, fmt.Sprintf("refused again as the errors file recorded: %s (in the errors file again)", cli.Thousands(n)))
	}
	lines = append(lines, r.tokenSummary()...)
	lines = append(lines, r.mixSummary()...)
	if n := c.empty.Load(); n > 0 {
		what := "answers"
		if r.cfg.Regenerate {
			what = "turns"
		}
		lines = append(lines, fmt.Sprintf("empty %s (no text, no tool call, finish stop): %s", what, cli.Thousands(n)))
	}
	return lines
}

// logSink sends diagnostics above the live progress block once it runs.
type logSink struct {
	env *cli.Env
	p   atomic.Pointer[cli.Progress]
}

func (l *logSink) Logf(format string, args ...any) {
	if p := l.p.Load(); p != nil {
		p.Logf(format, args...)
		return
	}
	l.env.Logf(format, args...)
}

// reportLimit is how many duplicates and failures are described on
// stderr; the rest are counted (and failures are all in the errors file).
const reportLimit = 10

// fatal stops the run with err (exit 1) after what is in flight is done.
func (r *runner) fatal(err error) {
	r.fatalOnce.Do(func() {
		r.fatalErr = err
		r.stopping.Store(true)
		r.cancelRun(err)
	})
}

// sayStopping is what the first Ctrl-C (SIGINT, SIGTERM) says at once.
func (r *runner) sayStopping() {
	n := 0
	for _, v := range r.pool.View() {
		n += v.Inflight
	}
	what := fmt.Sprintf("finishing %s requests in flight (up to %v, --grace)", cli.Thousands(int64(n)), r.cfg.Grace)
	if n == 0 {
		what = "no requests in flight"
	}
	r.logf("stopping: %s; Ctrl-C again to stop now; --resume continues", what)
}

// drain lets the requests in flight finish for up to grace, then closes
// their connections (the servers drop them; --resume redoes them).
func (r *runner) drain(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		r.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-r.clk.After(grace):
	}
	// Closed again until every request has ended: one still dialling when
	// a close came, or handed to its worker just before the stop, opens its
	// connection after it and would run to its end.
	for {
		r.pool.AbortAll()
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// summary gathers the final figures.
func (r *runner) summary(wall time.Duration) Summary {
	s := Summary{
		Read: r.c.read.Load(), Rejected: r.rejects.Total(), Duplicates: r.c.duplicates.Load(), Prompts: r.c.prompts.Load(),
		Samples: r.cfg.Samples, Answers: r.c.answers.Load(), Skipped: r.c.skipped.Load(), OK: r.c.ok.Load(), Failed: r.c.failed.Load(),
		Retries: r.c.retries.Load(), PromptTokens: r.c.promptTokens.Load(), CompletionTokens: r.c.completionTokens.Load(),
		CachedTokens: r.c.cachedTokens.Load(), FinishStop: r.c.finishStop.Load(), FinishLength: r.c.finishLength.Load(),
		FinishOther: r.c.finishOther.Load(), Wall: wall,
	}
	s.NotDone = s.Answers - s.Skipped - s.OK - s.Failed
	if u := r.unread; u != nil {
		s.NotDone += u.Answers()
		s.NotDoneAtLeast = !u.Complete
	}
	views := r.pool.View()
	eps := r.pool.Endpoints() // after View: endpoints are only ever added
	for i, v := range views {
		st := eps[i].Stats()
		e := EndpointSummary{
			Name: v.Name, Requests: st.Requests.Load(), OK: st.OK.Load(), Failures: st.Failures.Load(),
			Ejections: st.Ejections.Load(), CompletionTokens: st.CompletionTokens.Load(), Slots: v.Slots,
		}
		e.NotReady, e.NeverReady = r.pool.NeverReady(i)
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}
