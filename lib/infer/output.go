package infer

import (
	"time"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/clock"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// flushEvery flushes the writers every interval until stop is closed, so
// that finished answers reach the file within a second whatever the rate.
func flushEvery(clk clock.Clock, interval time.Duration, stop <-chan struct{}, ws ...*jsonl.Appender) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			for _, w := range ws {
				if w != nil {
					w.Flush()
				}
			}
		case <-stop:
			return
		}
	}
}

// stripOwnFields removes an "output" or "error" field a record already
// carries (it is being generated again), keeping every other byte. A
// record without them is returned unchanged.
func stripOwnFields(raw []byte) ([]byte, error) {
	has := false
	err := record.EachField(raw, func(key string, _ []byte) error {
		if key == "output" || key == "error" {
			has = true
		}
		return nil
	})
	if err != nil || !has {
		return raw, err
	}
	return record.WithoutFields(nil, raw, "output", "error")
}

// recordLine is the prompt record with its "output" or "error" field,
// key, holding v.
func recordLine(dst, prompt []byte, key string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return record.AppendField(dst, prompt, key, b)
}
