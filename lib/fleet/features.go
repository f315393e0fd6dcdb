package fleet

import (
	"strings"

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
