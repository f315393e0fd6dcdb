// Package procgroup runs a command as the leader of a process group of
// its own and follows the group: one signal reaches the server and every
// process it starts (SGLang's schedulers, vLLM's workers, Ollama's
// runners), and a Ctrl-C on the caller's terminal reaches the caller
// alone. Process groups are Unix's; elsewhere Supported says why not.
package procgroup

import "errors"

// ErrUnsupported is Supported's answer where there are no process groups.
var ErrUnsupported = errors.New("running servers needs process groups: tokenmill runs them on Linux and macOS")
