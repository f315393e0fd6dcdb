package main

import (
	"fmt"
	"github.com/pemistahl/lingua-go"
	"os"
)

func main() {
	d := lingua.NewLanguageDetectorBuilder().FromLanguages(lingua.English, lingua.French).WithLowAccuracyMode().Build()
	l, _ := d.DetectLanguageOf(os.Args[0])
	fmt.Println(l)
}
