// Package metrics serves a command's figures in Prometheus text format,
// read from the command's own counters on each scrape rather than kept
// twice: a command lists them in one function, and Serve does the rest.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Scrape is one scrape's figures, each named under the server's prefix.
type Scrape struct {
	prefix string
	ch     chan<- prometheus.Metric
}

// Counter adds a counter; labels are name, value pairs.
func (s *Scrape) Counter(name, help string, v int64, labels ...string) {
	s.add(prometheus.CounterValue, name, help, float64(v), labels)
}

// Gauge adds a gauge; labels are name, value pairs.
func (s *Scrape) Gauge(name, help string, v float64, labels ...string) {
	s.add(prometheus.GaugeValue, name, help, v, labels)
}

func (s *Scrape) add(kind prometheus.ValueType, name, help string, v float64, labels []string) {
	var names, values []string
	for i := 0; i+1 < len(labels); i += 2 {
		names, values = append(names, labels[i]), append(values, labels[i+1])
	}
	d := prometheus.NewDesc(s.prefix+name, help, names, nil)
	s.ch <- prometheus.MustNewConstMetric(d, kind, v, values...)
}

// collector is an unchecked collector (it describes nothing ahead): its
// figures are whatever collect lists on each scrape.
type collector struct {
	prefix  string
	collect func(*Scrape)
}

func (c collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) { c.collect(&Scrape{prefix: c.prefix, ch: ch}) }

// Serve listens on addr and serves at /metrics what collect lists, each
// name under prefix, until stop is called; bound is the address bound.
func Serve(addr, prefix string, collect func(*Scrape)) (stop func(), bound string, err error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector{prefix, collect}); err != nil {
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
			_ = err // the command goes on without metrics
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, ln.Addr().String(), nil
}
