package taskenv

import (
	"bytes"
	"fmt"
)

//go:generate go test -run ^TestCHeaderIsGenerated$ . -args -update

// HeaderPath is where the C header lives, from this package's directory.
const HeaderPath = "../enforcer/fence/lib/taskenv.h"

// cNames are the names the preload library reads, by the macro that spells each in C.
var cNames = []struct{ macro, value string }{
	{"GF_ENV_RESERVATION", Reservation},
	{"GF_ENV_RESERVATION_PREFIX", ReservationPrefix},
	{"GF_ENV_GPU_UUID", GPUUUID},
	{"GF_ENV_FENCE_DIR", FenceDir},
	{"GF_ENV_FENCE_DEBUG", FenceDebug},
}

// CHeader is taskenv.h: the names the preload library reads, as this package spells them.
func CHeader() []byte {
	var b bytes.Buffer
	b.WriteString("/* Generated from taskenv/taskenv.go by go generate ./taskenv: do not edit. The names a task's\n")
	b.WriteString(" * environment carries that the preload library reads. */\n")
	b.WriteString("#ifndef GPUFRAC_TASKENV_H\n#define GPUFRAC_TASKENV_H\n\n")
	for _, n := range cNames {
		fmt.Fprintf(&b, "#define %s %q\n", n.macro, n.value)
	}
	b.WriteString("\n#endif\n")
	return b.Bytes()
}
