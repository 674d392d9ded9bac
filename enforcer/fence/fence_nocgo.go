//go:build !cgo

package fence

import (
	"errors"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// Available says whether this build can manage fence tables (it needs cgo).
const Available = false

var errNoCgo = errors.New("fence: this gpufrac was built without cgo; the allocation fence needs it")

// Table is unavailable without cgo.
type Table struct{}

// Create fails without cgo.
func Create(dir, uuid string, total, budget size.Bytes) (*Table, error) { return nil, errNoCgo }

// Path is the table's file.
func (t *Table) Path() string { return "" }

// Close does nothing.
func (t *Table) Close() error { return nil }

// SetWait does nothing.
func (t *Table) SetWait(time.Duration) {}

// SetContext does nothing.
func (t *Table) SetContext(ctx, spare size.Bytes) {}

// SetTasks fails without cgo.
func (t *Table) SetTasks([]Task, size.Bytes) error { return errNoCgo }

// Verify fails without cgo.
func (t *Table) Verify() ([]string, error) { return nil, errNoCgo }

// Reap does nothing.
func (t *Table) Reap() int { return 0 }

// Snapshot fails without cgo.
func (t *Table) Snapshot() (Snapshot, error) { return Snapshot{}, errNoCgo }

// Result is what the fence said to one charge.
type Result int

// Results of Client.Charge.
const (
	Charged Result = iota
	Refused
	NoTask
)

// Client is unavailable without cgo.
type Client struct{}

// Attach fails without cgo.
func Attach(dir, uuid, token string) (*Client, error) { return nil, errNoCgo }

// Charge passes everything through unfenced.
func (c *Client) Charge(size.Bytes) Result { return NoTask }

// Uncharge does nothing.
func (c *Client) Uncharge(size.Bytes) {}

// View has nothing to show.
func (c *Client) View() (size.Bytes, size.Bytes, bool) { return 0, 0, false }

// Detach does nothing.
func (c *Client) Detach() {}

// Refusal has nothing to say: nothing is refused.
func (c *Client) Refusal() (string, time.Duration) { return "", 0 }
