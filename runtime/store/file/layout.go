package file

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lineage-guard/lineage/runtime/store"
)

// Where the logs are in the directory (docs/stores.md, "The data
// directory"): a log is <agent>.jsonl, in the directory itself or in its
// shard directory, <xx>/<agent>.jsonl, where xx is the first byte of the
// SHA-256 of the agent id in lowercase hex (256 directories: their names
// differ in more than case, and no agent id can be one, for it has no Ext).
//
// A new log goes in the directory itself while that holds fewer than
// Options.ShardAfter logs, in its shard directory after; a log is looked for
// in the directory itself first, then in its shard directory. So a directory
// of an older lineagec, all in one folder, is read as it is, a small one
// stays one folder, and a large one puts its new logs in shard directories.
// A log in a shard directory that is not its own is no log (as any other
// file): nothing looks for it there. An agent with a log in both places is
// damage until an operator removes one.

// DefaultShardAfter is how many logs the directory itself holds before new
// logs go to shard directories.
const DefaultShardAfter = 4096

// shardOf is the name of agent's shard directory.
func shardOf(agent string) string {
	h := sha256.Sum256([]byte(agent))
	return hex.EncodeToString(h[:1])
}

// isShard reports whether name can be a shard directory's.
func isShard(name string) bool {
	hexDigit := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
	return len(name) == 2 && hexDigit(name[0]) && hexDigit(name[1])
}

func (s *Store) flatPath(agent string) string { return filepath.Join(s.dir, agent+Ext) }

func (s *Store) shardPath(agent string) string {
	return filepath.Join(s.dir, shardOf(agent), agent+Ext)
}

// find returns the file that holds agent's log: in the directory itself, or
// else in its shard directory. An error wrapping fs.ErrNotExist if neither
// holds one.
func (s *Store) find(agent string) (string, error) {
	p := s.flatPath(agent)
	_, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		q := s.shardPath(agent)
		if _, qerr := os.Lstat(q); !errors.Is(qerr, fs.ErrNotExist) {
			return q, qerr
		}
	}
	return p, err
}

// placeFor returns the file a new log of agent goes to (see above).
func (s *Store) placeFor(agent string) string {
	return placeIn(s.dir, agent, s.flat.Load(), int64(s.opts.ShardAfter))
}

// placeIn returns the file a new log of agent goes to in dir, which itself
// holds flat logs, with ShardAfter after.
func placeIn(dir, agent string, flat, after int64) string {
	if flat < after {
		return filepath.Join(dir, agent+Ext)
	}
	return filepath.Join(dir, shardOf(agent), agent+Ext)
}

// NewLogPath returns the file a new log of agent goes to in the data
// directory dir when dir itself holds flat logs, as a store opened with
// Options.ShardAfter shardAfter places it: for a tool that writes a data
// directory whole (a restore), so that it has the layout the store would
// have given it. The caller makes the shard directory.
func NewLogPath(dir, agent string, flat, shardAfter int) string {
	return placeIn(dir, agent, int64(flat), int64(shardAfter))
}

// makeShard makes the shard directory dir, durably, if it is not there.
func (s *Store) makeShard(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return syncDir(s.dirF)
}

// syncDirOf makes the entries of the directory that holds path durable.
func (s *Store) syncDirOf(path string) error {
	if dir := filepath.Dir(path); dir != filepath.Clean(s.dir) {
		return syncPath(dir)
	}
	return syncDir(s.dirF)
}

// logFile is a log found by listLogs.
type logFile struct {
	path string
	ent  fs.DirEntry
}

// logDirs is what listLogs found in a directory.
type logDirs struct {
	logs map[string]logFile // by agent
	flat int                // logs in the directory itself
	// twice lists the agents with a log in both places; logs holds the
	// one in the directory itself.
	twice []string
}

// listLogs reads dir and its shard directories (names only: no stat).
func listLogs(dir string) (logDirs, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return logDirs{}, err
	}
	d := logDirs{logs: make(map[string]logFile, len(ents))}
	var shards []string
	for _, e := range ents {
		name := e.Name()
		if isShard(name) && e.IsDir() {
			shards = append(shards, name)
			continue
		}
		if id, ok := strings.CutSuffix(name, Ext); ok && store.CheckAgent(id) == nil {
			d.logs[id] = logFile{filepath.Join(dir, name), e}
			d.flat++
		}
	}
	for _, sh := range shards {
		ents, err := os.ReadDir(filepath.Join(dir, sh))
		if err != nil {
			return logDirs{}, err
		}
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), Ext)
			if !ok || store.CheckAgent(id) != nil || shardOf(id) != sh {
				continue
			}
			if _, ok := d.logs[id]; ok {
				d.twice = append(d.twice, id)
				continue
			}
			d.logs[id] = logFile{filepath.Join(dir, sh, e.Name()), e}
		}
	}
	return d, nil
}

// twiceDamage is the damage of an agent with a log in both places.
func (s *Store) twiceDamage(agent string) error {
	return &store.DamageError{Agent: agent, Path: s.flatPath(agent), Offset: -1,
		Reason: fmt.Sprintf("the agent has a second log, %s: remove the one that is not its log", s.shardPath(agent))}
}
