package hub

import (
	"sync"
	"testing"
	"time"
)

func TestPublishReachesEverySubscriber(t *testing.T) {
	h := New[int](4)
	a, stopA := h.Subscribe()
	b, stopB := h.Subscribe()
	defer stopB()
	if d := h.Publish(7); d != 0 {
		t.Fatalf("dropped %d with room in every buffer", d)
	}
	for name, ch := range map[string]<-chan int{"a": a, "b": b} {
		if v := <-ch; v != 7 {
			t.Fatalf("subscriber %s got %d, want 7", name, v)
		}
	}
	stopA()
	stopA() // a second end is harmless
	if _, open := <-a; open {
		t.Fatal("an ended subscription's channel is still open")
	}
	if d := h.Publish(8); d != 0 {
		t.Fatalf("dropped %d after a subscription ended", d)
	}
	if v := <-b; v != 8 {
		t.Fatalf("got %d, want 8", v)
	}
}

func TestFullSubscriberMissesValuesAndNeverBlocks(t *testing.T) {
	for _, tc := range []struct {
		buffer, sent, dropped int
	}{
		{buffer: 1, sent: 3, dropped: 2}, // a wake-up channel: three changes, one wake-up
		{buffer: 0, sent: 2, dropped: 1}, // below 1 is 1: an unbuffered channel would always drop
		{buffer: 4, sent: 4, dropped: 0},
	} {
		h := New[struct{}](tc.buffer)
		ch, stop := h.Subscribe()
		dropped := 0
		for range tc.sent {
			dropped += h.Publish(struct{}{})
		}
		if dropped != tc.dropped || len(ch) != tc.sent-tc.dropped {
			t.Errorf("buffer %d, %d sent: %d dropped and %d queued, want %d dropped", tc.buffer, tc.sent, dropped, len(ch), tc.dropped)
		}
		stop()
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	h := New[string](1)
	ch, stop := h.Subscribe()
	h.Close()
	if _, open := <-ch; open {
		t.Fatal("Close left a subscription open")
	}
	stop() // ending a subscription Close ended does not close its channel twice
	late, _ := h.Subscribe()
	if _, open := <-late; open {
		t.Fatal("a subscription to a closed hub is open")
	}
	if d := h.Publish("x"); d != 0 {
		t.Fatalf("a closed hub dropped %d", d)
	}
}

// Publishers, subscribers that come and go, and Close all at once: under -race nothing races
// and no send lands on a closed channel (which would panic).
func TestConcurrentUse(t *testing.T) {
	h := New[int](8)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				h.Publish(i*1000 + j)
			}
		})
		wg.Go(func() {
			for range 50 {
				ch, stop := h.Subscribe()
				select {
				case <-ch:
				case <-time.After(time.Millisecond):
				}
				stop()
			}
		})
	}
	wg.Wait()
	ch, _ := h.Subscribe()
	h.Close()
	if _, open := <-ch; open {
		t.Fatal("a value arrived after every publisher was done, or Close left the channel open")
	}
}
