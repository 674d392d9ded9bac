package probe

import (
	"regexp"
	"strings"
	"sync"
)

// Tail keeps the last bytes a job wrote (hand it a Spec's Stderr, beside the job's log): its last
// words, which say why a failed job failed. Safe for concurrent use.
type Tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTail keeps the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// maxLastLine bounds LastLine: an attempt's detail is one line of a table.
const maxLastLine = 200

// LastLine is the last line the job wrote, cut at maxLastLine bytes.
func (t *Tail) LastLine() string {
	s := strings.TrimSpace(t.String())
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > maxLastLine {
		s = s[:maxLastLine] + "..."
	}
	return s
}

// oomRE matches the out-of-memory messages of CUDA, PyTorch, JAX and the simulated job.
var oomRE = regexp.MustCompile(`(?i)(out of memory|CUDA_ERROR_OUT_OF_MEMORY|OutOfMemoryError|RESOURCE_EXHAUSTED)`)

// OutOfMemory says whether the job's last words report running out of GPU memory.
func (t *Tail) OutOfMemory() bool { return oomRE.MatchString(t.String()) }
