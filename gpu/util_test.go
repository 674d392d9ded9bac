package gpu

import "time"

func sleepTick() { time.Sleep(10 * time.Millisecond) }
