package enforcer

import "github.com/gpufrac/gpufrac/enforcer/fence"

// FenceTask is one task of a GPU as its fence table shows it now (what it holds, past its
// guarantee or not, and whether an allocation of it waits for memory to borrow); false without a
// fence or when the table does not hold the token.
func (e *Enforcer) FenceTask(uuid, token string) (fence.TaskUse, bool) {
	if e.fence == nil {
		return fence.TaskUse{}, false
	}
	s, ok := e.fence.view(uuid)
	if !ok {
		return fence.TaskUse{}, false
	}
	return s.Task(token)
}
