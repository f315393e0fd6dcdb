//go:build !linux

package main

import "syscall"

// dieWithParent does nothing where there is no parent-death signal: a
// command can outlive a killed rusage there (benchmarks run on Linux).
func dieWithParent(*syscall.SysProcAttr) {}
