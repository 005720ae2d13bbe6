// Package gogc owns the one rule by which lineage's long-running commands set
// the garbage collector's target: the command's choice, unless the user chose
// with $GOGC.
package gogc

import (
	"os"
	"runtime/debug"
)

// Default sets the garbage collector's target percentage to percent unless
// $GOGC is set, and says whether it did.
func Default(percent int) bool {
	if os.Getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(percent)
	return true
}
