package quality

import "strings"

// thinkMarkers are the delimiters reasoning models write around their
// thinking, and the chat-template markers around it; the server's
// reasoning parser should have taken them out. Found in an answer (or in
// separated reasoning), they mean the parser failed or was off, and the
// answer would teach a drafter to write them.
var thinkMarkers = []string{
	// DeepSeek-R1 and -V3.1, Qwen3 and QwQ, GLM-4.5, Step3, MiniMax-M1,
	// Kimi K2: <think> ... </think> (SGLang docs, "Reasoning Parser":
	// parsers deepseek-r1, deepseek-v3, qwen3, glm45, step3, kimi_k2;
	// vLLM vllm/reasoning/deepseek_r1_reasoning_parser.py).
	"<think>", "</think>",
	// <thinking> ... </thinking>: Reflection-style fine-tunes and prompts
	// that ask for a thinking block.
	"<thinking>", "</thinking>",
	// ByteDance Seed-OSS: <seed:think> ... </seed:think> (vLLM
	// vllm/reasoning/seedoss_reasoning_parser.py).
	"<seed:think>", "</seed:think>",
	// OpenAI gpt-oss, the harmony format: <|start|>assistant<|channel|>analysis
	// <|message|> ... <|end|>, then <|channel|>final<|message|> ... <|return|>
	// (openai/harmony, "The harmony response format"; SGLang parser gpt-oss).
	"<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|return|>", "<|call|>",
	// Sky-T1, Bespoke-Stratos and OpenThoughts: the system prompt's
	// <|begin_of_thought|> ... <|end_of_thought|> <|begin_of_solution|> ...
	// (NovaSky-AI/SkyThought, bespokelabs/Bespoke-Stratos-17k).
	"<|begin_of_thought|>", "<|end_of_thought|>", "<|begin_of_solution|>", "<|end_of_solution|>",
	// Kimi k1.5 and Kimi-VL-Thinking: ◁think▷ ... ◁/think▷ (SGLang parser
	// kimi; sgl-router reasoning_parser/parsers/kimi.rs).
	"◁think▷", "◁/think▷",
	// Mistral Magistral: [THINK] ... [/THINK] (vLLM
	// vllm/reasoning/mistral_reasoning_parser.py).
	"[THINK]", "[/THINK]",
}

// ThinkResidue returns the first thinking marker found in text or, failing
// that, in reasoning. A marker the prompt itself contains is a topic of
// the conversation, not residue, and is not reported.
func ThinkResidue(prompt, text, reasoning string) (marker, where string, found bool) {
	if m, ok := findMarker(text, prompt); ok {
		return m, "answer", true
	}
	if m, ok := findMarker(reasoning, prompt); ok {
		return m, "reasoning", true
	}
	return "", "", false
}

// findMarker scans s at every '<' for the angle markers, then, only when
// s holds one of the other markers' rare parts ("THINK]", found by its
// ']', or "◁"), for those in list order.
func findMarker(s, prompt string) (string, bool) {
	for i := 0; ; {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			break
		}
		i += j
		rest := s[i:]
		if len(rest) > 1 && (rest[1] == 't' || rest[1] == '/' || rest[1] == '|' || rest[1] == 's') {
			for _, m := range thinkMarkers {
				if m[0] == '<' && strings.HasPrefix(rest, m) && !strings.Contains(prompt, m) {
					return m, true
				}
			}
		}
		i++
	}
	if indexAnchored(s, "THINK]", len("THINK]")-1) < 0 && !strings.Contains(s, "◁") {
		return "", false
	}
	for _, m := range thinkMarkers {
		if m[0] != '<' && strings.Contains(s, m) && !strings.Contains(prompt, m) {
			return m, true
		}
	}
	return "", false
}
