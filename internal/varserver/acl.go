package varserver

import "strings"

// Capabilities a Rule can grant on variables, as in Nomad's ACL policy grammar.
const (
	CapList    = "list"
	CapRead    = "read"
	CapWrite   = "write"
	CapDestroy = "destroy"
	CapDeny    = "deny"
)

// Rule grants capabilities on the variables whose path matches Path in the namespaces that
// match Namespace. Both may be globs where '*' matches any run of characters, '/' included.
// An empty Namespace means "default".
type Rule struct {
	Namespace    string
	Path         string
	Capabilities []string
	// Jobs are the namespace's job capabilities (CapReadJob, CapSubmitJob, CapDeny); Path
	// plays no part in them.
	Jobs []string
}

// Management returns rules that allow everything everywhere.
func Management() []Rule {
	return []Rule{{Namespace: "*", Path: "*", Capabilities: []string{CapList, CapRead, CapWrite, CapDestroy}, Jobs: []string{CapSubmitJob}}}
}

type capSet struct{ list, read, write, destroy bool }

// resolve picks the capabilities for one variable the way Nomad does: an exact namespace
// beats a namespace glob, and within it an exact path beats globs, and among globs the one
// closest in length to the requested path wins. Rules with the same spec add up; deny wins.
func resolve(rules []Rule, ns, path string) capSet {
	var nsRules []Rule
	bestNS := -1
	for _, r := range rules {
		rns := r.Namespace
		if rns == "" {
			rns = "default"
		}
		var score int
		switch {
		case rns == ns:
			score = 1 << 20
		case glob(rns, ns):
			score = len(rns)
		default:
			continue
		}
		if score > bestNS {
			bestNS, nsRules = score, nsRules[:0]
		}
		if score == bestNS {
			nsRules = append(nsRules, r)
		}
	}
	bestPath := -1
	var caps []string
	for _, r := range nsRules {
		var score int
		switch {
		case r.Path == path:
			score = 1 << 20
		case glob(r.Path, path):
			score = len(r.Path)
		default:
			continue
		}
		if score > bestPath {
			bestPath, caps = score, nil
		}
		if score == bestPath {
			caps = append(caps, r.Capabilities...)
		}
	}
	var cs capSet
	for _, c := range caps {
		switch c {
		case CapDeny:
			return capSet{}
		case CapList:
			cs.list = true
		case CapRead:
			cs.read, cs.list = true, true
		case CapWrite:
			cs.write = true
		case CapDestroy:
			cs.destroy = true
		}
	}
	return cs
}

// glob matches s against a pattern where '*' matches any sequence of characters.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}
