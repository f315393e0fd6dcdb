// Command merge puts generation files back together, one record per
// (id, sample).
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/merge"
)

func main() { cli.Main("merge", merge.Description, &merge.Command{}) }
