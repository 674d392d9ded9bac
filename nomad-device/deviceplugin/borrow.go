package deviceplugin

import (
	"fmt"
	"maps"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

// borrowUse is what borrowing takes of one GPU, as its fence table says: memory tasks hold past
// their guarantees, and whether an allocation waits for memory to come free.
type borrowUse struct {
	bytes   size.Bytes
	waiting bool
}

// borrowCheck is how often the plugin reads what borrowers hold, to keep the fingerprint from
// promising units the fence would refuse: borrowing changes with allocations, not with the ledger.
const borrowCheck = 500 * time.Millisecond

// borrowedNow reads each GPU's borrowing off the enforcer's fence tables.
func borrowedNow(enf taskEnforcer, states []ledger.GPUState) map[string]borrowUse {
	if enf == nil || !enf.Fenced() {
		return nil
	}
	out := map[string]borrowUse{}
	for _, st := range states {
		if b, waiting := enf.FenceUse(st.UUID); b > 0 || waiting {
			out[st.UUID] = borrowUse{bytes: b, waiting: waiting}
		}
	}
	return out
}

// withhold marks the free units that borrowing takes unhealthy, from the highest ID down: as
// many units as borrowers hold memory past their guarantees, or every free unit while an
// allocation waits for memory (no new guarantee is placed then). Nomad places nothing on them,
// and they come back when the borrowers give the memory back.
func withhold(devs []*devicepb.DetectedDevice, instances []ledger.Instance, unit size.Bytes, b borrowUse) {
	n := len(devs)
	why := "a task's allocation waits for memory to come free on this GPU: no new task is placed until it is served"
	if !b.waiting {
		if unit <= 0 {
			return
		}
		n = int((b.bytes + unit - 1) / unit)
		why = fmt.Sprintf("held by tasks borrowing past their guarantees (%s on this GPU): free again when they give it back", b.bytes)
	}
	for j := len(devs) - 1; j >= 0 && n > 0; j-- {
		if instances[j].Token != "" || !devs[j].Healthy {
			continue
		}
		devs[j].Healthy, devs[j].HealthDescription = false, why
		n--
	}
}

// borrowSig is what a fingerprint shows of borrowing: per GPU, the units withheld and whether
// an allocation waits.
func borrowSig(b map[string]borrowUse, states []ledger.GPUState) map[string]string {
	out := map[string]string{}
	for _, st := range states {
		if u, ok := b[st.UUID]; ok && st.UnitBytes > 0 {
			out[st.UUID] = fmt.Sprintf("%d/%v", (u.bytes+st.UnitBytes-1)/st.UnitBytes, u.waiting)
		}
	}
	return out
}

// watchBorrowing re-fingerprints while what borrowers hold differs, by a unit or more, from
// what the last fingerprint showed, or an allocation started or stopped waiting since.
// Comparing with the fingerprint, not with its own last look, catches a loan that came and
// went between two looks while a fingerprint was built.
func (rt *runtime) watchBorrowing(enf taskEnforcer, l *ledger.Ledger) {
	defer rt.wg.Done()
	t := time.NewTicker(borrowCheck)
	defer t.Stop()
	for {
		select {
		case <-rt.ctx.Done():
			return
		case <-t.C:
		}
		states := l.States()
		now := borrowSig(borrowedNow(enf, states), states)
		rt.mu.Lock()
		shown := rt.fpBorrow
		rt.mu.Unlock()
		if !maps.Equal(shown, now) {
			rt.notify()
		}
	}
}
