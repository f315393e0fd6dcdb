package serve

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// spec is one server as planned: where it listens, its GPUs and its
// command line with the placeholders put in.
type spec struct {
	index int
	port  int
	gpus  string // CUDA_VISIBLE_DEVICES and {gpus}; "" without GPUs
	host  string
	args  []string
	url   string // what the endpoints file lists
}

// parseGPUs reads a GPU list: numbers, ranges of numbers (0-7) and other
// names CUDA_VISIBLE_DEVICES takes (GPU-<uuid>, MIG-<uuid>), comma-separated.
func parseGPUs(list string) ([]string, error) {
	var out []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		a, b, isRange := strings.Cut(item, "-")
		first, errA := strconv.Atoi(a)
		last, errB := strconv.Atoi(b)
		switch {
		case isRange && errA == nil && errB == nil:
			if first < 0 || last < first {
				return nil, fmt.Errorf("GPU range %q runs backwards", item)
			}
			if last-first >= 1024 {
				return nil, fmt.Errorf("GPU range %q is too long", item)
			}
			for g := first; g <= last; g++ {
				out = append(out, strconv.Itoa(g))
			}
		case !isRange && errA == nil:
			if first < 0 {
				return nil, fmt.Errorf("GPU %q is negative", item)
			}
			out = append(out, strconv.Itoa(first))
		case strings.HasPrefix(item, "GPU-") || strings.HasPrefix(item, "MIG-"):
			for _, c := range item {
				if !(c == '-' || c == '/' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
					return nil, fmt.Errorf("bad character %q in GPU %q", c, item)
				}
			}
			out = append(out, item)
		default:
			return nil, fmt.Errorf("%q is not a GPU number, range (0-7) or GPU-/MIG- id", item)
		}
	}
	for i, g := range out {
		if slices.Contains(out[:i], g) {
			return nil, fmt.Errorf("GPU %s is listed twice", g)
		}
	}
	return out, nil
}

// groups cuts the GPUs into one group per server, perServer each, in order.
func groups(gpus []string, perServer int) ([]string, error) {
	if len(gpus)%perServer != 0 {
		return nil, fmt.Errorf("%d GPUs do not split into groups of %d (--gpus-per-server)", len(gpus), perServer)
	}
	var out []string
	for i := 0; i < len(gpus); i += perServer {
		out = append(out, strings.Join(gpus[i:i+perServer], ","))
	}
	return out, nil
}

// substitute puts the server's values in for the placeholders of arg.
func substitute(arg string, s spec) string {
	if !strings.Contains(arg, "{") {
		return arg
	}
	return strings.NewReplacer("{port}", strconv.Itoa(s.port), "{gpus}", s.gpus, "{index}", strconv.Itoa(s.index), "{host}", s.host).Replace(arg)
}

// plan is the servers the flags ask for, or the usage error that says
// why there are none.
func (c *Run) plan() ([]spec, error) {
	command := c.command()
	if len(command) == 0 {
		return nil, usagef("no server command: serve --gpus 0-7 -- COMMAND ARGS... (e.g. -- python -m sglang.launch_server --model-path M --port {port})")
	}
	var gpuGroups []string
	switch {
	case c.GPUsPerServer < 1:
		return nil, usagef("--gpus-per-server %d: want at least 1", c.GPUsPerServer)
	case c.Servers < 0:
		return nil, usagef("--servers %d is negative", c.Servers)
	case c.GPUs != "":
		gpus, err := parseGPUs(c.GPUs)
		if err != nil {
			return nil, usagef("--gpus: %v", err)
		}
		if gpuGroups, err = groups(gpus, c.GPUsPerServer); err != nil {
			return nil, usagef("--gpus %s: %v", c.GPUs, err)
		}
		if len(gpuGroups) == 0 {
			return nil, usagef("--gpus %q names no GPU", c.GPUs)
		}
		if c.Servers != 0 && c.Servers != len(gpuGroups) {
			return nil, usagef("--servers %d, but --gpus %s makes %d groups of %d: give one or make them agree", c.Servers, c.GPUs, len(gpuGroups), c.GPUsPerServer)
		}
	case c.Servers == 0:
		return nil, usagef("how many servers? --gpus LIST (one server per --gpus-per-server GPUs), or --servers N for servers without GPUs")
	default:
		gpuGroups = make([]string, c.Servers)
	}
	n := len(gpuGroups)
	if c.Port < 1 || c.Port+n-1 > 65535 {
		return nil, usagef("--port %d: %d servers need ports %d-%d, within 1-65535", c.Port, n, c.Port, c.Port+n-1)
	}
	if err := checkHost(c.Host); err != nil {
		return nil, usagef("--host %q: %v", c.Host, err)
	}
	if n > 1 && !slices.ContainsFunc(command, func(a string) bool { return strings.Contains(a, "{port}") }) {
		return nil, usagef("the server command has no {port}: all %d servers would listen on one port (e.g. --port {port}; Ollama: env OLLAMA_HOST=127.0.0.1:{port} ollama serve)", n)
	}
	if _, err := exec.LookPath(command[0]); err != nil {
		return nil, usagef("server command %q: %v", command[0], err)
	}
	specs := make([]spec, n)
	for i := range specs {
		s := spec{index: i, port: c.Port + i, gpus: gpuGroups[i], host: c.Host}
		s.url = "http://" + net.JoinHostPort(c.Host, strconv.Itoa(s.port))
		for _, a := range command {
			s.args = append(s.args, substitute(a, s))
		}
		specs[i] = s
	}
	return specs, nil
}

// checkHost accepts a host name or an IP address, as a URL holds it.
func checkHost(h string) error {
	if h == "" {
		return fmt.Errorf("empty")
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	for _, c := range h {
		if !(c == '.' || c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("bad character %q in a host name", c)
		}
	}
	return nil
}

// environ is the server's environment: serve's own, with
// CUDA_VISIBLE_DEVICES set to its GPUs where it has some.
func environ(s spec) []string {
	if s.gpus == "" {
		return os.Environ()
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "CUDA_VISIBLE_DEVICES" {
			env = append(env, kv)
		}
	}
	return append(env, "CUDA_VISIBLE_DEVICES="+s.gpus)
}
