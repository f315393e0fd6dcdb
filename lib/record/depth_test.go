package record

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckDepth(t *testing.T) {
	nest := func(open, close string, n int) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	tests := []struct {
		name string
		in   string
		deep bool
	}{
		{"flat", `{"a":1,"b":[1,2,3]}`, false},
		{"arrays at the limit", nest("[", "]", MaxDepth), false},
		{"arrays past it", nest("[", "]", MaxDepth+1), true},
		{"objects past it", strings.Repeat(`{"k":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), true},
		{"mixed past it", strings.Repeat(`[{"k":`, MaxDepth/2+1) + "1" + strings.Repeat("}]", MaxDepth/2+1), true},
		{"brackets in strings", `{"s":"` + strings.Repeat("[{", MaxDepth) + `"}`, false},
		{"an escaped backslash ends the string", `{"s":"\\","t":` + nest("[", "]", MaxDepth+1) + `}`, true},
		{"escaped quote keeps the string open", `{"s":"\"` + strings.Repeat("[", MaxDepth+1) + `"}`, false},
		{"unterminated string", `{"s":"` + strings.Repeat("[", MaxDepth+1), false},
		{"a line of brackets", strings.Repeat("[", 2<<20), true},
		{"closers first", strings.Repeat("]", MaxDepth*2) + nest("[", "]", MaxDepth), false},
	}
	for _, tt := range tests {
		err := CheckDepth([]byte(tt.in))
		if tt.deep != errors.Is(err, ErrTooDeep) || (!tt.deep && err != nil) {
			t.Errorf("%s: %v, want too deep %v", tt.name, err, tt.deep)
		}
	}
}
