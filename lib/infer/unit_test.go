package infer

import (
	"testing"
	"time"
)

func TestStripOwnFields(t *testing.T) {
	for in, want := range map[string]string{
		`{"id":1, "messages":[]}`:                              `{"id":1, "messages":[]}`,
		`{"id":1,"output":{"text":"old"},"meta":{"output":1}}`: `{"id":1,"meta":{"output":1}}`,
		`{"error":{},"id":"x"}`:                                `{"id":"x"}`,
	} {
		got, err := stripOwnFields([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s %v, want %s", in, got, err, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := newBackoff(100*time.Millisecond, time.Second, 1)
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		for i := 0; i < 50; i++ {
			if d := b.delay(attempt); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v not in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := newBackoff(0, time.Second, 1).delay(3); d != 0 {
		t.Errorf("zero base gave %v", d)
	}
}
