package merge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/segmentio/encoding/json"
)

// armInputs are answers of a mixture's arms: thinking on (with a system
// prompt), off (without one), an effort arm that says nothing of
// enable_thinking, one without an arm, and a regenerated conversation.
func armInputs(t *testing.T) string {
	t.Helper()
	lines := []string{
		`{"id":"a","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"output":{"text":"Hello.","reasoning":"Greet.","finish_reason":"stop","sample":0,"arm":"think","arm_params":{"chat_template_kwargs":{"enable_thinking":true}},"prompt_token_ids":[1,2],"token_ids":[3]}}`,
		`{"id":"b","messages":[{"role":"user","content":"Hi"}],"output":{"text":"Hello!","finish_reason":"stop","sample":1,"arm":"no_think","arm_params":{"chat_template_kwargs":{"enable_thinking":false},"temperature":0.7},"prompt_token_ids":[1,2],"token_ids":[4,5]}}`,
		`{"id":"c","messages":[{"role":"user","content":"Hi"}],"system":"Top level.","output":{"text":"Hey.","finish_reason":"stop","sample":0,"arm":"effort_high","arm_params":{"reasoning_effort":"high"},"prompt_token_ids":[1],"token_ids":[6]}}`,
		`{"id":"d","messages":[{"role":"user","content":"Hi"}],"output":{"text":"Yo.","finish_reason":"stop","sample":0,"prompt_token_ids":[1],"token_ids":[7]}}`,
		`{"id":"e","messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"old"}],"output":{"messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":"new"}],"turns":[{"message":1,"finish_reason":"stop","prompt_token_ids":[1],"token_ids":[8]}],"finish_reason":"stop","sample":0,"arm":"think","arm_params":{"chat_template_kwargs":{"enable_thinking":true}}}}`,
	}
	path := filepath.Join(t.TempDir(), "gen.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var wantArm = map[string]string{"a": "think", "b": "no_think", "c": "effort_high", "d": "", "e": "think"}

// TestArmInEveryForm: each training form carries the answer's arm, in
// JSONL and in Parquet; --soft-switch ends the system prompt with Qwen3's
// /think or /no_think as the arm turned thinking on or off, and leaves the
// others alone.
func TestArmInEveryForm(t *testing.T) {
	in := armInputs(t)
	type training struct {
		ID            string         `json:"id"`
		Arm           *string        `json:"arm"`
		Messages      []trainMessage `json:"messages"`
		Conversations []struct {
			Role    string `json:"role"`
			From    string `json:"from"`
			Content string `json:"content"`
			Value   string `json:"value"`
		} `json:"conversations"`
	}
	// The first turn of each record: its system prompt, with and without the switch.
	firstTurn := map[string][2]string{
		"a": {"Be brief.", "Be brief. /think"}, "b": {"Hi", "/no_think"}, "c": {"Top level.", "Top level."},
		"d": {"Hi", "Hi"}, "e": {"Q1", "/think"},
	}
	for _, to := range []string{toMessages, toConversations, toShareGPT} {
		for k, flags := range [][]string{nil, {"--soft-switch"}} {
			code, out, stderr := runMerge(t, context.Background(), nil, append([]string{"--to", to, in}, flags...)...)
			if code != 0 {
				t.Fatalf("--to %s %v: exit %d\n%s", to, flags, code, stderr)
			}
			n := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var r training
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				n++
				got := ""
				if r.Arm != nil {
					got = *r.Arm
				}
				if got != wantArm[r.ID] || (r.Arm != nil) != (wantArm[r.ID] != "") {
					t.Errorf("--to %s: %s has arm %v, want %q", to, r.ID, r.Arm, wantArm[r.ID])
				}
				first := ""
				switch {
				case len(r.Messages) > 0:
					first = r.Messages[0].Content
				case r.Conversations[0].Value != "":
					first = r.Conversations[0].Value
				default:
					first = r.Conversations[0].Content
				}
				if want := firstTurn[r.ID][k]; first != want {
					t.Errorf("--to %s %v: %s opens with %q, want %q", to, flags, r.ID, first, want)
				}
			}
			if n != len(wantArm) {
				t.Errorf("--to %s: %d records, want %d", to, n, len(wantArm))
			}
		}
	}

	// Token rows, JSONL and Parquet; and the chat forms in Parquet.
	code, out, stderr := runMerge(t, context.Background(), nil, "--to", "tokens", in)
	if code != 0 {
		t.Fatalf("--to tokens: exit %d\n%s", code, stderr)
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			ID  string  `json:"id"`
			Arm *string `json:"arm"`
		}
		json.Unmarshal([]byte(line), &r)
		rows++
		if got := deref(r.Arm); got != wantArm[r.ID] {
			t.Errorf("token row of %s: arm %q, want %q", r.ID, got, wantArm[r.ID])
		}
	}
	if rows != len(wantArm) {
		t.Errorf("%d token rows, want %d", rows, len(wantArm))
	}
	dir := t.TempDir()
	for _, to := range []string{toMessages, toConversations, toShareGPT, toTokens} {
		pq := filepath.Join(dir, to+".parquet")
		if code, _, stderr := runMerge(t, context.Background(), nil, "--to", to, "-o", pq, in); code != 0 {
			t.Fatalf("--to %s -o %s: exit %d\n%s", to, pq, code, stderr)
		}
		got := parquetArms(t, to, pq)
		if len(got) != len(wantArm) {
			t.Errorf("%s: %d rows, want %d", pq, len(got), len(wantArm))
		}
		for id, arm := range wantArm {
			if got[id] != arm {
				t.Errorf("%s: %s has arm %q, want %q", pq, id, got[id], arm)
			}
		}
	}
	for _, to := range []string{"tokens", "generation"} {
		if code, _, stderr := runMerge(t, context.Background(), nil, "--to", to, "--soft-switch", in); code != 2 || !strings.Contains(stderr, "--soft-switch applies to --to messages") {
			t.Errorf("--soft-switch --to %s: exit %d\n%s", to, code, stderr)
		}
	}
}

// parquetArms reads the arm of each row of pq, a Parquet file of --to to.
func parquetArms(t *testing.T, to, pq string) map[string]string {
	t.Helper()
	got := map[string]string{}
	switch to {
	case toMessages:
		rs, err := parquet.ReadFile[pqMessagesRow](pq)
		for _, r := range rs {
			got[r.ID] = deref(r.Arm)
		}
		check(t, err)
	case toConversations:
		rs, err := parquet.ReadFile[pqConversationsRow](pq)
		for _, r := range rs {
			got[r.ID] = deref(r.Arm)
		}
		check(t, err)
	case toShareGPT:
		rs, err := parquet.ReadFile[pqShareGPTRow](pq)
		for _, r := range rs {
			got[r.ID] = deref(r.Arm)
		}
		check(t, err)
	default:
		rs, err := parquet.ReadFile[pqTokenRow](pq)
		for _, r := range rs {
			got[r.ID] = deref(r.Arm)
		}
		check(t, err)
	}
	return got
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
