package filter

import (
	"testing"

	"github.com/alecthomas/kong"

	"tokenmill/lib/quality"
)

// TestFlagDefaults: the flags' defaults are the checks' calibrated ones.
func TestFlagDefaults(t *testing.T) {
	var c Command
	p, err := kong.New(&c, kong.Exit(func(int) { t.Fatal("exit") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(nil); err != nil {
		t.Fatal(err)
	}
	checks, err := quality.ParseChecks(c.Checks)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.Flags.Config(checks)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Loop != quality.DefaultLoop {
		t.Errorf("flag defaults %+v, DefaultLoop %+v", cfg.Loop, quality.DefaultLoop)
	}
	if cfg.Lang != quality.DefaultLang {
		t.Errorf("flag defaults %+v, DefaultLang %+v", cfg.Lang, quality.DefaultLang)
	}
	if len(cfg.Checks) != len(quality.DefaultChecks) {
		t.Errorf("checks %v, want %v", cfg.Checks, quality.DefaultChecks)
	}
}
