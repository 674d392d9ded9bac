package node

import (
	"os"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
)

// SelfHolder is this process as the holder of the reservations it makes; nil where the process
// table cannot say (they then end by the ledger's grace alone).
func SelfHolder() *ledger.Holder {
	st, err := procfs.Linux("").Stat(os.Getpid())
	if err != nil {
		return nil
	}
	return &ledger.Holder{PID: os.Getpid(), StartTicks: st.StartTicks}
}

// HolderAlive says whether h still runs: the same PID started at the same tick, not a zombie.
func HolderAlive(h ledger.Holder) bool { return procfs.Same(procfs.Linux(""), h.PID, h.StartTicks) }
