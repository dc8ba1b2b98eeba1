package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/servo-dev/servo/api"
)

// termInfo says how to draw on an output: whether it is a terminal (redraw
// in place), how wide it is (0: unbounded), whether to use colours.
type termInfo struct {
	tty   bool
	width int
	color bool
}

// defaultWidth is assumed for a terminal that reports no width.
const defaultWidth = 100

// termOf inspects w: only an *os.File that is a terminal (and not
// TERM=dumb) is one. Colours need a terminal and no NO_COLOR; $COLUMNS
// overrides the width.
func termOf(w io.Writer) termInfo {
	f, ok := w.(*os.File)
	if !ok {
		return termInfo{}
	}
	width, tty := termSize(f)
	if !tty || os.Getenv("TERM") == "dumb" {
		return termInfo{}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		width = n
	}
	if width <= 0 {
		width = defaultWidth
	}
	_, noColor := os.LookupEnv("NO_COLOR")
	return termInfo{tty: true, width: width, color: !noColor}
}

// table collects rows and prints them in aligned columns. When the output
// has a width, the flexible columns are shrunk, longest first, and their
// cells truncated with "…" so that no line wraps.
type table struct {
	head []string
	rows [][]string
	// flex lists the columns that may be truncated, the first shrunk first.
	flex []int
	// color, when set, colours the cells of column colorCol by state.
	colorCol int
}

func newTable(head ...string) *table {
	return &table{head: head, colorCol: -1}
}

// shrink marks columns that may be truncated to fit the width, in the
// order to shrink them: each down to 8 characters before the next, then
// all down to 4.
func (t *table) shrink(cols ...int) *table {
	t.flex = append(t.flex, cols...)
	return t
}

// colorState colours column col by the task state it holds.
func (t *table) colorState(col int) *table {
	t.colorCol = col
	return t
}

func (t *table) add(cells ...string) {
	for i, c := range cells {
		cells[i] = oneLineOf(c)
	}
	t.rows = append(t.rows, cells)
}

// lines renders the table for ti, one string per line (no newline).
func (t *table) lines(ti termInfo) []string {
	const gap = 2
	widths := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	if ti.width > 0 {
		total := func() int {
			n := gap * (len(widths) - 1)
			for _, w := range widths {
				n += w
			}
			return n
		}
		for _, floor := range []int{8, 4} {
			for _, c := range t.flex {
				if over := total() - (ti.width - 1); over > 0 && widths[c] > floor {
					widths[c] -= min(over, widths[c]-floor)
				}
			}
		}
	}
	var out []string
	for ri, r := range append([][]string{t.head}, t.rows...) {
		var b strings.Builder
		for i, c := range r {
			c = fit(c, widths[i])
			pad := widths[i] - utf8.RuneCountInString(c)
			if ti.color && ri > 0 && i == t.colorCol {
				c = colorize(c, api.State(strings.TrimSpace(c)))
			}
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", pad+gap))
			}
		}
		line := strings.TrimRight(b.String(), " ")
		if ti.width > 0 && !ti.color {
			line = fit(line, ti.width-1)
		}
		out = append(out, line)
	}
	return out
}

// write prints the table to w.
func (t *table) write(w io.Writer, ti termInfo) error {
	for _, l := range t.lines(ti) {
		if _, err := io.WriteString(w, l+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// fit truncates s to n runes, ending with "…" when cut.
func fit(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// oneLineOf keeps the first line of s.
func oneLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return inert(strings.TrimRight(s, "\r"))
}

// inert makes text from outside (a worker's message or error, a reason)
// safe for a terminal: every control character but tab and newline (ESC
// among them, which could retitle, clear or recolour the operator's
// terminal; a bare CR, which could overwrite the line) and every
// bidirectional override is shown escaped (\x1b, \u202e) instead of sent.
func inert(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafeRune(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	if r == '\t' || r == '\n' {
		return false
	}
	return unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == utf8.RuneError
}

// ANSI colours by state.
const (
	ansiReset  = "\x1b[0m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
	ansiDim    = "\x1b[2m"
)

func colorize(s string, st api.State) string {
	var c string
	switch st {
	case api.Succeeded:
		c = ansiGreen
	case api.Failed:
		c = ansiRed
	case api.Cancelling, api.Cancelled:
		c = ansiYellow
	case api.Running:
		c = ansiCyan
	case api.Pending, api.Queued:
		c = ansiDim
	default:
		return s
	}
	return c + s + ansiReset
}
