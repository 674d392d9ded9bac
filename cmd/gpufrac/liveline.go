package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/gpufrac/gpufrac/progress"
)

// liveLine prints progress as one updating line on a terminal and as plain lines otherwise.
// The probed job's own output goes through it too (Write): on a terminal the live line is
// cleared before the job's text and drawn again after it, so neither overwrites the other.
type liveLine struct {
	w     io.Writer
	tty   bool
	quiet bool

	mu      sync.Mutex // the job's output and the sampler write from different goroutines
	shown   bool       // the live line is on screen, without a newline
	last    string     // the live line's text, to draw again after the job's output
	partial bool       // the job's last write did not end a line
}

func newLiveLine(w io.Writer, quiet bool) *liveLine {
	return &liveLine{w: w, tty: progress.IsTerminal(w), quiet: quiet && !progress.IsTerminal(w)}
}

// clear takes the live line off the screen; the caller holds mu.
func (l *liveLine) clear() {
	if l.shown {
		fmt.Fprint(l.w, "\r\033[K")
		l.shown = false
	}
}

// settle takes the live line off the screen and ends a line the job left unfinished, so what
// comes next starts a line of its own; the caller holds mu.
func (l *liveLine) settle() {
	l.clear()
	if l.partial {
		fmt.Fprintln(l.w)
		l.partial = false
	}
}

func (l *liveLine) printf(format string, args ...any) {
	if l.quiet {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle()
	fmt.Fprintf(l.w, format+"\n", args...)
}

func (l *liveLine) update(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = fmt.Sprintf(format, args...)
	if l.partial {
		return // the job is in the middle of a line: the live line waits for its end
	}
	fmt.Fprint(l.w, "\r\033[K"+l.last)
	l.shown = true
}

// Write passes the job's output through, around the live line.
func (l *liveLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clear()
	n, err := l.w.Write(p)
	if len(p) > 0 {
		l.partial = p[len(p)-1] != '\n'
	}
	if l.tty && !l.partial && l.last != "" && bytes.Contains(p, []byte("\n")) {
		fmt.Fprint(l.w, l.last)
		l.shown = true
	}
	return n, err
}

func (l *liveLine) done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settle()
}
