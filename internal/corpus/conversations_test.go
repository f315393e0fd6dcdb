package corpus

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"tokenmill/internal/testbin"
)

func conversationLines(seed uint64, n int) ([]byte, ConversationCounts) {
	g := NewConversations(seed)
	var out []byte
	for range n {
		out = append(AppendConversation(out, g.Next()), '\n')
	}
	return out, g.Counts()
}

type shareGPT struct {
	ID            string `json:"id"`
	System        string `json:"system"`
	Tools         string `json:"tools"`
	Conversations []Turn `json:"conversations"`
}

func TestConversationsDeterministic(t *testing.T) {
	a, ca := conversationLines(5, 300)
	b, cb := conversationLines(5, 300)
	c, _ := conversationLines(6, 300)
	if !bytes.Equal(a, b) || ca != cb {
		t.Fatal("the same seed gave different conversations")
	}
	if bytes.Equal(a, c) {
		t.Fatal("another seed gave the same conversations")
	}
}

// TestConversationsShape checks every conversation against the layout and
// recounts from the output what the generator says it made.
func TestConversationsShape(t *testing.T) {
	const n = 3000
	data, counts := conversationLines(11, n)
	var got ConversationCounts
	byLength := map[int]int{}
	for i, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var c shareGPT
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		if c.ID != "conv-"+strconv.Itoa(i) {
			t.Fatalf("line %d: id %q", i+1, c.ID)
		}
		turns := c.Conversations
		if len(turns) < 2 || len(turns) > 10 || turns[0].From != "human" || turns[1].From == "human" {
			t.Fatalf("line %d: %d turns, from %s to %s", i+1, len(turns), turns[0].From, turns[len(turns)-1].From)
		}
		byLength[len(turns)]++
		names := map[string]bool{}
		if c.Tools != "" {
			var fns []struct{ Name string }
			if err := json.Unmarshal([]byte(c.Tools), &fns); err != nil || len(fns) == 0 {
				t.Fatalf("line %d: tools %q: %v", i+1, c.Tools, err)
			}
			for _, f := range fns {
				names[f.Name] = true
			}
			got.WithTools++
		}
		if c.System != "" {
			got.WithSystem++
		}
		chars := utf8.RuneCountInString(c.System)
		for k, turn := range turns {
			chars += utf8.RuneCountInString(turn.Value)
			want := map[string]string{"human": "gpt|function_call", "function_call": "observation", "observation": "gpt", "gpt": "human"}[turn.From]
			if k+1 < len(turns) && !strings.Contains(want, turns[k+1].From) {
				t.Fatalf("line %d turn %d: %s follows %s", i+1, k+2, turns[k+1].From, turn.From)
			}
			switch turn.From {
			case "function_call":
				var call struct {
					Name      string
					Arguments map[string]any
				}
				if err := json.Unmarshal([]byte(turn.Value), &call); err != nil || !names[call.Name] || call.Arguments == nil {
					t.Fatalf("line %d turn %d: call %s to a function the tools do not offer (%v)", i+1, k+1, turn.Value, err)
				}
				got.Calls++
			case "observation":
				if !json.Valid([]byte(turn.Value)) {
					t.Fatalf("line %d turn %d: observation %q is not JSON", i+1, k+1, turn.Value)
				}
				got.Observations++
			}
		}
		got.Conversations++
		got.Turns += int64(len(turns))
		got.LongestChars = max(got.LongestChars, chars)
	}
	if got != counts {
		t.Fatalf("recounted %+v, the generator says %+v", got, counts)
	}
	// Every length from 2 to 10 turns occurs; tools, calls and systems
	// are a fair share; the longest histories run to thousands of tokens.
	for l := 2; l <= 10; l++ {
		if byLength[l] == 0 {
			t.Errorf("no conversation of %d turns in %d: %v", l, n, byLength)
		}
	}
	if counts.WithTools < n/4 || counts.Calls < n/8 || counts.WithSystem < n/8 || counts.LongestChars < 12000 {
		t.Errorf("counts %+v: too few tools, calls or systems, or no long history", counts)
	}
}

func TestConversationsCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "corpus")
	if err := testbin.Build(dir, "corpus"); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "-n", "250", "--seed", "4", "--conversations")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	want, counts := conversationLines(4, 250)
	if !bytes.Equal(stdout.Bytes(), want) {
		t.Fatal("the command wrote other conversations than the generator makes")
	}
	m := regexp.MustCompile(`wrote (\d+) conversations \((\d+) bytes\) to -: (\d+) turns, (\d+) with a system prompt, (\d+) with tools, (\d+) function calls`).FindStringSubmatch(stderr.String())
	if m == nil || m[1] != "250" || m[2] != strconv.Itoa(len(want)) || m[3] != strconv.FormatInt(counts.Turns, 10) ||
		m[5] != strconv.FormatInt(counts.WithTools, 10) || m[6] != strconv.FormatInt(counts.Calls, 10) {
		t.Fatalf("summary does not match %+v:\n%s", counts, stderr.String())
	}
}

func BenchmarkGenerateConversations(b *testing.B) {
	g := NewConversations(1)
	var buf []byte
	var bytesOut int64
	for b.Loop() {
		buf = AppendConversation(buf[:0], g.Next())
		bytesOut += int64(len(buf)) + 1
	}
	b.SetBytes(bytesOut / int64(b.N))
}
