package attribution

import (
	"slices"
	"strings"
)

// carriedAbove says whether a process read since it was last pruned carries token in its own
// environment and lives at or above cgroup, in every hierarchy the two share. Only the watchdog's
// token scan reads every process, so this knows a task's carriers once a scan has run; a
// process that no carrier read covers is left to the rules after the cgroup's.
func (a *Attributor) carriedAbove(token, cgroup string) bool {
	child := cgroupPaths(cgroup)
	if len(child) == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range a.m {
		if id.Cgroup != "" && slices.Contains(id.Tokens(), token) && within(child, cgroupPaths(id.Cgroup)) {
			return true
		}
	}
	return false
}

// cgroupPaths is a /proc/<pid>/cgroup file by hierarchy ("0:" for cgroup v2, "4:pids" for a v1
// one): each line's path.
func cgroupPaths(file string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(file) {
		// hierarchy-ID:controllers:path; a path, a name the task may choose, may hold colons
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		out[f[0]+":"+f[1]] = f[2]
	}
	return out
}

// within says whether every path of child is its hierarchy's path in parent or below it, with
// at least one hierarchy in both: a task can move its processes only below its own cgroups.
func within(child, parent map[string]string) bool {
	shared := false
	for h, c := range child {
		p, ok := parent[h]
		if !ok {
			continue
		}
		shared = true
		if c != p && !strings.HasPrefix(c, strings.TrimSuffix(p, "/")+"/") {
			return false
		}
	}
	return shared
}
