package infer

import (
	"fmt"

	"tokenmill/lib/cli"
	"tokenmill/lib/fleet"
	"tokenmill/lib/ledger"
	"tokenmill/lib/settings"
)

// Every answer names the settings that made it (lib/settings). --resume
// and --append compare the run's settings with those of the records in
// the file they continue, and refuse another run's (the first field that
// differs named) unless --allow-changed-settings; records written before
// infer recorded settings are not compared (said so).

// settingsOf is the settings of j's answer, served by the endpoint named
// name (ep, when the run has it).
func (r *runner) settingsOf(ep *fleet.Endpoint, name string, j *job) (settings.IDs, error) {
	k := settings.Key{Arm: j.arm, Model: r.model, Params: j.params}
	if ep != nil {
		k.Model = r.modelOf(ep)
	}
	if r.cfg.TokenIDs && name != "" {
		if sb := r.servedBy(name); sb != nil {
			k.Server, k.Version = sb.Server, sb.Version
		}
	}
	return r.settings.IDs(k)
}

// checkSettings refuses to continue a file none of whose records were
// made with the run's settings (the model aside, checked once the
// servers are up), unless --allow-changed-settings; records whose
// settings are not known are said so, and not compared.
func (r *runner) checkSettings(info ledger.Info) error {
	lines, unknown := r.settings.OnFile(info.Settings)
	name := r.cfg.Output
	if info.NoSettings > 0 {
		r.logf("%s: %s records were written before infer recorded settings: their settings are not known, and not compared with this run's", name, cli.Thousands(info.NoSettings))
	}
	if unknown > 0 {
		r.logf("%s: %s records name settings that %s does not describe: not compared with this run's", name, cli.Thousands(unknown), r.settings.Path())
	}
	if field, was, now, differ := r.settings.Differs(lines); differ {
		return r.changed(field, was, now)
	}
	return nil
}

// checkModel refuses to continue a file made with another model than the
// one the run's servers are sent, unless --allow-changed-settings.
func (r *runner) checkModel(info ledger.Info) error {
	if !r.cfg.continues() {
		return nil
	}
	lines, _ := r.settings.OnFile(info.Settings)
	if len(lines) == 0 {
		return nil
	}
	for _, l := range lines {
		if l.Model == r.model {
			return nil
		}
	}
	return r.changed("model", fmt.Sprintf("%q", lines[len(lines)-1].Model), fmt.Sprintf("%q", r.model))
}

// changed is the refusal of a file made with field was, where the run
// asks now; with --allow-changed-settings, a warning.
func (r *runner) changed(field, was, now string) error {
	c := r.cfg
	flag := "--resume"
	if c.Append {
		flag = "--append"
	}
	if !c.AllowChangedSettings {
		return cli.Usagef("%s: %s was made with %s %s, this run asks %s: rerun with the same settings or give --allow-changed-settings",
			flag, c.Output, field, was, now)
	}
	r.logf("%s: %s was made with %s %s, this run asks %s (--allow-changed-settings): each record names its settings (output.settings, described in %s)",
		flag, c.Output, field, was, now, r.settings.Path())
	return nil
}
