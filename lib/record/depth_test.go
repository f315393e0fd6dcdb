package record

import (
	"errors"
	"strings"
	"testing"
)

// depthCase is a line nested about limit deep, and whether a count of
// its brackets finds it nested past limit.
type depthCase struct {
	name string
	in   string
	deep bool
}

func depthCases(limit int) []depthCase {
	nest := func(open, close string, n int) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	return []depthCase{
		{"flat", `{"a":1,"b":[1,2,3]}`, false},
		{"arrays at the limit", nest("[", "]", limit), false},
		{"arrays past it", nest("[", "]", limit+1), true},
		{"objects past it", strings.Repeat(`{"k":`, limit+1) + "1" + strings.Repeat("}", limit+1), true},
		{"mixed past it", strings.Repeat(`[{"k":`, limit/2+1) + "1" + strings.Repeat("}]", limit/2+1), true},
		{"brackets in strings", `{"s":"` + strings.Repeat("[{", limit) + `"}`, false},
		{"an escaped backslash ends the string", `{"s":"\\","t":` + nest("[", "]", limit+1) + `}`, true},
		{"escaped quote keeps the string open", `{"s":"\"` + strings.Repeat("[", limit+1) + `"}`, false},
		{"unterminated string", `{"s":"` + strings.Repeat("[", limit+1), false},
		{"a line of brackets", strings.Repeat("[", 200*limit), true},
		{"closers first", strings.Repeat("]", limit*2) + nest("[", "]", limit), false},
	}
}

func TestCheckDepth(t *testing.T) {
	tests := depthCases(MaxDepth)
	for _, tt := range tests {
		err := CheckDepth([]byte(tt.in))
		if tt.deep != errors.Is(err, ErrTooDeep) || (!tt.deep && err != nil) {
			t.Errorf("%s: %v, want too deep %v", tt.name, err, tt.deep)
		}
	}
}
