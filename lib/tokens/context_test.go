package tokens

import (
	"errors"
	"testing"
)

// The context is the smallest any server said: a statement of more than
// is known changes nothing; the servers' own statement wins while it is
// the smaller.
func TestContextLearn(t *testing.T) {
	var c Context
	if c.Len() != 0 {
		t.Fatalf("a new context is %d, want 0", c.Len())
	}
	stated := 0
	c.State(func() int { return stated })
	for _, tt := range []struct {
		stated, said, was, want int
		learned                 bool
	}{
		{0, 4096, 0, 4096, true},
		{0, 8192, 0, 4096, false},
		{2048, 3000, 0, 2048, false},
		{8192, 3000, 4096, 3000, true},
	} {
		stated = tt.stated
		was, learned := c.Learn(tt.said)
		if was != tt.was || learned != tt.learned || c.Len() != tt.want {
			t.Errorf("stated %d, said %d: was %d learned %v, now %d; want %d %v %d", tt.stated, tt.said, was, learned, c.Len(), tt.was, tt.learned, tt.want)
		}
	}
}

// A server is asked once whether it cuts prompts at a length: a length
// it was found to keep, or could not be asked about, is not asked again.
func TestContextConfirmCut(t *testing.T) {
	var c Context
	asked := 0
	probe := func(kept int, err error) func(int) (int, error) {
		return func(int) (int, error) { asked++; return kept, err }
	}
	if n, err := c.ConfirmCut(1000, probe(5000, nil)); n != 0 || err != nil || asked != 1 {
		t.Fatalf("a server that keeps 5000 tokens: %d, %v after %d questions", n, err, asked)
	}
	if n, _ := c.ConfirmCut(4000, probe(0, nil)); n != 0 || asked != 1 {
		t.Fatalf("4000 tokens, under the 5000 kept, was asked again (%d, %d questions)", n, asked)
	}
	if n, err := c.ConfirmCut(6000, probe(0, errors.New("busy"))); n != 0 || err == nil || asked != 2 {
		t.Fatalf("a probe that failed: %d, %v after %d questions", n, err, asked)
	}
	if n, err := c.ConfirmCut(7000, probe(7000, nil)); n != 7000 || err != nil || asked != 3 {
		t.Fatalf("a server that cuts at 7000: %d, %v after %d questions", n, err, asked)
	}
	c.Learn(7000)
	if n, _ := c.ConfirmCut(9000, probe(0, nil)); n != 7000 || asked != 3 {
		t.Fatalf("past the context learned: %d after %d questions, want 7000 unasked", n, asked)
	}
}
