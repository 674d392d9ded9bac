// Package hclog is a stand-in for github.com/hashicorp/go-hclog with the methods logcheck looks
// at, so the analyzer's tests need no module download.
package hclog

type Level int

const Warn Level = 4

type Logger interface {
	Log(level Level, msg string, args ...interface{})
	Trace(msg string, args ...interface{})
	Debug(msg string, args ...interface{})
	Info(msg string, args ...interface{})
	Warn(msg string, args ...interface{})
	Error(msg string, args ...interface{})
	Named(name string) Logger
	With(args ...interface{}) Logger
}

func Default() Logger { return nil }
