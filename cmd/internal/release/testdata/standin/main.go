// Command standin stands in for iac-code in the release test: the same
// `var version` stamped by -ldflags, a few KB to cross-build instead of
// the server's megabytes.
package main

import "os"

var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		os.Stdout.WriteString("iac-code " + version + "\n")
	}
}
