//go:build !unix

package serve

import "syscall"

// serve does not run here (supported says so).
const noTreesWhy = "not supported here"

func signalMembers([]member, syscall.Signal) {}
