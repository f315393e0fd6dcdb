package serve

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"tokenmill/lib/procgroup"
)

// A server's processes are more than its process group: a worker that
// calls setsid (or setpgid) leaves the group, and signals to the group no
// longer reach it; one whose parent exits is an orphan. Stopping a server
// by its group alone left one such process alive per start, holding its
// GPU's memory. So every start of a server is a family: its group; on
// Linux a cgroup of its own where serve may make one (every process the
// server starts stays in it, whatever it does); serve is a child
// subreaper there (PR_SET_CHILD_SUBREAPER), so an orphan becomes serve's
// child instead of init's and stays in view; and each start is marked in
// its environment (treeEnv), which a worker that leaves the group
// inherits. A family's processes are its cgroup's, its group's, the
// descendants of its leader and of every process seen in it before, and
// serve's descendants that carry its mark. Stopping a server ends all of
// them, and says which ones had left its group.

// treeEnv is the variable that marks a server's processes: serve's pid
// and start time, the server's index and the start's number.
const treeEnv = "TOKENMILL_SERVE_TREE"

// family is one start of a server and what serve knows of its processes.
type family struct {
	pgid   int     // the group, its leader's pid (0 until started)
	marker string  // treeEnv's value for this start
	cg     *cgroup // nil where the server has no cgroup
	// anyParent: the family of a serve that no longer runs (leftFamily),
	// whose orphans are init's: every process carrying a mark that starts
	// with marker is its.
	anyParent bool
	// orphans: no server's family, but every process serve adopted as
	// subreaper and its descendants (what is left once every server has
	// stopped: sweepOrphans).
	orphans bool

	mu   sync.Mutex
	seen map[int]uint64 // processes seen in the family: pid -> start time
}

// serveMark is the start of every marker of this serve: its pid and
// start time, so that a later serve with the same pid is told apart.
func serveMark(pid int, start uint64) string { return fmt.Sprintf("%d.%d:", pid, start) }

// newFamily is start number life of server index: its marker, and its
// cgroup where serve makes them (trees.cgroups).
func newFamily(index, life int) *family {
	f := &family{marker: fmt.Sprintf("%s%d:%d", serveMark(os.Getpid(), procgroup.StartTime(os.Getpid())), index, life), seen: map[int]uint64{}}
	if trees.useCgroups() {
		cg, err := newCgroup(fmt.Sprintf("server-%d-%d", index, life))
		if err != nil {
			trees.noCgroups(err)
		} else {
			f.cg = cg
		}
	}
	return f
}

// member is one process of a family.
type member struct {
	pid  int
	pgrp int
	comm string
}

// outside describes the members that are not in group pgid, for a
// report: "pid 4242 (sleep), pid 4250 (python3)".
func outside(ms []member, pgid int) []member {
	var out []member
	for _, m := range ms {
		if m.pgrp != pgid {
			out = append(out, m)
		}
	}
	return out
}

func describeMembers(ms []member) string {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b member) int { return a.pid - b.pid })
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("pid %d (%s)", m.pid, m.comm)
	}
	return strings.Join(parts, ", ")
}

// treeReport says what of a stopped server had left its process group
// and how it was ended; "" when nothing had.
func treeReport(left []member, killed bool) string {
	if len(left) == 0 {
		return ""
	}
	how := "SIGTERM"
	if killed {
		how = "SIGKILL"
	}
	noun := "process that had"
	if len(left) > 1 {
		noun = "processes that had"
	}
	return fmt.Sprintf("ended %d %s left its process group (setsid or a group of its own), by %s: %s", len(left), noun, how, describeMembers(left))
}

// trees is how this serve keeps track of its servers' processes: set up
// by setupTrees (Run), said in serve's first lines.
var trees treeSetup

type treeSetup struct {
	mu      sync.Mutex
	active  bool   // setupTrees ran: serve is its servers' subreaper
	cgroups bool   // servers get cgroups
	base    string // the cgroup directory holding the servers' own
	why     string // why there are none
}

func (t *treeSetup) useCgroups() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cgroups
}

// noCgroups turns cgroups off for the servers started from now on.
func (t *treeSetup) noCgroups(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cgroups {
		t.cgroups = false
		t.why = err.Error()
	}
}

// describe says how a server's processes are kept track of.
func (t *treeSetup) describe() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cgroups {
		return "each server's processes in a cgroup of its own under " + t.base + ", ended with it"
	}
	return "each server's processes followed by their group, their descent and their environment (" + treeEnv + "), serve their subreaper; no cgroup: " + t.why
}

// sweepOrphans ends what is left under serve once every server has
// stopped: processes that left a server's tree unmarked (their
// environment cleared) and so were told to belong to none, adopted by
// serve as subreaper. It says what it ended.
func sweepOrphans(grace time.Duration, logf func(string, ...any)) {
	trees.mu.Lock()
	active := trees.active
	trees.mu.Unlock()
	if !active {
		return // not serve's own process (a test's): its other children are not servers'
	}
	f := &family{orphans: true, seen: map[int]uint64{}}
	ms := f.members()
	if len(ms) == 0 {
		return
	}
	_, err := clearFamily(f, grace, nil, false)
	logf("ended %d processes left by the servers that could not be told to belong to one (they had left their process group and their environment): %s", len(ms), describeMembers(ms))
	if err != nil {
		logf("%v", err)
	}
}
