// Command hello is the smallest main package, for testbin's own tests of
// Build.
package main

import "fmt"

func main() { fmt.Println("hello") }
