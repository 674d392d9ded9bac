package policy

import (
	"context"
	"errors"
	"fmt"
)

// editAttempts bounds how often EditTemplate reads a template again after another writer
// changed it between its read and its write. Writers of one template are few (a person's
// terraform apply, a probe, the controller), so losing this many races in a row means something
// rewrites it without pause, and a caller is better told than kept waiting.
const editAttempts = 5

// EditTemplate changes the template name in st by edit, without losing a change another writer
// (terraform apply, gpufrac probe, the controller) makes meanwhile: it reads the template, lets
// edit change it, and writes it with a check-and-set on the version read. On a conflict it reads
// again and edits what is there now, up to editAttempts times in all: an edit decides from what
// it reads (a footprint is raised only if it grew), and the other writer's version may already
// say enough.
//
// edit is told whether the template exists; an absent one comes named and otherwise empty. It
// reports whether it changed anything: nothing is written when it did not, since every write
// wakes the store's watchers. An absent template is made only by an edit that changes it; one
// that leaves it alone gets the read's error (wrapping ErrNotFound), as GetTemplate would, so
// that a caller that only edits what exists learns the template is gone. An edit must not rename
// the template: the version checked is the one read under name.
//
// Errors name the template and wrap the cause: the read's, the edit's, or the store's (a
// *ConflictError when every attempt lost to another writer).
func EditTemplate(ctx context.Context, st Store, name string, edit func(t *Template, exists bool) (changed bool, err error)) error {
	var err error
	for range editAttempts {
		t, m, rerr := st.GetTemplate(ctx, name)
		exists := rerr == nil
		switch {
		case errors.Is(rerr, ErrNotFound):
			// m.ModifyIndex is 0, so the write below creates it only if it is still absent.
			t = Template{Name: name}
		case rerr != nil:
			return fmt.Errorf("reading template %q: %w", name, rerr)
		}
		changed, eerr := edit(&t, exists)
		switch {
		case eerr != nil:
			return fmt.Errorf("editing template %q: %w", name, eerr)
		case !changed && !exists:
			return fmt.Errorf("reading template %q: %w", name, rerr)
		case !changed:
			return nil
		case t.Name != name:
			return fmt.Errorf("editing template %q: the edit renamed it to %q", name, t.Name)
		}
		_, err = st.PutTemplate(ctx, t, m.ModifyIndex)
		if !errors.Is(err, ErrConflict) {
			break
		}
	}
	switch {
	case errors.Is(err, ErrConflict):
		return fmt.Errorf("storing template %q: changed by another writer at each of %d attempts: %w", name, editAttempts, err)
	case err != nil:
		return fmt.Errorf("storing template %q: %w", name, err)
	}
	return nil
}
