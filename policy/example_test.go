package policy_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// The Terraform provider's life cycle: create with cas 0, update with the modify index from
// state, and notice drift when someone else changed the variable in between.
func ExampleNomadStore() {
	srv := varserver.New(varserver.Options{})
	defer srv.Close()
	store, err := policy.NewNomadStore(policy.Config{Address: srv.URL()})
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

func ExampleTemplate_Units() {
	p := policy.Default()
	t := policy.Template{Name: "llama-7b", PeakBytes: size.MustParse("14.5GiB")}
	fmt.Println(t.Cap(p), uint64(t.Cap(p)), t.Units(p))
	items, _ := policy.EncodeTemplate(t)
	fmt.Println(items["peak_bytes"])
	// Output:
	// 18.07GiB 19404644916 19
	// 15569256448
}
