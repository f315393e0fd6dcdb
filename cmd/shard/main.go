// Command shard splits a record stream into N stable parts.
package main

import (
	"tokenmill/lib/cli"
	"tokenmill/lib/shard"
)

func main() { cli.Main("shard", shard.Description, &shard.Command{}) }
