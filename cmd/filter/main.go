// Command filter keeps the generation records whose answers pass the
// quality checks, and sends the others to a rejects file for regeneration.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/filter"
)

func main() { cli.Main("filter", filter.Description, &filter.Command{}) }
