package lifeline

import (
	"os"
	"slices"
	"testing"
)

func TestHold(t *testing.T) {
	var ran []string
	logf := func(string, ...any) {}
	v, stop, why := Hold(logf, func(h Host) string {
		h.Cleanup(func() { ran = append(ran, "first") })
		h.Cleanup(func() { h.Fatal("a failing cleanup") })
		h.Cleanup(func() { ran = append(ran, "last") })
		return "up"
	})
	if v != "up" || why != "" || len(ran) != 0 {
		t.Fatalf("Hold = %q, why %q, cleanups run %v; want up, none run before stop", v, why, ran)
	}
	stop()
	if want := []string{"last", "first"}; !slices.Equal(ran, want) {
		t.Fatalf("cleanups ran %v, want %v (last first, past the failing one)", ran, want)
	}

	var dir string
	v, stop, why = Hold(logf, func(h Host) string {
		dir = h.TempDir()
		h.Skip("no binary installed")
		return "unreachable"
	})
	if v != "" || stop != nil || why != "no binary installed" {
		t.Fatalf("a skipped start: Hold = %q, stop set %v, why %q", v, stop != nil, why)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the skipped start's temporary directory %s is still there: %v", dir, err)
	}

	_, _, why = Hold(logf, func(h Host) int { h.Fatalf("did not come up after %d s", 30); return 1 })
	if why != "did not come up after 30 s" {
		t.Fatalf("a failed start: why %q", why)
	}
}
