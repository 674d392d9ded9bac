package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// TestConcurrentAdmission hammers one ledger from many goroutines (run it with -race) and checks
// after every read that no GPU is over-committed in bytes or tasks.
func TestConcurrentAdmission(t *testing.T) {
	for _, tc := range []struct {
		name    string
		persist bool
		workers int
		ops     int
	}{
		{"memory", false, 16, 400},
		{"disk", true, 8, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l *Ledger
			var dir string
			if tc.persist {
				l, dir = newTest(t, Options{})
			} else {
				var err error
				if l, err = Open("", Options{NoPersist: true}); err != nil {
					t.Fatal(err)
				}
				if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB), info(gpuB, 1, 8*size.GiB)}); err != nil {
					t.Fatal(err)
				}
			}
			var admitted, deniedN sync.Map
			var wg sync.WaitGroup
			for w := range tc.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 99))
					var mine []string
					for i := range tc.ops {
						gpu := []string{gpuA, gpuB}[rng.IntN(2)]
						var err error
						var r Reservation
						switch op := rng.IntN(6); op {
						case 0, 1:
							n := 1 + rng.IntN(3)
							ks := rng.Perm(10)[:n]
							r, err = l.ReserveIDs(ids(gpu, ks...), Task{JobName: fmt.Sprintf("w%d-%d", w, i)})
						case 2:
							r, err = l.ReserveBytes(gpu, size.Bytes(1+rng.IntN(3))*size.GiB, Task{JobName: fmt.Sprintf("w%d-%d", w, i)})
						case 3:
							if len(mine) > 0 {
								tok := mine[0]
								mine = mine[1:]
								// Another worker may have ended it by reusing an ID.
								if err := l.Release(tok, "done"); err != nil && !errors.Is(err, ErrNoReservation) {
									t.Errorf("Release: %v", err)
								}
							}
							continue
						case 4:
							for _, tok := range mine {
								if err := l.Seen(tok, Task{TaskName: "t"}); err != nil && !errors.Is(err, ErrNoReservation) {
									t.Errorf("Seen: %v", err)
								}
							}
							continue
						case 5:
							for _, s := range l.States() {
								checkInvariants(t, s, false)
							}
							continue
						}
						switch {
						case err == nil:
							mine = append(mine, r.Token)
							admitted.Store(r.Token, true)
						case errors.Is(err, ErrDenied):
							deniedN.Store(fmt.Sprint(w, i), true)
						default:
							t.Errorf("reserve: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			count := func(m *sync.Map) (n int) {
				m.Range(func(any, any) bool { n++; return true })
				return n
			}
			if count(&admitted) == 0 || count(&deniedN) == 0 {
				t.Errorf("admitted %d, denied %d: the test did not exercise both outcomes", count(&admitted), count(&deniedN))
			}
			states := l.States()
			for _, s := range states {
				checkInvariants(t, s, false)
			}
			if tc.persist {
				snap, err := ReadSnapshot(dir)
				if err != nil {
					t.Fatal(err)
				}
				// SeenAt is committed lazily (see Seen), so it is the one field allowed to lag.
				if !reflect.DeepEqual(withoutSeenAt(snap.GPUs), withoutSeenAt(states)) {
					t.Errorf("the file disagrees with memory after concurrent use")
				}
			}
		})
	}
}

func withoutSeenAt(states []GPUState) []GPUState {
	out := make([]GPUState, len(states))
	for i, s := range states {
		s.Reservations = append([]Reservation(nil), s.Reservations...)
		for j := range s.Reservations {
			s.Reservations[j].SeenAt = time.Time{}
		}
		out[i] = s
	}
	return out
}
