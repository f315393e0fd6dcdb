package cli

import (
	"context"
	"errors"
	"testing"
)

// TestRunConfig: a config that fails ends the run before the work, with
// its error; else the work gets the config made.
func TestRunConfig(t *testing.T) {
	bad := errors.New("--n must be positive")
	tests := []struct {
		name    string
		cfg     int
		err     error
		ran     bool
		wantErr error
	}{
		{"config refused", 0, bad, false, bad},
		{"config made", 7, nil, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got int
			ran := false
			err := RunConfig(context.Background(), &Env{}, func() (int, error) { return tt.cfg, tt.err },
				func(cfg int, _ context.Context, _ *Env) error { ran, got = true, cfg; return nil })
			if !errors.Is(err, tt.wantErr) || ran != tt.ran || ran && got != tt.cfg {
				t.Errorf("err %v, ran %v with %d; want err %v, ran %v with %d", err, ran, got, tt.wantErr, tt.ran, tt.cfg)
			}
		})
	}
}
