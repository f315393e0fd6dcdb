// Command stats reports what prompt, generation and error records hold.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/stats"
)

func main() { cli.Main("stats", stats.Description, &stats.Command{}) }
