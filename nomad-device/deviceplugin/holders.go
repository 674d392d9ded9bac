package deviceplugin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/ledger"
)

// checkHolders refuses a Reserve that names instance IDs held by a reservation whose task still
// runs. The ledger ends the reservation holding a reused ID, on the rule that Nomad gives an ID
// to a new task only once the task holding it is gone; that is true of the scheduler, but a
// restarted agent or a hand-made call could name IDs of a running task, and ending its
// reservation would leave it uncapped and its memory counted twice. So the rule is: a holder
// with no live process carrying its token (read from the process table now) ends as before; a
// holder with one refuses the new Reserve.
func (rt *runtime) checkHolders(l *ledger.Ledger, enf taskEnforcer, ids []string) error {
	tokenOf := map[string]string{}
	for _, st := range l.States() {
		for _, in := range st.Instances {
			if in.Token != "" {
				tokenOf[in.ID] = in.Token
			}
		}
	}
	held := map[string][]string{}
	var order []string
	for _, id := range ids {
		tok := tokenOf[id]
		if tok == "" {
			continue
		}
		if _, seen := held[tok]; !seen {
			order = append(order, tok)
		}
		held[tok] = append(held[tok], id)
	}
	for _, tok := range order {
		what := strings.Join(held[tok], ",")
		pids, err := enf.Holders(tok)
		if err != nil {
			return fmt.Errorf("%w: cannot tell whether the task holding %s still runs: %w", ErrUnavailable, what, err)
		}
		if len(pids) == 0 {
			continue
		}
		slices.Sort(pids)
		task := "an unknown task"
		if r, ok := l.Reservation(tok); ok {
			task = r.Task.String()
		}
		return fmt.Errorf("%w: %s held by %s, which still runs (PIDs %v); an instance goes to a new task only after the task holding it has stopped",
			ErrInUse, what, task, pids)
	}
	return nil
}
