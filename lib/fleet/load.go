package fleet

import (
	"bytes"
	"math"
	"time"

	"github.com/segmentio/encoding/json"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// serverLoad is what a server's metrics said when last read: the requests
// it was generating and those waiting in its queue (all clients').
type serverLoad struct {
	running, waiting int
	at               time.Time // zero: never read
}

// loadSource is a route that tells a server's load, and how to read it.
type loadSource interface {
	path() string
	describe() string // for the endpoint's Info.Metrics
	// read takes an answer of the route, ours the requests this client has
	// in flight there.
	read(body []byte, ours int) (serverLoad, bool)
}

func (m *metricNames) path() string     { return pathMetrics }
func (m *metricNames) describe() string { return pathMetrics + " " + m.running + ", " + m.waiting }

// read sums the two gauges over their label sets (vLLM has one per
// engine) in a Prometheus text answer; false when either is missing or
// the answer does not parse.
func (m *metricNames) read(body []byte, _ int) (serverLoad, bool) {
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

// pathSlots is llama.cpp's list of its slots, each saying whether it is
// processing a request (tools/server/server.cpp, on by default; --no-slots
// turns it off).
const pathSlots = "/slots"

// slotsSource reads llama.cpp's /slots: the busy slots are the requests
// it runs; it says nothing of its queue, but once every slot is busy,
// those of ours beyond them wait.
type slotsSource struct{}

func (slotsSource) path() string     { return pathSlots }
func (slotsSource) describe() string { return pathSlots + " is_processing" }

func (slotsSource) read(body []byte, ours int) (serverLoad, bool) {
	busy, total, ok := parseSlots(body)
	if !ok {
		return serverLoad{}, false
	}
	load := serverLoad{running: busy}
	if busy == total {
		load.waiting = max(0, ours-busy)
	}
	return load, true
}

// parseSlots counts the slots of a /slots answer and the busy ones:
// is_processing (llama.cpp since b4000 or so), or a non-zero state
// (older builds: SLOT_STATE_IDLE is 0).
func parseSlots(body []byte) (busy, total int, ok bool) {
	var slots []struct {
		ID           *int  `json:"id"`
		IsProcessing *bool `json:"is_processing"`
		State        *int  `json:"state"`
	}
	if json.Unmarshal(body, &slots) != nil || len(slots) == 0 {
		return 0, 0, false
	}
	for _, s := range slots {
		switch {
		case s.ID == nil || s.IsProcessing == nil && s.State == nil:
			return 0, 0, false
		case s.IsProcessing != nil && *s.IsProcessing, s.IsProcessing == nil && *s.State != 0:
			busy++
		}
	}
	return busy, len(slots), true
}
