"""Samples every compute process on GPU 0 through NVML every --period s and writes
"unix_time pid used_bytes" lines until it receives SIGTERM."""
import signal, sys, time
import pynvml

stop = False
def onterm(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, onterm)
out = open(sys.argv[1], "w")
period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
while not stop:
    t = time.time()
    try:
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            out.write("%.3f %d %d\n" % (t, p.pid, p.usedGpuMemory or 0))
    except pynvml.NVMLError as e:
        out.write("%.3f error %s\n" % (t, e))
    time.sleep(period)
out.close()
