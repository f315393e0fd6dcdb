// Command dedup drops repeated prompts from a record stream, keeping the
// first occurrence of each.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/dedup"
)

func main() { cli.Main("dedup", dedup.Description, &dedup.Command{}) }
