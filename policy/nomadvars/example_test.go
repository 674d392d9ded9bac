package nomadvars_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/size"
)

// The Terraform provider's life cycle: create with cas 0, update with the modify index from
// state, and notice drift when someone else changed the variable in between.
func ExampleStore() {
	srv := varserver.New(varserver.Options{})
	defer srv.Close()
	store, err := nomadvars.New(nomadvars.Config{Address: srv.URL()})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	p := policy.Default()
	created, err := store.PutPolicy(ctx, p, 0) // create
	if err != nil {
		panic(err)
	}

	// Someone edits the variable out of band.
	edited := p
	edited.MaxTasksPerGPU = 2
	if _, err := store.PutPolicyUnchecked(ctx, edited); err != nil {
		panic(err)
	}

	p.HeadroomBytes = 4 * size.GiB
	_, err = store.PutPolicy(ctx, p, created.ModifyIndex) // update with the index from state
	var conflict *policy.ConflictError
	if errors.As(err, &conflict) {
		fmt.Println("drift: modify index", conflict.CAS, "is now", conflict.Current.ModifyIndex)
	}

	cur, meta, err := store.GetPolicy(ctx, "default")
	if err != nil {
		panic(err)
	}
	fmt.Println("stored max_tasks_per_gpu:", cur.MaxTasksPerGPU, "at index", meta.ModifyIndex)
	// Output:
	// drift: modify index 2 is now 3
	// stored max_tasks_per_gpu: 2 at index 3
}
