package runner

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// Colours of outcomes in the report.
var outcomeColour = map[string]string{
	OutcomeOK:           "#2e7d32",
	OutcomeCapViolation: "#c62828",
	OutcomeFailed:       "#ef6c00",
	OutcomeProbe:        "#6a1b9a",
	OutcomeCanceled:     "#757575",
	OutcomeCollateral:   "#f9a825",
}

// jobPalette colours the jobs' areas in the memory chart.
var jobPalette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#a0cbe8"}

const (
	svgWidth   = 1100.0
	plotLeft   = 170.0
	plotRight  = 20.0
	chartH     = 220.0
	laneH      = 22.0
	axisH      = 28.0
	plotWidth  = svgWidth - plotLeft - plotRight
	chartSteps = 600
)

// renderReport draws a self-contained HTML page: a header with the arm, the metric and totals,
// and per GPU a stacked chart of measured memory against caps and budget, and one lane per
// attempt coloured by outcome with its memory and cap inside the bar.
func renderReport(res *Result) ([]byte, error) {
	var b strings.Builder
	title := fmt.Sprintf("gpufrac run: %s arm", res.Arm)
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html.EscapeString(title) + "</title>\n")
	b.WriteString(`<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:28px 0 6px}
.sim{display:inline-block;background:#c62828;color:#fff;padding:3px 10px;border-radius:4px;font-weight:600;margin-left:8px;font-size:14px}
.kpis{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0}
.kpi{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:120px}
.kpi b{display:block;font-size:20px}.kpi span{color:#666;font-size:12px}
svg{background:#fff;border:1px solid #ddd;border-radius:6px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin-top:8px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}th{background:#f0f0f0}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.note{color:#666;font-size:13px}
</style></head><body>
`)
	b.WriteString("<h1>" + html.EscapeString(title))
	if res.Backend != "nvml" {
		b.WriteString(`<span class="sim">SIMULATED GPUs</span>`)
	}
	b.WriteString("</h1>\n")
	fmt.Fprintf(&b, `<div class="note">mode %s, %s profiles, %s backend (driver %s), cap = peak x %.2f + %s, headroom %s, at most %d jobs per GPU; queue %s; %s</div>`+"\n",
		esc(res.Mode), esc(res.Profiles), esc(res.Backend), esc(res.Driver), 1+res.Policy.CapMarginPercent/100,
		res.Policy.CapMarginBytes.SI(), res.Policy.HeadroomBytes, res.Policy.MaxTasksPerGPU, esc(res.Queue), res.Start.UTC().Format(time.RFC1123))
	ms := res.Makespan()
	b.WriteString(`<div class="kpis">`)
	kpi(&b, fmt.Sprintf("%d / %d", res.Completed, len(res.Jobs)), "jobs completed")
	kpi(&b, fmt.Sprintf("%.0f", res.JobsPerGPUHour), gpuHourLabel(len(res.GPUs)))
	kpi(&b, fmt.Sprintf("%.1fs", ms.Seconds()), "first start to last exit")
	if res.ExclusiveEstimate > 0 && ms > 0 && res.Arm != ArmExclusive {
		kpi(&b, fmt.Sprintf("%.2fx", res.ExclusiveEstimate.Seconds()/ms.Seconds()), fmt.Sprintf("vs one at a time (~%.0fs est.)", res.ExclusiveEstimate.Seconds()))
	}
	kpi(&b, fmt.Sprintf("%d", len(res.Attempts)), "attempts")
	kpi(&b, fmt.Sprintf("%d", res.Violations), "cap violations")
	if res.Collateral > 0 || len(res.GPUEvents) > 0 {
		kpi(&b, fmt.Sprintf("%d", res.Collateral), "collateral failures (re-run)")
	}
	kpi(&b, fmt.Sprintf("%.0f%%", res.BusyFraction*100), "GPU busy")
	kpi(&b, fmt.Sprintf("%.1f", res.Use.MeanRunning), "jobs running on average")
	kpi(&b, fmt.Sprintf("%.1fs", res.Use.Whole.Seconds()), "a job alone with the GPU")
	b.WriteString("</div>\n")
	b.WriteString(`<div class="legend">`)
	for _, o := range []string{OutcomeOK, OutcomeCapViolation, OutcomeFailed, OutcomeCollateral, OutcomeProbe, OutcomeCanceled} {
		fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s</span>`, outcomeColour[o], o)
	}
	b.WriteString(`<span><i style="background:none;border-top:2px dashed #222;height:0;border-radius:0"></i>cap</span>`)
	b.WriteString(`<span><i style="background:#222;height:2px;border-radius:0"></i>measured memory</span></div>` + "\n")
	b.WriteString(gpuEventsHTML(res))
	end := ms.Seconds()
	if end <= 0 {
		end = 1
	}
	t0 := firstStart(res)
	for _, g := range res.GPUs {
		var atts []Attempt
		for _, a := range res.Attempts {
			if a.GPU == g.UUID {
				atts = append(atts, a)
			}
		}
		fmt.Fprintf(&b, "<h2>GPU%d %s: %s, budget %s, %s mode, busy %.0f%%, %d jobs completed (%.0f jobs per GPU-hour)</h2>\n",
			g.Index, esc(g.Model), g.TotalBytes, g.BudgetBytes, esc(g.Mode), g.Busy*100, g.Completed, g.JobsPerGPUHour)
		b.WriteString(`<div class="note">Measured memory of each attempt, stacked (hover for the job); dashed: the sum of the caps held; red line: the budget.</div>` + "\n")
		b.WriteString(memoryChart(atts, g, t0, end, res.Start))
		b.WriteString(`<div class="note">One bar per attempt, coloured by outcome; inside: its memory (solid) against its cap (dashed).</div>` + "\n")
		b.WriteString(lanes(atts, t0, end, res.Start))
	}
	b.WriteString("<h2>Attempts</h2>\n<table><tr><th>job</th><th>template</th><th>#</th><th>GPU</th><th>cap</th><th>peak</th><th>start</th><th>time</th><th>exit</th><th>outcome</th><th>detail</th></tr>\n")
	for _, a := range res.Attempts {
		capS := "none"
		if a.WholeGPU {
			capS = "whole GPU"
		} else if a.Capped {
			capS = a.CapBytes.String()
		}
		fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%.1fs</td><td>%.1fs</td><td>%d</td><td style="color:%s;font-weight:600">%s</td><td>%s</td></tr>`+"\n",
			esc(a.Job), esc(a.Template), a.Number, a.GPUIndex, capS, a.PeakBytes, a.Start.Sub(t0).Seconds(), a.Duration().Seconds(),
			a.ExitCode, outcomeColour[a.Outcome], esc(a.Outcome), esc(a.Detail))
	}
	b.WriteString("</table>\n<p class=\"note\">Generated by gpufrac run. Raw data: results.json and attempts.csv next to this file.</p>\n</body></html>\n")
	return []byte(b.String()), nil
}

// gpuHourLabel names the run's rate and, with several GPUs, what it is divided by.
func gpuHourLabel(gpus int) string {
	if gpus > 1 {
		return fmt.Sprintf("jobs per GPU-hour (completed / makespan x %d GPUs)", gpus)
	}
	return "jobs per GPU-hour"
}

func esc(s string) string { return html.EscapeString(s) }

func kpi(b *strings.Builder, v, label string) {
	fmt.Fprintf(b, `<div class="kpi"><b>%s</b><span>%s</span></div>`, esc(v), esc(label))
}

func firstStart(res *Result) time.Time {
	var t time.Time
	for _, a := range res.Attempts {
		if t.IsZero() || a.Start.Before(t) {
			t = a.Start
		}
	}
	if t.IsZero() {
		return res.Start
	}
	return t
}

func xOf(t, end float64) float64 { return plotLeft + math.Max(0, math.Min(1, t/end))*plotWidth }

// memAt is an attempt's measured memory at run time t (step interpolation of its samples).
func memAt(a Attempt, t float64) size.Bytes {
	s := a.Samples
	if len(s) == 0 {
		return 0
	}
	i, _ := slices.BinarySearchFunc(s, t, func(m MemSample, t float64) int {
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

// memoryChart stacks the measured memory of the attempts on one GPU over time, with the sum of
// their caps as a dashed step line and the budget and total as horizontal lines.
func memoryChart(atts []Attempt, g GPUResult, t0 time.Time, end float64, runStart time.Time) string {
	var b strings.Builder
	h := chartH + axisH
	fmt.Fprintf(&b, `<svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" font-size="11">`, svgWidth, h, svgWidth, h)
	top := 10.0
	inner := chartH - top
	maxY := float64(g.TotalBytes)
	if maxY <= 0 {
		maxY = 1
	}
	yOf := func(v float64) float64 { return top + inner - math.Min(1, v/maxY)*inner }
	// Run-relative sample times are relative to runStart; the chart's 0 is the first start.
	off := t0.Sub(runStart).Seconds()
	step := end / chartSteps
	base := make([]float64, chartSteps+1)
	for i, a := range atts {
		s0, s1 := a.Start.Sub(t0).Seconds(), a.End.Sub(t0).Seconds()
		var upper []string
		var lower []string
		for k := 0; k <= chartSteps; k++ {
			t := float64(k) * step
			if t < s0-step || t > s1+step {
				continue // outside the attempt: draw nothing, so an outline never runs along others
			}
			v := 0.0
			if t >= s0 && t <= s1 {
				v = float64(memAt(a, t+off))
			}
			x := xOf(t, end)
			lower = append(lower, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k])))
			base[k] += v
			upper = append(upper, fmt.Sprintf("%.1f,%.1f", x, yOf(base[k])))
		}
		if len(upper) < 2 {
			continue
		}
		slices.Reverse(lower)
		col := jobPalette[i%len(jobPalette)]
		stroke := "none"
		if a.Outcome == OutcomeCapViolation {
			stroke = outcomeColour[OutcomeCapViolation]
		}
		fmt.Fprintf(&b, `<polygon points="%s %s" fill="%s" fill-opacity="0.8" stroke="%s" stroke-width="1.5"><title>%s #%d: peak %s, %s</title></polygon>`,
			strings.Join(upper, " "), strings.Join(lower, " "), col, stroke, esc(a.Job), a.Number, a.PeakBytes, esc(a.Outcome))
	}
	// Sum of caps held, as a step line.
	var caps []string
	for k := 0; k <= chartSteps; k++ {
		t := float64(k) * step
		sum := 0.0
		for _, a := range atts {
			if t >= a.Start.Sub(t0).Seconds() && t <= a.End.Sub(t0).Seconds() {
				c := float64(a.CapBytes)
				if a.WholeGPU || !a.Capped {
					c = float64(g.BudgetBytes)
				}
				sum += c
			}
		}
		caps = append(caps, fmt.Sprintf("%.1f,%.1f", xOf(t, end), yOf(sum)))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#222" stroke-width="1.2" stroke-dasharray="5,3"><title>sum of the caps held</title></polyline>`, strings.Join(caps, " "))
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
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/><text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`,
			plotLeft, svgWidth-plotRight, y, y, line.col, plotLeft-6, y+dy, line.col, esc(line.label))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">memory</text>`, plotLeft-6, top+inner/2)
	axis(&b, chartH, end)
	b.WriteString("</svg>\n")
	return b.String()
}

// lanes draws one bar per attempt, coloured by outcome, with its memory (solid) and cap
// (dashed) inside the bar on the attempt's own scale.
func lanes(atts []Attempt, t0 time.Time, end float64, runStart time.Time) string {
	var b strings.Builder
	// Samples are timed from the run's start; the chart's 0 is the first attempt's start.
	off := t0.Sub(runStart).Seconds()
	h := float64(len(atts))*laneH + axisH + 8
	fmt.Fprintf(&b, `<svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" font-size="11" style="margin-top:6px">`, svgWidth, h, svgWidth, h)
	for i, a := range atts {
		y := 4 + float64(i)*laneH
		s0, s1 := a.Start.Sub(t0).Seconds(), a.End.Sub(t0).Seconds()
		x0, x1 := xOf(s0, end), xOf(s1, end)
		if x1-x0 < 2 {
			x1 = x0 + 2
		}
		col := outcomeColour[a.Outcome]
		label := fmt.Sprintf("%s #%d", a.Job, a.Number)
		if a.Probe {
			label += " (probe)"
		} else if a.WholeGPU {
			label += " (alone)"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, plotLeft-6, y+laneH/2+3, esc(label))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.25" stroke="%s" rx="3"><title>%s: %s, cap %s, peak %s, %.1fs, exit %d %s</title></rect>`,
			x0, y, x1-x0, laneH-4, col, col, esc(label), esc(a.Outcome), a.CapBytes, a.PeakBytes, s1-s0, a.ExitCode, esc(a.Detail))
		scale := float64(a.PeakBytes)
		if a.Capped && !a.WholeGPU {
			scale = float64(max(a.CapBytes, a.PeakBytes))
		}
		if scale <= 0 {
			continue
		}
		inner := laneH - 8
		yv := func(v float64) float64 { return y + 2 + inner - math.Min(1, v/scale)*inner }
		var pts []string
		for _, s := range a.Samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(s.T-off, end), yv(float64(s.Bytes))))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.Join(pts, " "), col)
		}
		if a.Capped && !a.WholeGPU && a.CapBytes > 0 {
			yc := yv(float64(a.CapBytes))
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222" stroke-dasharray="4,2"/>`, x0, x1, yc, yc)
		}
	}
	axis(&b, float64(len(atts))*laneH+4, end)
	b.WriteString("</svg>\n")
	return b.String()
}

func axis(b *strings.Builder, y, end float64) {
	fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#444"/>`, plotLeft, svgWidth-plotRight, y, y)
	tick := niceStep(end / 8)
	for t := 0.0; t <= end+1e-9; t += tick {
		x := xOf(t, end)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#444"/><text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%gs</text>`,
			x, x, y, y+4, x, y+16, math.Round(t*10)/10)
	}
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
