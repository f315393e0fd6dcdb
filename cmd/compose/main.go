// Command compose chooses records to target shares per group.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/compose"
)

func main() { cli.Main("compose", compose.Description, &compose.Command{}) }
