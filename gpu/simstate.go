package gpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// simProc is one process entry of a simulated GPU.
type simProc struct {
	pid  int
	used size.Bytes
	busy bool
}

// staleTempAge is how old a leftover temporary file of a dead writer must be before it is removed;
// a writer killed between create and rename leaves one behind.
const staleTempAge = time.Minute

// live reads the process entries of one GPU, dropping (and deleting) those of dead processes.
func (s *Simulated) live(ctx context.Context, uuid string) ([]simProc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := s.device(uuid); err != nil {
		return nil, err
	}
	if err := s.lost(uuid); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, uuid, "procs")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("simulated GPU %s: %w", uuid, err)
	}
	out := make([]simProc, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			s.removeStaleTemp(filepath.Join(dir, name), e)
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		path := filepath.Join(dir, name)
		p, start, err := readProcEntry(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // its owner exited and removed it while we listed
		}
		if err != nil {
			s.logger.Warn("ignoring an unreadable simulated process entry", "path", path, "error", err)
			continue
		}
		p.pid = pid
		st, err := readProcStat(pid)
		if err != nil {
			return nil, fmt.Errorf("simulated GPU %s: process %d: %w", uuid, pid, err)
		}
		if !st.alive || (start != 0 && st.start != 0 && start != st.start) {
			// Dead, a zombie, or the PID now belongs to another process: the memory is free.
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.logger.Warn("cannot remove a dead process's simulated entry", "path", path, "error", err)
			}
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b simProc) int { return a.pid - b.pid })
	return out, nil
}

func (s *Simulated) removeStaleTemp(path string, e os.DirEntry) {
	info, err := e.Info()
	if err != nil || time.Since(info.ModTime()) < staleTempAge {
		return
	}
	_ = os.Remove(path)
}

// readProcEntry parses "<used> <busy> <start>".
func readProcEntry(path string) (simProc, uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return simProc{}, 0, err
	}
	f := strings.Fields(string(data))
	if len(f) != 3 {
		return simProc{}, 0, fmt.Errorf("want 3 fields, got %q", string(data))
	}
	used, err1 := strconv.ParseUint(f[0], 10, 64)
	start, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || (f[1] != "0" && f[1] != "1") {
		return simProc{}, 0, fmt.Errorf("malformed entry %q", string(data))
	}
	return simProc{used: size.Bytes(used), busy: f[1] == "1"}, start, nil
}

// writeFileAtomic replaces path so that concurrent readers see the old or the new content, never
// a partial one. No fsync: the simulated state need not survive a machine crash.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// procStat is what the simulated backend needs to know about a host process.
type procStat struct {
	alive bool   // running or sleeping; false for gone, zombie or dead
	start uint64 // start time in clock ticks since boot; 0 where unknown
}

// SimProcessAlive says whether host process pid still runs, by the rule the simulated backend
// applies to its clients (on Linux through procfs: a zombie is dead), so that simulated jobs
// that count each other see the same processes the simulated GPUs do.
func SimProcessAlive(pid int) (bool, error) {
	st, err := readProcStat(pid)
	return st.alive, err
}
