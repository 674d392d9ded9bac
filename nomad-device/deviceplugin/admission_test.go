package deviceplugin

import (
	"context"
	"testing"

	"github.com/gpufrac/gpufrac/node/nodetest"
)

// The plugin admits through the node exactly as gpufrac run does: the same table of cases
// (runner's TestAdmissionTable runs it too) brings the same decisions, with Nomad's instance
// IDs for the units it would place.
func TestAdmissionTable(t *testing.T) {
	for _, c := range nodetest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			s := c.Setup(t)
			ids := nodetest.FreeIDs(s.Ledger, int(c.Cap/nodetest.Unit))
			out, a, err := admit(context.Background(), s.Node, ids)
			c.Check(t, s, err == nil, a.Reservation)
			if err != nil {
				c.CheckErr(t, err)
				return
			}
			if got := out.GetEnvs()["GPUFRAC_RESERVATION"]; got != a.Reservation.Token {
				t.Fatalf("the task's environment names reservation %q, want the admitted one", got)
			}
		})
	}
}
