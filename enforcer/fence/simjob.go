package fence

import (
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/size"
)

// Simulated jobs are fenced by this package's tables, as CUDA jobs are by the preload library.
// gpu/simjob declares what it needs and this package hands it over, so the arrow goes from
// enforcer/ down to gpu/: any program that links the fence (gpufrac, the tests that run
// simulated jobs) fences its simulated jobs.
func init() {
	simjob.UseFence(func(dir, uuid, token string) (simjob.Fence, error) {
		c, err := Attach(dir, uuid, token)
		if err != nil {
			return nil, err
		}
		return simClient{c}, nil
	})
}

// simClient is a Client as gpu/simjob's Fence.
type simClient struct{ *Client }

// Charge is false only for a refusal: NoTask (the reservation ended, the lock was kept) passes
// unfenced, as it does in the preload library.
func (c simClient) Charge(n size.Bytes) bool { return c.Client.Charge(n) != Refused }
