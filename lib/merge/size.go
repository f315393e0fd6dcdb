package merge

import "tokenmill/lib/cli"

// Size is a byte count given as a number with an optional unit (see
// cli.Size): --memory.
type Size = cli.Size
