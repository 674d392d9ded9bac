package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

const (
	svgWidth   = 1100.0
	plotLeft   = 170.0
	plotRight  = 20.0
	chartH     = 220.0
	laneH      = 22.0
	axisH      = 34.0
	plotWidth  = svgWidth - plotLeft - plotRight
	chartSteps = 600
	// laneAttempts is the most attempts on one GPU drawn one lane each; past it, lanes are
	// grouped by template and attempts that do not overlap share a row, so the page's height
	// follows how many jobs ran at once, not how many ran.
	laneAttempts = 40
)

func xOf(t, end float64) float64 { return plotLeft + math.Max(0, math.Min(1, t/end))*plotWidth }

// memAt is an attempt's measured memory at run time t (step interpolation of its samples).
func memAt(a record.Attempt, t float64) size.Bytes {
	s := a.Samples
	if len(s) == 0 {
		return 0
	}
	i, _ := slices.BinarySearchFunc(s, t, func(m record.MemSample, t float64) int {
		switch {
		case m.T < t:
			return -1
		case m.T > t:
			return 1
		}
		return 0
	})
	if i < len(s) && s[i].T == t {
		return s[i].Bytes
	}
	if i == 0 {
		return 0
	}
	return s[i-1].Bytes
}

// reservedAt is what an attempt holds of the budget at time t: its cap then, or the budget
// for a job alone or uncapped; never less than what it uses (a job above its cap until the
// enforcer stops it).
func reservedAt(a record.Attempt, t time.Time, used size.Bytes, budget size.Bytes) size.Bytes {
	r := a.CapAt(t)
	if a.WholeGPU || !a.Capped {
		r = budget
	}
	return max(r, used)
}

// memoryChart stacks, per attempt on one GPU, its used memory (solid) and the rest of its
// reservation (pale) over time, on a GiB axis, with the budget and the total as lines and a
// marker where a cap changed in place.
func memoryChart(atts []record.Attempt, g record.GPUResult, t0 time.Time, end float64, runStart time.Time, cols map[string]string) string {
	var b strings.Builder
	h := chartH + axisH
	fmt.Fprintf(&b, `<svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" font-size="11" data-chart="memory">`, svgWidth, h, svgWidth, h)
	top := 10.0
	inner := chartH - top
	maxY := float64(g.TotalBytes)
	if maxY <= 0 {
		maxY = 1
	}
	yOf := func(v float64) float64 { return top + inner - math.Min(1, v/maxY)*inner }
	gibAxis(&b, maxY, yOf)
	hatch := fmt.Sprintf("borrowed-%d", g.Index)
	fmt.Fprintf(&b, `<defs><pattern id="%s" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)"><rect width="3" height="6" fill="#fff" fill-opacity="0.7"/></pattern></defs>`, hatch)
	// Run-relative sample times are relative to runStart; the chart's 0 is the first start.
	off := t0.Sub(runStart).Seconds()
	step := end / chartSteps
	base := make([]float64, chartSteps+1)
	var marks strings.Builder
	for _, a := range atts {
		for _, c := range a.CapChanges {
			x := xOf(c.At.Sub(t0).Seconds(), end)
			fmt.Fprintf(&marks, `<path d="M%.1f,%.1f l-5,-8 h10 z" fill="#222" data-mark="cap-change"><title>%s: cap %s -> %s in place at %.1fs</title></path>`,
				x, top+8, esc(a.Job), c.From, c.To, c.At.Sub(t0).Seconds())
		}
	}
	if len(atts) > laneAttempts {
		templateBands(&b, atts, g, t0, end, off, cols, yOf)
	}
	for _, a := range atts {
		if len(atts) > laneAttempts {
			break // drawn per template above
		}
		s0, s1 := a.Start.Sub(t0).Seconds(), a.End.Sub(t0).Seconds()
		var bottom, usedTop, resTop, ownTop []string
		borrows, borrowed := a.LimitBytes > a.CapBytes && a.Capped && !a.WholeGPU, false
		for k := 0; k <= chartSteps; k++ {
			t := float64(k) * step
			if t < s0-step || t > s1+step {
				continue // outside the attempt: draw nothing, so an outline never runs along others
			}
			used, res, own := 0.0, 0.0, 0.0
			if t >= s0 && t <= s1 {
				at := t0.Add(time.Duration(t * float64(time.Second)))
				u := memAt(a, t+off)
				used = float64(u)
				res = float64(reservedAt(a, at, u, g.BudgetBytes))
				own = used
				if g := float64(a.CapAt(at)); borrows && used > g {
					// Past its guarantee: what it borrowed is drawn apart, hatched.
					own, borrowed = g, true
				}
			}
			x := xOf(t, end)
			bottom = append(bottom, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k])))
			usedTop = append(usedTop, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k]+used)))
			ownTop = append(ownTop, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k]+own)))
			resTop = append(resTop, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k]+res)))
			base[k] += res
		}
		if len(bottom) < 2 {
			continue
		}
		col := cols[a.Template]
		stroke := "none"
		if a.Outcome == record.OutcomeCapViolation {
			stroke = outcomeColour[record.OutcomeCapViolation]
		}
		tip := fmt.Sprintf("%s #%d (%s): guarantee %s, limit %s, peak %s, %s", a.Job, a.Number, a.Template, a.CapLabel(), a.LimitLabel(), a.PeakBytes, outcomeName(a))
		// Pale band: from the used top up to the reservation's top.
		fmt.Fprintf(&b, `<polygon points="%s %s" fill="%s" fill-opacity="0.22" stroke="%s" stroke-width="0.6"><title>%s (reserved)</title></polygon>`,
			strings.Join(resTop, " "), strings.Join(reversed(usedTop), " "), col, col, esc(tip))
		fmt.Fprintf(&b, `<polygon points="%s %s" fill="%s" fill-opacity="0.9" stroke="%s" stroke-width="1.5"><title>%s (used)</title></polygon>`,
			strings.Join(ownTop, " "), strings.Join(reversed(bottom), " "), col, stroke, esc(tip))
		if borrowed {
			pts := strings.Join(usedTop, " ") + " " + strings.Join(reversed(ownTop), " ")
			fmt.Fprintf(&b, `<g data-borrowed="%s"><polygon points="%s" fill="%s" fill-opacity="0.9"/><polygon points="%s" fill="url(#%s)" stroke="%s" stroke-width="0.6"><title>%s (borrowed past its %s guarantee: %s at its peak)</title></polygon></g>`,
				esc(a.Job), pts, col, pts, hatch, col, esc(tip), a.CapBytes, a.BorrowedBytes)
		}
	}
	for _, line := range []struct {
		v     size.Bytes
		label string
		col   string
	}{{g.BudgetBytes, "budget " + g.BudgetBytes.String(), "#c62828"}, {g.TotalBytes, "total " + g.TotalBytes.String(), "#888"}} {
		y := yOf(float64(line.v))
		dy := 11.0 // budget label below its line, total label above its own
		if line.v == g.TotalBytes {
			dy = -2
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"/><text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`,
			plotLeft, svgWidth-plotRight, y, y, line.col, svgWidth-plotRight-4, y+dy, line.col, esc(line.label))
	}
	b.WriteString(marks.String())
	timeAxis(&b, chartH, end)
	b.WriteString("</svg>\n")
	return b.String()
}

// templateBands is the memory chart of a big run: per template, the sum of its attempts' used
// memory (solid) and reservations (pale), stacked, so the page stays small and the chart
// readable however many jobs ran.
func templateBands(b *strings.Builder, atts []record.Attempt, g record.GPUResult, t0 time.Time, end, off float64, cols map[string]string, yOf func(float64) float64) {
	step := end / chartSteps
	var order []string
	used, reserved := map[string][]float64{}, map[string][]float64{}
	for _, a := range atts {
		if _, ok := used[a.Template]; !ok {
			order = append(order, a.Template)
			used[a.Template], reserved[a.Template] = make([]float64, chartSteps+1), make([]float64, chartSteps+1)
		}
		s0, s1 := a.Start.Sub(t0).Seconds(), a.End.Sub(t0).Seconds()
		for k := max(0, int(math.Ceil(s0/step))); k <= chartSteps && float64(k)*step <= s1; k++ {
			t := float64(k) * step
			u := memAt(a, t+off)
			used[a.Template][k] += float64(u)
			reserved[a.Template][k] += float64(reservedAt(a, t0.Add(time.Duration(t*float64(time.Second))), u, g.BudgetBytes))
		}
	}
	base := make([]float64, chartSteps+1)
	for _, tp := range order {
		var bottom, usedTop, resTop []string
		for k := 0; k <= chartSteps; k++ {
			x := xOf(float64(k)*step, end)
			bottom = append(bottom, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k])))
			usedTop = append(usedTop, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k]+used[tp][k])))
			resTop = append(resTop, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k]+reserved[tp][k])))
			base[k] += reserved[tp][k]
		}
		col := cols[tp]
		fmt.Fprintf(b, `<polygon points="%s %s" fill="%s" fill-opacity="0.22" stroke="%s" stroke-width="0.6"><title>%s: reserved</title></polygon>`,
			strings.Join(resTop, " "), strings.Join(reversed(usedTop), " "), col, col, esc(tp))
		fmt.Fprintf(b, `<polygon points="%s %s" fill="%s" fill-opacity="0.9" stroke="none"><title>%s: used</title></polygon>`,
			strings.Join(usedTop, " "), strings.Join(reversed(bottom), " "), col, esc(tp))
	}
}

// gibAxis draws the memory axis: ticks at a round number of GiB, with grid lines.
func gibAxis(b *strings.Builder, maxY float64, yOf func(float64) float64) {
	fmt.Fprintf(b, `<g data-axis="memory"><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#444"/>`, plotLeft, plotLeft, yOf(0), yOf(maxY))
	gib := float64(size.GiB)
	tick := niceStep(maxY / gib / 5)
	for v := 0.0; v*gib <= maxY+1; v += tick {
		y := yOf(v * gib)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#444"/><text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%g GiB</text>`,
			plotLeft, svgWidth-plotRight, y, y, plotLeft-4, plotLeft, y, y, plotLeft-6, y+4, v)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444" transform="rotate(-90 %.1f %.1f)">GPU memory</text></g>`,
		plotLeft-70, yOf(maxY/2), plotLeft-70, yOf(maxY/2))
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// laneRow is one row of the lanes: a label and the attempts drawn in it.
type laneRow struct {
	label string
	atts  []record.Attempt
}

// laneRows is one row per attempt for a small run; past laneAttempts, one group of rows per
// template, where an attempt takes the first row free at its start.
func laneRows(atts []record.Attempt) []laneRow {
	if len(atts) <= laneAttempts {
		rows := make([]laneRow, len(atts))
		for i, a := range atts {
			label := fmt.Sprintf("%s #%d", a.Job, a.Number)
			if a.Probe {
				label += " (probe)"
			} else if a.WholeGPU {
				label += " (alone)"
			}
			rows[i] = laneRow{label, []record.Attempt{a}}
		}
		return rows
	}
	var order []string
	byTemplate := map[string][]record.Attempt{}
	for _, a := range atts {
		if _, ok := byTemplate[a.Template]; !ok {
			order = append(order, a.Template)
		}
		byTemplate[a.Template] = append(byTemplate[a.Template], a)
	}
	var rows []laneRow
	for _, t := range order {
		ts := byTemplate[t]
		slices.SortStableFunc(ts, func(x, y record.Attempt) int { return x.Start.Compare(y.Start) })
		var group []laneRow
		var free []time.Time // when each row of the group frees up
		for _, a := range ts {
			r := slices.IndexFunc(free, func(f time.Time) bool { return !f.After(a.Start) })
			if r < 0 {
				r = len(group)
				group = append(group, laneRow{})
				free = append(free, time.Time{})
			}
			group[r].atts = append(group[r].atts, a)
			free[r] = a.End
		}
		group[0].label = fmt.Sprintf("%s (%d attempts)", t, len(ts))
		rows = append(rows, group...)
	}
	return rows
}

// lanes draws the attempts as bars coloured by outcome (the page puts the outcome legend above). A run small enough for one lane per
// attempt also shows, inside each bar, its memory (solid) against its cap (dashed).
func lanes(atts []record.Attempt, t0 time.Time, end float64, runStart time.Time) string {
	var b strings.Builder
	rows := laneRows(atts)
	detailed := len(atts) <= laneAttempts
	// Samples are timed from the run's start; the chart's 0 is the first attempt's start.
	off := t0.Sub(runStart).Seconds()
	h := float64(len(rows))*laneH + axisH + 8
	fmt.Fprintf(&b, `<svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" font-size="11" data-chart="lanes" data-grouped="%t">`,
		svgWidth, h, svgWidth, h, !detailed)
	for i, row := range rows {
		y := 4 + float64(i)*laneH
		if row.label != "" {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, plotLeft-6, y+laneH/2+3, esc(row.label))
		}
		if !detailed {
			mergedBars(&b, row.atts, y, t0, end)
			continue
		}
		for _, a := range row.atts {
			s0, s1 := a.Start.Sub(t0).Seconds(), a.End.Sub(t0).Seconds()
			x0, x1 := xOf(s0, end), xOf(s1, end)
			if x1-x0 < 2 {
				x1 = x0 + 2
			}
			col := laneColour(a)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.25" stroke="%s" rx="3"><title>%s #%d: %s, cap %s, peak %s, %.1fs to %.1fs, exit %d %s</title></rect>`,
				x0, y, x1-x0, laneH-4, col, col, esc(a.Job), a.Number, esc(outcomeName(a)), esc(a.CapLabel()), a.PeakBytes, s0, s1, a.ExitCode, esc(a.Detail))
			if detailed {
				laneDetail(&b, a, y, x0, x1, off, end, t0, col)
			}
		}
	}
	timeAxis(&b, float64(len(rows))*laneH+4, end)
	b.WriteString("</svg>\n")
	return b.String()
}

// mergedBars draws a grouped row's attempts, merging neighbours of one colour less than a
// pixel apart into one bar: at 10,000 attempts most bars are narrower than a pixel anyway.
func mergedBars(b *strings.Builder, atts []record.Attempt, y float64, t0 time.Time, end float64) {
	for i := 0; i < len(atts); {
		first, col := atts[i], laneColour(atts[i])
		x0, x1 := xOf(first.Start.Sub(t0).Seconds(), end), xOf(first.End.Sub(t0).Seconds(), end)
		j := i + 1
		for ; j < len(atts) && laneColour(atts[j]) == col && xOf(atts[j].Start.Sub(t0).Seconds(), end)-x1 < 1; j++ {
			x1 = max(x1, xOf(atts[j].End.Sub(t0).Seconds(), end))
		}
		last := atts[j-1]
		tip := fmt.Sprintf("%s #%d: %s, cap %s, peak %s, %.1fs to %.1fs", first.Job, first.Number, outcomeName(first),
			first.CapLabel(), first.PeakBytes, first.Start.Sub(t0).Seconds(), first.End.Sub(t0).Seconds())
		if j-i > 1 {
			tip = fmt.Sprintf("%d attempts, %s: %s to %s, %.1fs to %.1fs", j-i, outcomeName(first), first.Job, last.Job,
				first.Start.Sub(t0).Seconds(), last.End.Sub(t0).Seconds())
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.25" stroke="%s" rx="2"><title>%s</title></rect>`,
			x0, y, max(x1-x0, 2), laneH-4, col, col, esc(tip))
		i = j
	}
}

// laneDetail draws an attempt's memory inside its bar on the attempt's own scale, its cap as a
// dashed step (lower after a change in place) and a marker at each change.
func laneDetail(b *strings.Builder, a record.Attempt, y, x0, x1, off, end float64, t0 time.Time, col string) {
	scale := float64(a.PeakBytes)
	if a.Capped && !a.WholeGPU {
		scale = float64(max(a.CapBytes, a.PeakBytes))
		for _, c := range a.CapChanges {
			scale = max(scale, float64(c.From))
		}
	}
	if scale <= 0 {
		return
	}
	inner := laneH - 8
	yv := func(v float64) float64 { return y + 2 + inner - math.Min(1, v/scale)*inner }
	var pts []string
	for _, s := range a.Samples {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(s.T-off, end), yv(float64(s.Bytes))))
	}
	if len(pts) > 1 {
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.Join(pts, " "), col)
	}
	if !a.Capped || a.WholeGPU || a.CapBytes == 0 {
		return
	}
	from := x0
	for _, c := range a.CapChanges {
		xc := xOf(c.At.Sub(t0).Seconds(), end)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222" stroke-dasharray="4,2"/>`, from, xc, yv(float64(c.From)), yv(float64(c.From)))
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222" stroke-dasharray="2,1" data-mark="cap-change"><title>cap %s -> %s in place</title></line>`,
			xc, xc, yv(float64(c.From)), yv(float64(c.To)), c.From, c.To)
		from = xc
	}
	yc := yv(float64(a.CapBytes))
	fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222" stroke-dasharray="4,2"/>`, from, x1, yc, yc)
}

// timeAxis draws the time axis at height y: seconds since the first start, at round steps.
func timeAxis(b *strings.Builder, y, end float64) {
	fmt.Fprintf(b, `<g data-axis="time"><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#444"/>`, plotLeft, svgWidth-plotRight, y, y)
	tick := niceStep(end / 8)
	for t := 0.0; t <= end+1e-9; t += tick {
		x := xOf(t, end)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#444"/><text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%gs</text>`,
			x, x, y, y+4, x, y+15, math.Round(t*10)/10)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">seconds since the first start</text></g>`, plotLeft+plotWidth/2, y+29)
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
