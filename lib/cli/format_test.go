package cli

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 654676: "654,676", 1234567: "1,234,567",
		-1234: "-1,234", -999: "-999", math.MaxInt64: "9,223,372,036,854,775,807", math.MinInt64: "-9,223,372,036,854,775,808",
	} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %s, want %s", n, got, want)
		}
	}
	if got := Thousands(int(1e6)); got != "1,000,000" {
		t.Errorf("int: %s", got)
	}
	for _, tt := range []struct {
		x    float64
		prec int
		want string
	}{
		{9349.46, 1, "9,349.5"}, {26.5, 1, "26.5"}, {1168.7, 0, "1,169"}, {-1234.5, 2, "-1,234.50"}, {0, 0, "0"}, {999.96, 1, "1,000.0"},
	} {
		if got := ThousandsFloat(tt.x, tt.prec); got != tt.want {
			t.Errorf("ThousandsFloat(%v, %d) = %s, want %s", tt.x, tt.prec, got, tt.want)
		}
	}
}

// FuzzThousands: removing the separators gives the plain number back, and
// every group after the first has three digits.
func FuzzThousands(f *testing.F) {
	for _, n := range []int64{0, 1, 999, 1000, -1000, 1234567, math.MinInt64} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		s := Thousands(n)
		if strings.ReplaceAll(s, ",", "") != strconv.FormatInt(n, 10) {
			t.Fatalf("%d: %s", n, s)
		}
		groups := strings.Split(strings.TrimPrefix(s, "-"), ",")
		for i, g := range groups {
			if (i > 0 && len(g) != 3) || len(g) == 0 || len(g) > 3 {
				t.Fatalf("%d: %s has a bad group %q", n, s, g)
			}
		}
	})
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond: "1.5s", 245 * time.Second: "4m05s", 19*time.Hour + 2*time.Minute: "19h02m", 0: "0.0s",
	} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %s, want %s", d, got, want)
		}
	}
}
