package fakeclock

import (
	"testing"
	"time"
)

var epoch = time.Unix(1_700_000_000, 0)

func TestFakeTimers(t *testing.T) {
	f := New(epoch)
	var order []string
	f.AfterFunc(3*time.Second, func() { order = append(order, "3s") })
	f.AfterFunc(time.Second, func() { order = append(order, "1s") })
	stopped := f.AfterFunc(2*time.Second, func() { order = append(order, "2s") })
	timer := f.NewTimer(1500 * time.Millisecond)
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop: true once for a pending timer, then false")
	}
	if f.Pending() != 3 {
		t.Fatalf("%d pending, want 3", f.Pending())
	}
	f.Advance(1200 * time.Millisecond)
	if len(order) != 1 || order[0] != "1s" {
		t.Fatalf("fired %v after 1.2s", order)
	}
	select {
	case <-timer.C():
		t.Fatal("a 1.5s timer fired at 1.2s")
	default:
	}
	f.Advance(2 * time.Second)
	select {
	case at := <-timer.C():
		if !at.Equal(epoch.Add(1500 * time.Millisecond)) {
			t.Errorf("timer fired at %v, want its own time", at.Sub(epoch))
		}
	default:
		t.Fatal("the 1.5s timer did not fire")
	}
	if len(order) != 2 || order[1] != "3s" || f.Pending() != 0 {
		t.Errorf("fired %v, %d pending", order, f.Pending())
	}
	if got := f.Now().Sub(epoch); got != 3200*time.Millisecond {
		t.Errorf("now %v, want 3.2s", got)
	}
	// Time does not go back.
	f.Set(epoch)
	if got := f.Now().Sub(epoch); got != 3200*time.Millisecond {
		t.Errorf("Set backwards moved the clock to %v", got)
	}
}

func TestFakeTicker(t *testing.T) {
	f := New(epoch)
	tk := f.NewTicker(time.Second)
	var got []time.Duration
	for i := 0; i < 3; i++ {
		f.Advance(time.Second)
		got = append(got, (<-tk.C()).Sub(epoch))
	}
	if got[0] != time.Second || got[2] != 3*time.Second {
		t.Errorf("ticks at %v", got)
	}
	// Ticks nobody takes are dropped, not queued.
	f.Advance(10 * time.Second)
	<-tk.C()
	select {
	case <-tk.C():
		t.Error("missed ticks were queued")
	default:
	}
	tk.Stop()
	if f.Pending() != 0 {
		t.Error("a stopped ticker is still pending")
	}
}

func TestFakeZeroDelay(t *testing.T) {
	f := New(epoch)
	ran := false
	f.AfterFunc(0, func() { ran = true })
	if !ran {
		t.Error("AfterFunc(0) did not run at once")
	}
	select {
	case <-f.After(-time.Second):
	default:
		t.Error("After of a negative duration did not fire at once")
	}
}
