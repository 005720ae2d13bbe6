package pgtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerCPU returns the CPU time (user and system) that the processes of
// the server at url have used so far: every process pg_stat_activity lists
// (backends, and the WAL writer, checkpointer and other helpers), read from
// /proc. It is for benchmarks, which compare two readings; processes that
// exited between them are not counted. ok is false if the server's
// processes are not on this machine (or this is not Linux).
func ServerCPU(ctx context.Context, conn *pgx.Conn) (cpu map[int]time.Duration, ok bool, err error) {
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return nil, false, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, false, err
	}
	cpu = map[int]time.Duration{}
	for _, pid := range pids {
		d, err := procCPU(int(pid))
		if err != nil {
			return nil, false, nil // not a process of this machine's
		}
		cpu[int(pid)] = d
	}
	return cpu, true, nil
}

// CPUSince is the CPU the processes of now used since then (a process new
// in now counts from its start).
func CPUSince(then, now map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range now {
		d += t - then[pid]
	}
	return d
}

// procCPU reads a process's utime and stime from /proc/PID/stat, in clock
// ticks of 1/100 s (Linux's USER_HZ).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is the state, field 3 of stat
	if len(f) < 13 || !strings.Contains(s[:i], "postgres") {
		return 0, fmt.Errorf("/proc/%d/stat: not a postgres process", pid)
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
