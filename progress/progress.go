// Package progress is what `gpufrac run` shows while it runs and when it ends: one line per
// event, stamped with the time since the run started; on a terminal a status line kept at the
// bottom; the lines of an attempt's start and end; and the summary table of a result. It
// formats and prints; the runner decides what happened.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/record"
)

// Printer prints a run's progress lines. Its methods may be called from several goroutines.
type Printer struct {
	w     io.Writer
	tty   bool
	since func() time.Duration
	mu    sync.Mutex
	// shown is true while a status line is on screen.
	shown bool
	// held are the lines printed before Begin (a dead run's reservations released, the ledger's
	// repairs): Begin prints them under the header, whose first line says what GPU is used.
	held  []string
	begun bool
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// New prints on w; since is the time since the run started (0 before it starts), which stamps
// every line.
func New(w io.Writer, since func() time.Duration) *Printer {
	return &Printer{w: w, tty: IsTerminal(w), since: since}
}

// TTY says whether the printer writes to a terminal, where it keeps a status line.
func (p *Printer) TTY() bool { return p.tty }

func (p *Printer) stamp() string { return fmt.Sprintf("[%6.1fs]", p.since().Seconds()) }

// Line prints one event line above the status line; before Begin it is held for Begin.
func (p *Printer) Line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	l := fmt.Sprintf("%s %s\n", p.stamp(), fmt.Sprintf(format, args...))
	if !p.begun {
		p.held = append(p.held, l)
		return
	}
	fmt.Fprint(p.w, l)
}

// FlushHeld prints the lines held for Begin, for a run that fails before it begins: what they
// say happened all the same.
func (p *Printer) FlushHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printHeld()
}

func (p *Printer) printHeld() {
	p.begun = true
	for _, l := range p.held {
		fmt.Fprint(p.w, l)
	}
	p.held = nil
}

// Begin prints the run's header, each line after "gpufrac run: ", then the lines held so far.
func (p *Printer) Begin(header []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range header {
		fmt.Fprintf(p.w, "gpufrac run: %s\n", h)
	}
	p.printHeld()
}

// Status redraws the terminal's status line; it does nothing where the output is no terminal.
func (p *Printer) Status(line string) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r\033[K"+p.stamp()+" "+line)
	p.shown = true
}

// End clears the status line.
func (p *Printer) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *Printer) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// Summary prints the result's summary (WriteSummary).
func (p *Printer) Summary(res *record.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	WriteSummary(p.w, res)
}
