package main

import (
	"fmt"
	"github.com/abadojack/whatlanggo"
	"os"
)

func main() { fmt.Println(whatlanggo.Detect(os.Args[0]).Lang) }
