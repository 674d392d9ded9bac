// Package controller is `gpufrac controller`: the fleet side of "a job that breaks its cap runs
// again on a whole GPU". It follows the violations the device plugins publish under
// gpufrac/violations/, and for each one re-registers the job with the violating task's gpufrac
// device count raised to the whole GPU's units, so Nomad replaces the allocation instead of
// restarting it under the same cap; it raises the template's stored footprint too. It follows
// Nomad's event stream to report when the replacement runs. See docs/plugin.md.
package controller
