package backoff

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestExp(t *testing.T) {
	for _, tt := range []struct {
		name string
		e    Exp
		n    int
		want time.Duration
	}{
		{"first", Exp{100 * ms, time.Second}, 1, 100 * ms},
		{"n 0 is the first", Exp{100 * ms, time.Second}, 0, 100 * ms},
		{"doubles", Exp{100 * ms, time.Second}, 3, 400 * ms},
		{"capped", Exp{100 * ms, time.Second}, 5, time.Second},
		{"capped for ever", Exp{100 * ms, time.Second}, 1 << 30, time.Second},
		{"cap below the first", Exp{time.Second, 100 * ms}, 1, 100 * ms},
		{"no cap waits nothing", Exp{time.Second, 0}, 4, 0},
		{"no first waits nothing", Exp{0, time.Second}, 4, 0},
		{"negative first", Exp{-ms, time.Second}, 1, 0},
		{"bench's workers", Exp{50 * ms, 2 * time.Second}, 6, 1600 * ms},
		{"bench's workers capped", Exp{50 * ms, 2 * time.Second}, 7, 2 * time.Second},
		{"odd cap", Exp{2, 5}, 2, 4},
		{"odd cap reached", Exp{2, 5}, 3, 5},
		{"no overflow", Exp{time.Second, math.MaxInt64}, 200, math.MaxInt64},
	} {
		if got := tt.e.Delay(tt.n); got != tt.want {
			t.Errorf("%s: %+v.Delay(%d) = %v, want %v", tt.name, tt.e, tt.n, got, tt.want)
		}
	}
}

// expByShift is Exp's delay in closed form, First<<(n-1) capped, for the
// differential test.
func expByShift(e Exp, n int) time.Duration {
	if e.First <= 0 {
		return 0
	}
	k := max(n-1, 0)
	if bits.Len64(uint64(e.First))+k > 63 {
		return e.Max // First<<k would overflow: it is past any cap
	}
	return min(e.First<<k, e.Max)
}

func TestExpMatchesClosedForm(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		e := Exp{time.Duration(rnd.Int64N(1 << rnd.IntN(62))), time.Duration(rnd.Int64N(1 << rnd.IntN(63)))}
		if i%7 == 0 {
			e.Max = math.MaxInt64
		}
		n := rnd.IntN(80)
		if got, want := e.Delay(n), expByShift(e, n); got != want {
			t.Fatalf("%+v.Delay(%d) = %v, the closed form %v", e, n, got, want)
		}
	}
}

func TestJitter(t *testing.T) {
	e := Exp{100 * ms, time.Second}
	least := func(int64) int64 { return 0 }
	most := func(n int64) int64 { return n - 1 }
	half := func(n int64) int64 { return n / 2 }
	for _, tt := range []struct {
		name string
		e    Exp
		draw func(int64) int64
		n    int
		want time.Duration
	}{
		{"least", e, least, 1, 50 * ms},
		{"most", e, most, 1, 100 * ms},
		{"least doubled", e, least, 2, 100 * ms},
		{"most capped", e, most, 9, time.Second},
		{"half way", e, half, 3, 300 * ms},
		{"odd wait", Exp{3, 100}, most, 1, 2}, // 1 + at most 1: never past the wait
		{"no wait draws nothing", Exp{0, time.Second}, func(int64) int64 { panic("drawn") }, 3, 0},
	} {
		j := &Jitter{exp: tt.e, draw: tt.draw}
		if got := j.Delay(tt.n); got != tt.want {
			t.Errorf("%s: Delay(%d) = %v, want %v", tt.name, tt.n, got, tt.want)
		}
	}
}

func TestJitterSpreadsAndRepeats(t *testing.T) {
	e := Exp{100 * ms, 10 * time.Second}
	a, b := NewJitter(e, rand.NewPCG(7, 8)), NewJitter(e, rand.NewPCG(7, 8))
	seen := map[time.Duration]bool{}
	for i := 0; i < 1000; i++ {
		n := 1 + i%8
		d := a.Delay(n)
		if full := e.Delay(n); d < full/2 || d > full {
			t.Fatalf("Delay(%d) = %v, not within [%v, %v]", n, d, full/2, full)
		}
		if d2 := b.Delay(n); d2 != d {
			t.Fatalf("draw %d: %v and %v from the same seed", i, d, d2)
		}
		if n == 1 {
			seen[d] = true
		}
	}
	if len(seen) < 100 {
		t.Errorf("125 first waits took %d values: not spread", len(seen))
	}
}

// TestJitterConcurrent: the race detector holds the draws to the lock.
func TestJitterConcurrent(t *testing.T) {
	j := NewJitter(Exp{ms, time.Second}, rand.NewPCG(1, 1))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n < 200; n++ {
				if d := j.Delay(n); d < ms/2 || d > time.Second {
					t.Errorf("Delay(%d) = %v", n, d)
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkExp(b *testing.B) {
	e := Exp{50 * ms, 2 * time.Second}
	var sum time.Duration
	for i := 0; i < b.N; i++ {
		sum += e.Delay(1 + i%8)
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}

func BenchmarkJitter(b *testing.B) {
	j := NewJitter(Exp{100 * ms, 30 * time.Second}, rand.NewPCG(1, 2))
	var sum time.Duration
	for i := 0; i < b.N; i++ {
		sum += j.Delay(1 + i%8)
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}
