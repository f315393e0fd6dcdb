// Command serve starts the fleet's inference servers, one per GPU group,
// keeps them up (serve run, the default), and says how they are (serve
// status) or stops them (serve stop); see lib/serve.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/serve"
)

// command is serve's command line.
type command struct {
	cli.Globals

	Run    serve.Run    `cmd:"" default:"withargs" help:"Start the servers and keep them up (the default: serve [flags] -- COMMAND is serve run [flags] -- COMMAND)."`
	Status serve.Status `cmd:"" help:"Show each server's state, pid, restarts, last exit and log, from the status file; exit 1 when no serve runs."`
	Stop   serve.Stop   `cmd:"" help:"Stop the serve of --state-dir (SIGTERM; it stops its servers), or the servers a killed serve left running."`
}

func main() { cli.Main("serve", serve.Description, &command{}) }
