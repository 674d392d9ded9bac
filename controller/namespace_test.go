package controller

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy/violations"
)

// A violation's allocation is read in its own namespace, the one the violation names. Read
// without it, an allocation of another namespace answers 404 from a namespace-scoped read (the
// fake's), and the controller took that for a deletion: it marked the violation skipped for
// good and the job that broke its cap restarted under the same units. A 403 is the
// controller's token lacking read-job in that namespace: an error that names the allocation and
// the namespace, the violation left for a later pass. Only a 404 in the allocation's own
// namespace, or in every namespace for a violation that names none, is a deletion.
func TestAllocationIsReadInItsNamespace(t *testing.T) {
	vars := varserver.Rule{Path: violations.PathPrefix + "*", Capabilities: []string{varserver.CapRead, varserver.CapWrite}}
	submitIn := func(ns string) varserver.Rule {
		return varserver.Rule{Namespace: ns, Jobs: []string{varserver.CapSubmitJob, varserver.CapAllocLifecycle}}
	}
	tests := []struct {
		name string
		// allocNS is where the job and its allocation are ("" for none: the allocation is gone);
		// recNS the namespace the violation names.
		allocNS, recNS string
		rules          []varserver.Rule // nil: a management token
		// handled is the start of the violation's outcome; "" for one left unhandled, with an
		// error that says wantErr.
		handled, wantErr string
	}{
		{name: "named, in another namespace", allocNS: "ml", recNS: "ml", handled: "reregistered"},
		{name: "not named (an older plugin's record), in another namespace", allocNS: "ml", handled: "reregistered"},
		{name: "named, gone", recNS: "ml", handled: "skipped: allocation " + alloc1 + " no longer exists in namespace ml"},
		{name: "not named, gone", handled: "skipped: allocation " + alloc1 + " no longer exists in any namespace"},
		{name: "named, in a namespace the token cannot read", allocNS: "ml", recNS: "ml",
			rules:   []varserver.Rule{vars, submitIn("default")},
			wantErr: "allocation " + alloc1 + " in namespace ml: permission denied"},
		{name: "not named, in a namespace the token cannot read", allocNS: "ml",
			rules:   []varserver.Rule{vars, submitIn("default")},
			wantErr: "allocation " + alloc1 + " in any namespace (the violation names none): permission denied"},
		{name: "named, the token may read only its namespace", allocNS: "ml", recNS: "ml",
			rules: []varserver.Rule{vars, submitIn("ml")}, handled: "reregistered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			if tt.allocNS != "" {
				r.putJobIn(tt.allocNS, alloc1, device{"nvidia/gpumem", 3, gpuA})
			}
			path := r.violateIn(tt.recNS, alloc1, gpuA, t0)
			if tt.rules != nil {
				r.vs.SetToken("ctl", tt.rules...)
				r.api = r.vs.Client(t, "ctl")
			}
			err := r.pass(r.controller(nil))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "403") {
					t.Fatalf("pass: %v, want an error saying %q (a 403)", err, tt.wantErr)
				}
				if h := r.handled(path); h != "" {
					t.Fatalf("violation marked %q: a denied read is retried, not taken for a deletion", h)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h := r.handled(path); !strings.HasPrefix(h, tt.handled) {
				t.Fatalf("violation marked %q, want %s...", h, tt.handled)
			}
			if tt.handled == "reregistered" && r.countIn(tt.allocNS, 0) != firstStep {
				t.Errorf("count %d in namespace %s, want %d", r.countIn(tt.allocNS, 0), tt.allocNS, firstStep)
			}
		})
	}
}

// Once the token may read the namespace, the violation that waited on a 403 is acted on.
func TestDeniedNamespaceIsActedOnOnceReadable(t *testing.T) {
	r := newRig(t)
	r.putJobIn("ml", alloc1, device{"nvidia/gpumem", 3, gpuA})
	path := r.violateIn("ml", alloc1, gpuA, t0)
	vars := varserver.Rule{Path: violations.PathPrefix + "*", Capabilities: []string{varserver.CapRead, varserver.CapWrite}}
	r.vs.SetToken("ctl", vars)
	r.api = r.vs.Client(t, "ctl")
	c := r.controller(nil)
	if err := r.pass(c); err == nil || !strings.Contains(err.Error(), "namespace ml") {
		t.Fatalf("pass with a token that cannot read namespace ml: %v", err)
	}
	r.vs.SetToken("ctl", vars, varserver.Rule{Namespace: "ml", Jobs: []string{varserver.CapSubmitJob, varserver.CapAllocLifecycle}})
	if err := r.pass(c); err != nil {
		t.Fatalf("pass once the token may read and submit in ml: %v", err)
	}
	if h := r.handled(path); !strings.HasPrefix(h, "reregistered") || r.countIn("ml", 0) != firstStep {
		t.Fatalf("violation %q, count %d: want it re-registered to %d", h, r.countIn("ml", 0), firstStep)
	}
}
