package infer

import (
	"sync/atomic"
	"time"

	"tokenmill/lib/fleet"
	"tokenmill/lib/record"
)

// counters are the run's figures, shared by the progress display, the
// metrics endpoint and the final summary, so all three always agree.
//
// Accounting: every record read is rejected, a duplicate, or a prompt;
// every prompt is --samples answers; every answer is skipped (already in
// the output), ok, failed (in the errors file), or not done (the run was
// interrupted, or stopped on a fatal error, first):
//
//	read    = rejected + duplicates + prompts
//	answers = prompts * samples = skipped + ok + failed + notDone
//
// They are one atomic a figure, more than a struct should hold, because
// the reader, the workers, the display, the metrics and the summary all
// touch them at once, without a lock.
type counters struct {
	read       atomic.Int64
	duplicates atomic.Int64
	prompts    atomic.Int64
	answers    atomic.Int64
	skipped    atomic.Int64
	ok         atomic.Int64
	failed     atomic.Int64
	retries    atomic.Int64 // attempts that were tried again
	// refusedAgain: failed answers refused as the errors file of the run
	// being resumed recorded them.
	refusedAgain atomic.Int64
	// readdressed: tool calls whose id repeated another call's in the same
	// answer, given one of their own.
	readdressed atomic.Int64
	backingOff  atomic.Int64 // answers waiting out a backoff
	queued      atomic.Int64 // answers read, not yet dispatched

	promptTokens     atomic.Int64
	completionTokens atomic.Int64
	cachedTokens     atomic.Int64
	finishStop       atomic.Int64
	finishLength     atomic.Int64
	finishOther      atomic.Int64
	empty            atomic.Int64 // answers (or turns) with no text and no calls that finished with "stop"

	// Conversations (--regenerate): turns regenerated, turns replayed
	// from the journal, tool calls answered from cached results, and
	// conversations truncated by reason.
	turns, replayed, paired atomic.Int64

	// Fitting the context: requests sent with a lowered max_tokens,
	// prompts refused as too long, refusals for length sent again.
	clamped, tooLong, contextRetries     atomic.Int64
	shifted                              atomic.Int64 // answers past the context (output.context_shifted)
	truncUnpaired, truncRounds, truncCtx atomic.Int64

	tokenRate  fleet.RateWindow // completion tokens per second, whole fleet
	answerRate fleet.RateWindow
}

// finishReason files an answer's finish_reason under the summary's counts.
func (c *counters) finishReason(reason string) {
	switch reason {
	case record.FinishStop:
		c.finishStop.Add(1)
	case record.FinishLength:
		c.finishLength.Add(1)
	default:
		c.finishOther.Add(1)
	}
}

// truncated counts a conversation that ended early for reason.
func (c *counters) truncated(reason string) {
	switch reason {
	case record.TruncToolUnpaired:
		c.truncUnpaired.Add(1)
	case record.TruncToolRounds:
		c.truncRounds.Add(1)
	default:
		c.truncCtx.Add(1)
	}
}

// Summary is the outcome of a run, as printed at the end.
type Summary struct {
	Read, Rejected, Duplicates, Prompts int64
	Samples                             int
	Answers, Skipped, OK, Failed        int64
	// NotDone is every answer of the input with neither an answer nor an
	// error record, those an interrupted run did not read included;
	// NotDoneAtLeast when the rest of the input could not be read to its
	// end in time.
	NotDone                        int64
	NotDoneAtLeast                 bool
	Retries                        int64
	PromptTokens, CompletionTokens int64
	CachedTokens                   int64
	FinishStop, FinishLength       int64
	FinishOther                    int64
	Wall                           time.Duration
	Endpoints                      []EndpointSummary
}

// EndpointSummary is one endpoint's share of a run.
type EndpointSummary struct {
	Name             string
	Requests, OK     int64
	Failures         int64
	Ejections        int64
	CompletionTokens int64
	Slots            int
	// NeverReady: the endpoint was not ready once during the run;
	// NotReady is what its last probe saw.
	NeverReady bool
	NotReady   string
}
