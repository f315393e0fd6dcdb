package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Integer is what Thousands formats.
type Integer interface {
	~int | ~int32 | ~int64 | ~uint32
}

// Thousands writes n with thousands separators: 654,676. Every tool's
// counts on stderr and in reports are written by it, so they look alike.
func Thousands[T Integer](n T) string {
	return group(strconv.FormatInt(int64(n), 10))
}

// ThousandsFloat writes x with prec decimals and thousands separators in
// its whole part: 9,349.5.
func ThousandsFloat(x float64, prec int) string {
	return group(strconv.FormatFloat(x, 'f', prec, 64))
}

// group puts separators into the whole part of a formatted number.
func group(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac := s, ""
	if i := strings.IndexByte(s, '.'); i >= 0 {
		whole, frac = s[:i], s[i:]
	}
	if len(whole) <= 3 {
		return sign + s
	}
	var b strings.Builder
	b.Grow(len(sign) + len(s) + len(whole)/3)
	b.WriteString(sign)
	for i := 0; i < len(whole); i++ {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(whole[i])
	}
	b.WriteString(frac)
	return b.String()
}

// ShortDuration writes d as 19h02m, 4m05s or 12.3s.
func ShortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}
