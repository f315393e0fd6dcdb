package fleet

import (
	"bytes"
	"math"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// serverLoad is what a server's metrics said when last read: the requests
// it was generating and those waiting in its queue (all clients').
type serverLoad struct {
	running, waiting int
	at               time.Time // zero: never read
}

// read sums the two gauges over their label sets (vLLM has one per
// engine) in a Prometheus text answer; false when either is missing or
// the answer does not parse.
func (m *metricNames) read(body []byte) (serverLoad, bool) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return serverLoad{}, false
	}
	sum := func(name string) (int, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
		total := 0.0
		for _, mt := range f.GetMetric() {
			v := mt.GetGauge().GetValue()
			if mt.Gauge == nil && mt.Untyped != nil {
				v = mt.GetUntyped().GetValue()
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e9 {
				return 0, false
			}
			total += v
		}
		return int(total + 0.5), true
	}
	r, ok1 := sum(m.running)
	w, ok2 := sum(m.waiting)
	return serverLoad{running: r, waiting: w}, ok1 && ok2
}
