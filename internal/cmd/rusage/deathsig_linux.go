package main

import "syscall"

// dieWithParent makes the command die with this process, so a benchmark
// that times out leaves nothing running.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
