package llmsim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// seedBodies are request bodies from the golden files plus odd ones.
func seedBodies(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		var g golden
		if err := json.Unmarshal(b, &g); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(g.Request.Body))
		f.Add([]byte(g.Request.RawBody))
	}
	for _, s := range []string{
		``, `null`, `[]`, `"x"`, `{"messages":null}`, `{"messages":[{"role":"user","content":null}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url"}]}],"n":0}`, `{"messages":[],"max_tokens":-1}`,
		`{"prompt":["a","b"]}`, `{"prompt":"x","max_tokens":1e9}`, `{"text":["a"]}`, `{"input_ids":[[1,2]]}`,
		`{"input_ids":[]}`, `{"text":"a","sampling_params":{"max_new_tokens":-3}}`, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\\\"\"}]}",
	} {
		f.Add([]byte(s))
	}
}

// fuzzParser checks that a parser never panics and that what it accepts
// renders as valid JSON, through the same path a request takes.
func fuzzParser(f *testing.F, parse func([]byte) (*job, error)) {
	seedBodies(f)
	cfg, err := (&Config{ContextLength: 4096}).withDefaults()
	if err != nil {
		f.Fatal(err)
	}
	e := &Endpoint{f: &Fleet{cfg: cfg}, d: dialectOf(cfg.Flavor)}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := parse(body)
		if err != nil {
			if _, ok := err.(*requestError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if j.n < 1 || j.n > maxChoices {
			t.Fatalf("accepted n=%d", j.n)
		}
		fl, err := e.newFlight(j, 1)
		if err != nil {
			return
		}
		for _, c := range fl.choices {
			c.visible.Store(int32(min(c.Target, 64)))
		}
		var out []byte
		switch j.api {
		case apiChat:
			out = fl.appendChat(nil)
		case apiCompletion:
			out = fl.appendCompletion(nil)
		default:
			out = fl.appendGenerate(nil, min(fl.choices[0].Target, 64), true)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON answer: %s", out)
		}
	})
}

func FuzzParseChat(f *testing.F)       { fuzzParser(f, parseChat) }
func FuzzParseCompletion(f *testing.F) { fuzzParser(f, parseCompletion) }
func FuzzParseGenerate(f *testing.F)   { fuzzParser(f, parseGenerate) }
