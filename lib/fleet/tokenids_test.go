package fleet

import (
	"strings"
	"testing"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// Where each kind and version of server returns token ids, or why none.
func TestTokenShape(t *testing.T) {
	cases := []struct {
		server, version string
		api             openai.API
		shape           openai.TokenShape
		refusal         string
	}{
		{KindVLLM, "0.11.0", openai.APIChat, openai.ShapeVLLM, ""},
		{KindVLLM, "0.10.2", openai.APICompletions, openai.ShapeVLLM, ""},
		{KindVLLM, "0.10.2rc1", openai.APIChat, openai.ShapeVLLM, ""},
		{KindVLLM, "v0.9.1", openai.APIChat, openai.ShapeVLLMLogprobs, ""},
		{KindVLLM, "0.10.1.1", openai.APICompletions, openai.ShapeNone, "return_token_ids came with 0.10.2"},
		{KindVLLM, "0.11.0", openai.APIGenerate, openai.ShapeNone, "no --api generate"},
		{KindSGLang, "0.5.4", openai.APIGenerate, openai.ShapeSGLang, ""},
		{KindLlamaCpp, "b6097", openai.APICompletions, openai.ShapeLlama, ""},
		{KindOllama, "0.6.5", openai.APIChat, openai.ShapeNone, "Ollama 0.6.5 returns no token ids"},
		{KindGateway, "", openai.APIChat, openai.ShapeNone, "gateway returns no token ids"},
	}
	for _, c := range cases {
		s, err := TokenShape(record.ServedBy{Server: c.server, Version: c.version}, c.api)
		if s != c.shape || (err == nil) != (c.refusal == "") || err != nil && !strings.Contains(err.Error(), c.refusal) {
			t.Errorf("%s %s --api %s: shape %d, %v; want %d, %q", c.server, c.version, c.api, s, err, c.shape, c.refusal)
		}
	}
}
