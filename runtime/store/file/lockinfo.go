package file

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// LockHolder is what a Store's lock file says of the process that holds
// the directory for writing: the note it wrote there when it took the lock.
// The zero value is a holder that left no note (a reader: any number may
// share the lock, and none writes one).
type LockHolder struct {
	PID     int
	Command string
	Since   time.Time
}

func (h LockHolder) String() string {
	if h.PID == 0 {
		return "another process (one that reads the directory; it leaves no note)"
	}
	s := "pid " + strconv.Itoa(h.PID)
	if h.Command != "" {
		s += " (" + h.Command + ")"
	}
	if !h.Since.IsZero() {
		s += ", since " + h.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// holderNote is the note a writer leaves in the lock file.
func holderNote() []byte {
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > 512 {
		cmd = cmd[:512] + "..."
	}
	cmd = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, cmd)
	return fmt.Appendf(nil, "pid %d\ncommand %s\nsince %s\n", os.Getpid(), cmd, time.Now().UTC().Format(time.RFC3339Nano))
}

// parseHolder reads a note written by holderNote; what it cannot read is left
// zero.
func parseHolder(b []byte) LockHolder {
	var h LockHolder
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "pid":
			h.PID, _ = strconv.Atoi(v)
		case "command":
			h.Command = v
		case "since":
			h.Since, _ = time.Parse(time.RFC3339Nano, v)
		}
	}
	if h.PID <= 0 {
		return LockHolder{}
	}
	return h
}
