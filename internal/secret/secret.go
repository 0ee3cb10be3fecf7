// Package secret holds the rules kvtop applies to files that hold secrets.
package secret

import (
	"fmt"
	"os"
)

// FileWarning says when a secret file can be read (or written) by group or
// others, as ssh does for keys: one line to print at start, naming the file
// as what ("bearer_token_file", "auth token file"); "" when the mode is
// fine or the file cannot be looked at (reading it reports that).
func FileWarning(what, path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return ""
	}
	how := "readable"
	if perm&0o044 == 0 {
		how = "writable or executable"
	}
	return fmt.Sprintf("%s %s is %s by group or others (mode %04o): chmod 600 it", what, path, how, perm)
}
