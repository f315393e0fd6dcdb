package infer

import (
	"time"

	"tokenmill/lib/fleet"
	"tokenmill/lib/metrics"
)

// collect lists the run's figures for --metrics-addr: the same counters
// the progress display and the summary read.
func (r *runner) collect(s *metrics.Scrape) {
	c := &r.c
	now := r.clk.Now()
	s.Counter("records_read_total", "Input records read.", c.read.Load())
	s.Counter("records_rejected_total", "Input records rejected (see --rejects).", r.rejects.Total())
	s.Counter("records_duplicate_total", "Input records whose id was already read (generated once).", c.duplicates.Load())
	s.Counter("answers_total", "Answers asked for: prompts times --samples.", c.answers.Load())
	s.Counter("answers_skipped_total", "Answers already in the output file (--resume).", c.skipped.Load())
	s.Counter("answers_ok_total", "Answers written to the output.", c.ok.Load())
	s.Counter("answers_failed_total", "Answers written to the errors file.", c.failed.Load())
	s.Counter("retries_total", "Attempts that were tried again.", c.retries.Load())
	s.Gauge("answers_backing_off", "Answers waiting out a retry backoff.", float64(c.backingOff.Load()))
	s.Gauge("answers_queued", "Answers read and waiting for a free slot.", float64(c.queued.Load()))
	const tokens, finish = "Tokens of the answers written.", "Answers written, by finish_reason."
	s.Counter("tokens_total", tokens, c.promptTokens.Load(), "kind", "prompt")
	s.Counter("tokens_total", tokens, c.completionTokens.Load(), "kind", "completion")
	s.Counter("tokens_total", tokens, c.cachedTokens.Load(), "kind", "cached")
	s.Counter("finish_reason_total", finish, c.finishStop.Load(), "reason", "stop")
	s.Counter("finish_reason_total", finish, c.finishLength.Load(), "reason", "length")
	s.Counter("finish_reason_total", finish, c.finishOther.Load(), "reason", "other")
	s.Gauge("completion_tokens_per_second", "Completion tokens per second over the last minute.", c.tokenRate.Rate(now, time.Minute))
	views := r.pool.View()
	eps := r.pool.Endpoints() // after View: endpoints are only ever added
	for i, v := range views {
		st, ep := eps[i].Stats(), []string{"endpoint", v.Name}
		up := 0.0
		if v.State == fleet.StateReady {
			up = 1
		}
		s.Gauge("endpoint_inflight", "Requests in flight.", float64(v.Inflight), ep...)
		s.Gauge("endpoint_slots", "In-flight cap.", float64(v.Slots), ep...)
		s.Gauge("endpoint_up", "1 when the endpoint is in service.", up, ep...)
		s.Counter("endpoint_requests_total", "Requests sent.", st.Requests.Load(), ep...)
		s.Counter("endpoint_answers_ok_total", "Answers received.", st.OK.Load(), ep...)
		s.Counter("endpoint_failures_total", "Failed attempts.", st.Failures.Load(), ep...)
		s.Counter("endpoint_completion_tokens_total", "Completion tokens received.", st.CompletionTokens.Load(), ep...)
		s.Gauge("endpoint_completion_tokens_per_second", "Completion tokens per second over the last minute.", st.Rate.Rate(now, time.Minute), ep...)
		s.Counter("endpoint_ejections_total", "Times the endpoint was taken out of service.", st.Ejections.Load(), ep...)
	}
}
