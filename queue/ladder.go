package queue

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// maxAttemptsLimit is the largest max_attempts a queue file may ask for: the ladder climbs
// from a guarantee to the GPU alone in a few steps, and a larger bound only buys repeats.
const maxAttemptsLimit = 20

// MaxBorrowWait is the longest borrow_wait (and gpufrac run --borrow-wait) may be, as the
// plugin's borrow_wait: a borrower's allocation that waits longer holds admissions on its GPU
// up for as long.
const MaxBorrowWait = 10 * time.Minute

// ladder reads the keys of the ladder (policy.Policy.Next): max_attempts at the top, in a
// template or in a job (the job's wins, then its template's, then the queue's), and cap_fixed
// in a template or a job (its cap is a ceiling, never raised after a failure; the job's wins,
// false too); and borrow_wait
// at the top, how long a borrower's allocation waits before it fails inside the job and the job
// climbs the ladder (gpufrac run --borrow-wait wins).
func (d *decoder) ladder(fq *fileQueue, q *Queue) {
	q.MaxAttempts = d.attempts(fq.Attempts)
	if !isNull(fq.Wait) {
		if w := d.duration(fq.Wait, "borrow_wait"); w > MaxBorrowWait {
			d.add(fq.Wait.Range(), "Invalid borrow_wait", fmt.Sprintf("borrow_wait = %s: want at most 10m", w))
		} else {
			q.BorrowWait = w
		}
	}
	for _, t := range fq.Templates {
		spec, ok := q.Templates[t.Name]
		if !ok {
			continue
		}
		spec.MaxAttempts = d.attempts(t.Attempts)
		spec.CapFixed = d.boolean(t.CapFixed, "cap_fixed")
		if spec.CapFixed && spec.CapBytes == 0 {
			d.add(t.CapFixed.Range(), "cap_fixed without a cap", fmt.Sprintf("template %q: cap_fixed = true fixes a declared cap; add cap = \"...\"", t.Name))
		}
		q.Templates[t.Name] = spec
	}
	for i, j := range fq.Jobs {
		if i >= len(q.Jobs) {
			break
		}
		q.Jobs[i].MaxAttempts = d.attempts(j.Attempts)
		if isNull(j.CapFixed) {
			continue
		}
		fixed := d.boolean(j.CapFixed, "cap_fixed")
		q.Jobs[i].CapFixed = &fixed
		// As in a template: with no declared cap the job's first guarantee (a probe's, or the
		// one its peak earns) would become its ceiling, and its first failure would end it.
		if t := q.Jobs[i].Template; fixed && q.Templates[t].CapBytes == 0 {
			d.add(j.CapFixed.Range(), "cap_fixed without a cap", fmt.Sprintf(
				"job %q: cap_fixed = true fixes its template %q's declared cap; add cap = \"...\" to template %q", j.Name, t, t))
		}
	}
}

func (d *decoder) attempts(expr hcl.Expression) int {
	f, ok := d.number(expr, "max_attempts")
	if !ok {
		return 0
	}
	if f != float64(int(f)) || f < 1 || f > maxAttemptsLimit {
		d.add(expr.Range(), "Invalid max_attempts", fmt.Sprintf("max_attempts = %v: want a whole number from 1 to %d", f, maxAttemptsLimit))
		return 0
	}
	return int(f)
}

func (d *decoder) boolean(expr hcl.Expression, name string) bool {
	v, ok := d.value(expr)
	if !ok {
		return false
	}
	if v.Type() != cty.Bool {
		d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s must be true or false, not %s", name, v.Type().FriendlyName()))
		return false
	}
	return v.True()
}
