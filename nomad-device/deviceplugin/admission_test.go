package deviceplugin

import (
	"context"
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node/nodetest"
)

// The plugin admits through the node exactly as gpufrac run does: the same table of cases
// (runner's TestAdmissionTable runs it too) brings the same decisions, with Nomad's instance
// IDs for the units it would place.
func TestAdmissionTable(t *testing.T) {
	nodetest.Run(t, func(t *testing.T, c nodetest.Case, s nodetest.Setup) (ledger.Reservation, bool, error) {
		ids := nodetest.FreeIDs(s.Ledger, int(c.Cap/nodetest.Unit))
		out, a, err := admit(context.Background(), s.Node, ids)
		if got := out.GetEnvs()["GPUFRAC_RESERVATION"]; err == nil && got != a.Reservation.Token {
			t.Fatalf("the task's environment names reservation %q, want the admitted one", got)
		}
		return a.Reservation, err == nil, err
	})
}
