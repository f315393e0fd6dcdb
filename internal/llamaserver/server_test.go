package llamaserver

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"tokenmill/internal/gguf"
	"tokenmill/internal/lifeline"
	"tokenmill/internal/testbin"
)

// TestFind checks what this package adds to lifeline.Find (whose own test
// covers the search order): with PATH and the cache empty, an error that
// is ErrNotInstalled and says how to install it and where it looked.
func TestFind(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvBinary, "")
	t.Setenv(EnvCache, cache)
	t.Setenv("PATH", t.TempDir())
	want := "llama-server not installed: build llama.cpp's llama-server (CPU is enough) and set TOKENMILL_LLAMA_SERVER to it (looked in " + filepath.Join(cache, "bin") + " and PATH)"
	if got, err := Find(); err == nil || err.Error() != want || !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Find() = %q, %v; want ErrNotInstalled saying %q", got, err, want)
	}
}

// TestServe starts llama-server on the tiny English model, has it
// tokenize and render a chat, and checks that nothing of it is left once
// the test ends.
func TestServe(t *testing.T) {
	testbin.Long(t, "a real llama.cpp server")
	if _, err := Find(); err != nil {
		t.Skip(err)
	}
	var pgid int
	var url string
	t.Run("serve", func(t *testing.T) {
		srv := Start(t, Options{Model: gguf.Llama{ChatTemplate: gguf.DefaultChatTemplate}})
		pgid, url = srv.proc.Group(), srv.URL
		t.Logf("llama-server %s ready in %v (build %s)", srv.Binary, srv.Ready, srv.BuildInfo)
		var tok struct{ Tokens []int }
		if err := srv.Call("/tokenize", map[string]any{"content": "the world", "add_special": false}, &tok); err != nil {
			t.Fatal(err)
		}
		// "▁the" and "▁world" are whole pieces of the English vocabulary.
		voc := gguf.EnglishVocab()
		var pieces []string
		for _, id := range tok.Tokens {
			pieces = append(pieces, voc.Tokens[id])
		}
		if strings.Join(pieces, "|") != "\u2581the|\u2581world" {
			t.Errorf("tokens %v are %q", tok.Tokens, pieces)
		}
		var tmpl struct{ Prompt string }
		if err := srv.Call("/apply-template", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}}, &tmpl); err != nil {
			t.Fatal(err)
		}
		if tmpl.Prompt != "user: hi\nassistant:" {
			t.Errorf("rendered %q", tmpl.Prompt)
		}
	})
	if pgid == 0 {
		t.Skip("the server did not start")
	}
	lifeline.CheckGone(t, pgid, url+"/health")
}

// TestPortTaken hands Start a port another listener holds: the server
// cannot bind it and exits, and Start tries again on another port.
func TestPortTaken(t *testing.T) {
	testbin.Long(t, "a real llama.cpp server")
	if _, err := Find(); err != nil {
		t.Skip(err)
	}
	taken := lifeline.TakenPort(t)
	srv := Start(t, Options{})
	if strings.HasSuffix(srv.URL, fmt.Sprintf(":%d", taken)) {
		t.Fatalf("the server claims the taken port %d", taken)
	}
}
