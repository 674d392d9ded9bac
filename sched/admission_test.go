package sched

import (
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node/nodetest"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/hashicorp/go-hclog"
)

// The scheduler admits through the node exactly as the plugin does: the same table of cases
// (deviceplugin's TestAdmissionTable runs it too) brings the same decisions, for one packed job
// whose template's cap is the case's.
func TestAdmissionTable(t *testing.T) {
	for _, c := range nodetest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			s := c.Setup(t)
			j := &Job{Job: queue.Job{Name: "j", Template: "t"}}
			sc := New(Config{Policy: policy.Default(), Ledger: s.Ledger, Node: s.Node,
				Borrows: s.Node.Borrows(), GPUs: []string{nodetest.GPU}, Logger: hclog.NewNullLogger(),
				Templates: map[string]queue.TemplateSpec{"t": {Name: "t", CapBytes: c.Cap}}}, []*Job{j})
			got := sc.Next()
			var res ledger.Reservation
			if len(got) == 1 {
				res = got[0].Res
			}
			c.Check(t, s, len(got) == 1, res)
		})
	}
}
