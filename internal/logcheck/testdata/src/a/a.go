package a

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
)

const started = "started"

// wrapped embeds a Logger: its methods are still hclog's.
type wrapped struct{ hclog.Logger }

// notHclog has the same method names and is no concern of the check.
type notHclog struct{}

func (notHclog) Info(msg string, args ...interface{}) {}

func calls(log hclog.Logger, name string, err error) {
	log.Info("job started", "job", name)
	log.Info(started)
	log.Info("job " + "started")
	log.Warn("cannot read the policy", "error", err)
	log.Log(hclog.Warn, "retrying", "in", 3)
	log.Named("gpu").Debug("probed")
	hclog.Default().Error("boom", "error", errors.New("x"))
	args := []interface{}{"a", 1}
	log.Info("spread arguments are not counted", args...)

	log.Info(fmt.Sprintf("job %s started", name)) // want `hclog message is not a constant string`
	log.Error("job " + name + " failed")          // want `hclog message is not a constant string`
	log.Log(hclog.Warn, name)                     // want `hclog message is not a constant string`
	log.Named("gpu").Trace(err.Error())           // want `hclog message is not a constant string`
	wrapped{log}.Warn(name)                       // want `hclog message is not a constant string`
	log.Info("job started", "job")                // want `odd number of key/value arguments`
	log.With("k", "v").Debug("done", "a", 1, "b") // want `odd number of key/value arguments`

	notHclog{}.Info(name)
}
