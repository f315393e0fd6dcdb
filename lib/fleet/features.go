package fleet

import (
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
)

// A refusal tied to one feature of a request, not to the run: the server
// answers requests without it. Records that need the feature fail with a
// reason naming it; the others go on, and such refusals are never taken
// for a systematic stop.

// toolRefusals are what servers say when they refuse a request for the
// tools it offers:
//   - Ollama (server/routes.go ChatHandler): "registry.ollama.ai/library/
//     tiny:latest does not support tools", 400, for a model whose template
//     does not use them;
//   - vLLM (serving_chat.py): "\"auto\" tool choice requires
//     --enable-auto-tool-choice and --tool-call-parser to be set", 400;
//   - llama.cpp (server-common.cpp oaicompat_chat_params_parse): "tools
//     param requires --jinja flag", 400/500.
var toolRefusals = []string{"does not support tools", "tool choice requires --enable-auto-tool-choice", "tools param requires --jinja"}

// ToolsRefused tells a refusal of a request for the tools it offers.
func ToolsRefused(f *Failure) bool {
	if f == nil || f.Status != fasthttp.StatusBadRequest && f.Status != fasthttp.StatusInternalServerError {
		return false
	}
	low := strings.ToLower(f.Message)
	for _, s := range toolRefusals {
		if strings.Contains(low, s) {
			return true
		}
	}
	return false
}

// A server that takes tools its template cannot render: llama.cpp with
// --jinja answers a request with tools 200 and leaves them out of the
// prompt when its template does not use them, which its /props says
// (chat_template_caps.supports_tools, from rendering the template with a
// tool: common/chat.cpp, minja's caps). Such an endpoint is not sent
// requests with tools: their records fail as tools_unsupported, as where
// the server refuses them itself (Ollama), rather than being answered as
// if no tools were offered.

// propsNoTools says why an endpoint whose /props is body is not sent
// tools ("" when it is, or does not say).
func propsNoTools(body []byte) string {
	var pr struct {
		Caps *struct {
			SupportsTools *bool `json:"supports_tools"`
		} `json:"chat_template_caps"`
	}
	if json.Unmarshal(body, &pr) != nil || pr.Caps == nil || pr.Caps.SupportsTools == nil || *pr.Caps.SupportsTools {
		return ""
	}
	return "its chat template does not support tools (" + pathProps + " chat_template_caps.supports_tools is false): it would answer with the tools left out of the prompt"
}

// ToolsUnsupported says why ep is not sent requests with tools ("" when
// it is).
func (p *Pool) ToolsUnsupported(ep *Endpoint) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ep.info.NoTools
}
