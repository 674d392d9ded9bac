// Package logcheck is the vet check behind `make lint` that keeps hclog calls searchable: the
// message of every Trace, Debug, Info, Warn, Error and Log call is a constant string, and what
// varies goes into key/value pairs, so one message means one kind of event in every log. It also
// catches a key without a value, which hclog would print as an EXTRA_VALUE_AT_END pair instead of
// failing.
package logcheck
