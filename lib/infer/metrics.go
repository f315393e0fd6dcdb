package infer

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tokenmill/lib/fleet"
)

// metrics serves the run's figures in Prometheus text format: the same
// counters the progress display and the summary read, collected on each
// scrape rather than kept twice.
type metrics struct {
	r *runner

	read, rejected, duplicates, answers, skipped *prometheus.Desc
	ok, failed, retries, backingOff, queued      *prometheus.Desc
	tokens, finish, tokRate                      *prometheus.Desc
	epInflight, epSlots, epUp, epRequests        *prometheus.Desc
	epOK, epFailures, epTokens, epRate, epEject  *prometheus.Desc
}

func newMetrics(r *runner) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("tokenmill_infer_"+name, help, labels, nil)
	}
	return &metrics{
		r:          r,
		read:       d("records_read_total", "Input records read."),
		rejected:   d("records_rejected_total", "Input records rejected (see --rejects)."),
		duplicates: d("records_duplicate_total", "Input records whose id was already read (generated once)."),
		answers:    d("answers_total", "Answers asked for: prompts times --samples."),
		skipped:    d("answers_skipped_total", "Answers already in the output file (--resume)."),
		ok:         d("answers_ok_total", "Answers written to the output."),
		failed:     d("answers_failed_total", "Answers written to the errors file."),
		retries:    d("retries_total", "Attempts that were tried again."),
		backingOff: d("answers_backing_off", "Answers waiting out a retry backoff."),
		queued:     d("answers_queued", "Answers read and waiting for a free slot."),
		tokens:     d("tokens_total", "Tokens of the answers written.", "kind"),
		finish:     d("finish_reason_total", "Answers written, by finish_reason.", "reason"),
		tokRate:    d("completion_tokens_per_second", "Completion tokens per second over the last minute."),
		epInflight: d("endpoint_inflight", "Requests in flight.", "endpoint"),
		epSlots:    d("endpoint_slots", "In-flight cap.", "endpoint"),
		epUp:       d("endpoint_up", "1 when the endpoint is in service.", "endpoint"),
		epRequests: d("endpoint_requests_total", "Requests sent.", "endpoint"),
		epOK:       d("endpoint_answers_ok_total", "Answers received.", "endpoint"),
		epFailures: d("endpoint_failures_total", "Failed attempts.", "endpoint"),
		epTokens:   d("endpoint_completion_tokens_total", "Completion tokens received.", "endpoint"),
		epRate:     d("endpoint_completion_tokens_per_second", "Completion tokens per second over the last minute.", "endpoint"),
		epEject:    d("endpoint_ejections_total", "Times the endpoint was taken out of service.", "endpoint"),
	}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.read, m.rejected, m.duplicates, m.answers, m.skipped, m.ok, m.failed,
		m.retries, m.backingOff, m.queued, m.tokens, m.finish, m.tokRate, m.epInflight, m.epSlots, m.epUp,
		m.epRequests, m.epOK, m.epFailures, m.epTokens, m.epRate, m.epEject} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	c := &m.r.c
	now := m.r.clk.Now()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(m.read, c.read.Load())
	counter(m.rejected, m.r.rejects.Total())
	counter(m.duplicates, c.duplicates.Load())
	counter(m.answers, c.answers.Load())
	counter(m.skipped, c.skipped.Load())
	counter(m.ok, c.ok.Load())
	counter(m.failed, c.failed.Load())
	counter(m.retries, c.retries.Load())
	gauge(m.backingOff, float64(c.backingOff.Load()))
	gauge(m.queued, float64(c.queued.Load()))
	counter(m.tokens, c.promptTokens.Load(), "prompt")
	counter(m.tokens, c.completionTokens.Load(), "completion")
	counter(m.tokens, c.cachedTokens.Load(), "cached")
	counter(m.finish, c.finishStop.Load(), "stop")
	counter(m.finish, c.finishLength.Load(), "length")
	counter(m.finish, c.finishOther.Load(), "other")
	gauge(m.tokRate, c.tokenRate.Rate(now, time.Minute))
	views := m.r.pool.View()
	eps := m.r.pool.Endpoints() // after View: endpoints are only ever added
	for i, v := range views {
		st := eps[i].Stats()
		up := 0.0
		if v.State == fleet.StateReady {
			up = 1
		}
		gauge(m.epInflight, float64(v.Inflight), v.Name)
		gauge(m.epSlots, float64(v.Slots), v.Name)
		gauge(m.epUp, up, v.Name)
		counter(m.epRequests, st.Requests.Load(), v.Name)
		counter(m.epOK, st.OK.Load(), v.Name)
		counter(m.epFailures, st.Failures.Load(), v.Name)
		counter(m.epTokens, st.CompletionTokens.Load(), v.Name)
		gauge(m.epRate, st.Rate.Rate(now, time.Minute), v.Name)
		counter(m.epEject, st.Ejections.Load(), v.Name)
	}
}

// serveMetrics listens on addr and serves /metrics until stop is called.
func serveMetrics(addr string, m *metrics) (stop func(), bound string, err error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the run goes on without metrics
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, ln.Addr().String(), nil
}
