package extract

import (
	"bytes"
	"strings"

	"github.com/segmentio/encoding/json"
)

// readPreference reads a preference pair: chosen and rejected (or
// LLaMA-Factory v1's chosen_messages and rejected_messages) are two
// versions of one conversation that differ in the final assistant answer.
// The prompt is what comes before that answer, which both must share
// (else the record is a preference_mismatch). Each side is a list of turns
// or, as in Anthropic's HH-RLHF, one text of "\n\nHuman: ..." and
// "\n\nAssistant: ..." turns. The whole conversation (--turns all) is the
// chosen one.
func (x *Extractor) readPreference(f *fields) *badRecord {
	if !(present(f.Chosen) && present(f.Rejected)) && !(present(f.ChosenMessages) && present(f.RejectedMessages)) {
		return x.readOpenAIPreference(f)
	}
	cname, rname, chosen, rejected := "chosen", "rejected", f.Chosen, f.Rejected
	if !present(chosen) || !present(rejected) {
		cname, rname, chosen, rejected = "chosen_messages", "rejected_messages", f.ChosenMessages, f.RejectedMessages
	}
	switch {
	case isString(chosen) && isString(rejected):
		if bad := x.readHHPair(cname, rname, chosen, rejected); bad != nil {
			return bad
		}
	case chosen[0] == '[' && rejected[0] == '[':
		if bad := x.readTurnPair(cname, rname, chosen, rejected); bad != nil {
			return bad
		}
	default:
		return reject(ReasonUnknownLayout, "%s and %s are neither two lists of turns nor two Human:/Assistant: texts", cname, rname)
	}
	if bad := x.addSystem(f.System); bad != nil {
		return bad
	}
	return x.setTools(f.Tools)
}

// readTurnPair reads both sides into x.msgs and keeps their shared
// prompt.
func (x *Extractor) readTurnPair(cname, rname string, chosen, rejected []byte) *badRecord {
	if bad := x.readTurnList(cname, chosen, 0); bad != nil {
		return bad
	}
	nc := len(x.msgs)
	if bad := x.readTurnList(rname, rejected, 0); bad != nil {
		return bad
	}
	c, r := x.msgs[:nc], x.msgs[nc:]
	for _, side := range []struct {
		name string
		msgs []message
	}{{cname, c}, {rname, r}} {
		if len(side.msgs) == 0 || side.msgs[len(side.msgs)-1].role != roleAssistant {
			return reject(ReasonUnknownLayout, "%s does not end with an assistant answer", side.name)
		}
	}
	c, r = c[:len(c)-1], r[:len(r)-1]
	if len(c) != len(r) {
		return reject(ReasonPreferenceMismatch, "%s has %d turns before its answer, %s has %d", cname, len(c), rname, len(r))
	}
	for i := range c {
		if !x.sameMessage(&c[i], &r[i]) {
			return reject(ReasonPreferenceMismatch, "%s and %s differ at turn %d, before their answers", cname, rname, i+1)
		}
	}
	x.msgs = x.msgs[:nc] // the prompt and the chosen answer (--turns all)
	return nil
}

// sameMessage compares two turns by role, text and tool calls; contents
// that are spelled differently (escapes) are compared as text.
func (x *Extractor) sameMessage(a, b *message) bool {
	if a.role != b.role || !bytes.Equal(a.toolCalls, b.toolCalls) || !bytes.Equal(a.toolCallID, b.toolCallID) {
		return false
	}
	if bytes.Equal(a.content, b.content) {
		return true
	}
	return bytes.Equal(tokenText(nil, a.content), tokenText(nil, b.content))
}

// HH-RLHF's turn markers.
const (
	hhHuman     = "\n\nHuman:"
	hhAssistant = "\n\nAssistant:"
)

// readHHPair reads two HH-RLHF texts: the prompt is each text up to its
// last "\n\nAssistant:", which must be the same in both. Each turn is the
// text after its marker as written, less the one space that follows the
// marker.
func (x *Extractor) readHHPair(cname, rname string, chosen, rejected []byte) *badRecord {
	c := string(tokenText(nil, chosen))
	r := string(tokenText(nil, rejected))
	ci, ri := strings.LastIndex(c, hhAssistant), strings.LastIndex(r, hhAssistant)
	if ci < 0 || ri < 0 {
		return reject(ReasonUnknownLayout, "%s and %s are texts without an %q answer", cname, rname, strings.TrimSpace(hhAssistant))
	}
	if c[:ci] != r[:ri] {
		return reject(ReasonPreferenceMismatch, "%s and %s differ before their last Assistant: answer", cname, rname)
	}
	prompt := strings.TrimLeft(c[:ci], " \t\r\n")
	if !strings.HasPrefix(prompt, strings.TrimSpace(hhHuman)) {
		return reject(ReasonUnknownLayout, "%s does not start with Human:", cname)
	}
	// The chosen answer ends the conversation (--turns all).
	prompt = "\n\n" + prompt + c[ci:]
	for len(prompt) > 0 {
		role := roleUser
		if strings.HasPrefix(prompt, hhHuman) {
			prompt = prompt[len(hhHuman):]
		} else {
			role, prompt = roleAssistant, prompt[len(hhAssistant):]
		}
		end := len(prompt)
		if i := strings.Index(prompt, hhHuman); i >= 0 {
			end = i
		}
		if i := strings.Index(prompt[:end], hhAssistant); i >= 0 {
			end = i
		}
		// The text as written, less the one space that follows the
		// marker: indented code keeps its indent.
		start := len(x.arena)
		x.arena = json.AppendEscape(x.arena, strings.TrimPrefix(prompt[:end], " "), 0)
		x.addMessage(role, x.arena[start:])
		prompt = prompt[end:]
	}
	return nil
}
