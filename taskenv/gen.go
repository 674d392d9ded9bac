//go:build ignore

// gen writes the C header of the task-environment names (taskenv.HeaderPath).
package main

import (
	"log"
	"os"

	"github.com/gpufrac/gpufrac/taskenv"
)

func main() {
	if err := os.WriteFile(taskenv.HeaderPath, taskenv.CHeader(), 0o644); err != nil {
		log.Fatal(err)
	}
}
