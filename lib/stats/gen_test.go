package stats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Random records for the brute-force comparison and the benchmark.

var (
	// Text pieces: multi-byte letters, an emoji (a surrogate pair when
	// escaped), characters JSON escapes, and HTML characters that
	// encoding/json writes as \u003c.
	textParts = []string{"hello ", "wörld ", "日本語の文 ", "😀", "\n", "\t", "\"quoted\" ", "back\\slash ",
		"<b>&</b> ", "a fairly long stretch of plain ascii text for the bulk of an answer. ", "\u0001", "é"}
	finishReasons = []string{"stop", "stop", "stop", "length", "abort", ""}
	sourceNames   = []string{"infinity-instruct/0625", "alpaca", "sharegpt", ""}
	endpointNames = []string{"http://127.0.0.1:30000", "http://127.0.0.1:30001", "http://10.0.0.7:8000", ""}
	errorMessages = []string{"The input (%d tokens) is longer than the model's context length (%d tokens).",
		"upstream timed out after %d retries (attempt %d)", "connection refused", "bad request"}
	statuses = []int{400, 400, 429, 500, 503, 0}
)

func randomText(rng *rand.Rand, parts int) string {
	var b strings.Builder
	for range parts {
		b.WriteString(pickOf(rng, textParts))
	}
	return b.String()
}

func pickOf[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// randomRecord builds one valid record of a random kind; ids come from a
// pool of poolSize so some repeat; scale multiplies text lengths.
func randomRecord(rng *rand.Rand, poolSize, scale int) []byte {
	m := map[string]any{}
	n := rng.IntN(poolSize)
	switch rng.IntN(3) {
	case 0:
		m["id"] = n
	case 1:
		m["id"] = fmt.Sprintf("id-%d", n)
	default:
		m["id"] = fmt.Sprintf("%032x", n)
	}
	if rng.IntN(4) == 0 {
		m["prompt"] = randomText(rng, rng.IntN(4*scale))
	} else {
		var msgs []map[string]any
		if rng.IntN(2) == 0 {
			msgs = append(msgs, map[string]any{"role": "system", "content": randomText(rng, rng.IntN(scale))})
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": randomText(rng, 1+rng.IntN(4*scale))})
		m["messages"] = msgs
	}
	if s := pickOf(rng, sourceNames); s != "" {
		m["source"] = s
	}
	if rng.IntN(5) == 0 {
		m["meta"] = map[string]any{"langdetect": "en", "label": map[string]any{"ability_en": []string{"x", "y"}}}
	}
	switch rng.IntN(6) {
	case 0: // a prompt record, sometimes expanded per sample
		if rng.IntN(3) == 0 {
			m["sample"] = rng.IntN(2)
		}
	case 1:
		e := map[string]any{"status": pickOf(rng, statuses), "attempts": 1 + rng.IntN(3),
			"message":   fmt.Sprintf(pickOf(rng, errorMessages), rng.IntN(20000), rng.IntN(9000)),
			"retriable": rng.IntN(2) == 0, "sample": rng.IntN(2)}
		if ep := pickOf(rng, endpointNames); ep != "" {
			e["endpoint"] = ep
		}
		if rng.IntN(3) == 0 { // infer's refusal of a prompt too long for the context
			e["status"], e["reason"] = 0, "prompt_too_long"
			if rng.IntN(5) != 0 {
				e["prompt_tokens"] = 4000 + rng.IntN(30000)
			}
		}
		m["error"] = e
	default:
		o := map[string]any{"text": randomText(rng, rng.IntN(8*scale)), "finish_reason": pickOf(rng, finishReasons),
			"model": "Qwen3.6-27B", "attempts": 1, "sample": rng.IntN(2)}
		if rng.IntN(3) == 0 {
			o["reasoning"] = randomText(rng, rng.IntN(6*scale))
		}
		if rng.IntN(5) != 0 {
			o["usage"] = map[string]any{"prompt_tokens": rng.IntN(5000), "completion_tokens": rng.IntN(1 << uint(1+rng.IntN(14))), "cached_tokens": 0}
		}
		if ep := pickOf(rng, endpointNames); ep != "" {
			o["endpoint"] = ep
		}
		if rng.IntN(4) == 0 { // max_tokens lowered to fit the context
			o["max_tokens"] = 1 + rng.IntN(4000)
		}
		if rng.IntN(8) != 0 {
			o["latency_ms"] = rng.IntN(90000)
		}
		m["output"] = o
	}
	line, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	// Write some characters as escapes the encoder would not use: the
	// emoji as a surrogate pair, é as \u00e9, and an id escaped ("id-\u0031"
	// is the id "id-1").
	if rng.IntN(3) == 0 {
		line = bytes.ReplaceAll(line, []byte("😀"), []byte(`\ud83d\ude00`))
		line = bytes.ReplaceAll(line, []byte("é"), []byte(`\u00e9`))
		line = bytes.Replace(line, []byte(`"id":"id-1"`), []byte(`"id":"id-\u0031"`), 1)
	}
	// And invalid UTF-8, which counts one character per bad byte.
	if rng.IntN(10) == 0 {
		line = bytes.Replace(line, []byte("hello"), []byte("hel\xff\xfeo"), 1)
	}
	return line
}
