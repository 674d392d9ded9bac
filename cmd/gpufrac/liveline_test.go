package main

import (
	"bytes"
	"strings"
	"testing"
)

// screen plays what a terminal shows for text with \r, \n and "erase to end of line".
func screen(out string) []string {
	var lines []string
	line, col := []rune{}, 0
	for i := 0; i < len(out); {
		switch {
		case strings.HasPrefix(out[i:], "\033[K"):
			line = line[:col]
			i += 3
		case out[i] == '\r':
			col = 0
			i++
		case out[i] == '\n':
			lines = append(lines, string(line))
			line, col = []rune{}, 0
			i++
		default:
			r := []rune(out[i:])[0]
			if col < len(line) {
				line[col] = r
			} else {
				line = append(line, r)
			}
			col++
			i += len(string(r))
		}
	}
	return append(lines, string(line))
}

// On a terminal the job's own output and the live line never overwrite each other: each job
// line is whole on screen, and the live line comes back after it.
func TestLiveLineAndJobOutput(t *testing.T) {
	tests := []struct {
		name  string
		steps func(l *liveLine)
		want  []string
	}{
		{"a job line between updates", func(l *liveLine) {
			l.update("peak %s", "1GiB")
			l.Write([]byte("loading weights\n"))
			l.update("peak %s", "2GiB")
		}, []string{"loading weights", "peak 2GiB"}},
		{"a line written in pieces", func(l *liveLine) {
			l.update("peak 1GiB")
			l.Write([]byte("epoch 1: "))
			l.update("peak 3GiB") // must not land in the middle of the job's line
			l.Write([]byte("loss 0.3\n"))
		}, []string{"epoch 1: loss 0.3", "peak 3GiB"}},
		{"done ends a job's unfinished line", func(l *liveLine) {
			l.update("peak 1GiB")
			l.Write([]byte("no newline"))
			l.done()
			l.printf("peak %s -> cap %s", "1GiB", "2.6GiB")
		}, []string{"no newline", "peak 1GiB -> cap 2.6GiB", ""}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		l := &liveLine{w: &buf, tty: true}
		tt.steps(l)
		if got := screen(buf.String()); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: screen %q, want %q (raw %q)", tt.name, got, tt.want, buf.String())
		}
	}
}
