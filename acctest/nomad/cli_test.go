package nomad_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

// rows reads a rendered list or block: the value of each row by its first column.
func rows(text, sep string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, sep); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestWhatTheCLIShowsFromTheStats launches the plugin, reserves two tasks on a T4, lets one of
// them compute with 3 GiB, and reads the stats Nomad's agent collects as `nomad alloc status`
// and `nomad node status -verbose` would print them: one figure per task (its use against its
// cap, on its first unit only), free units that say so, and on every unit the GPU's line with
// utilisation, memory, temperature and power. docs/plugin.md quotes this output; the quotes
// are checked against it.
func TestWhatTheCLIShowsFromTheStats(t *testing.T) {
	dir := t.TempDir()
	c := start(t, agentConfig(dir, `"T4=16GiB"`, ""))
	g := c.Latest().GetDeviceGroup()[0]
	uuid := g.GetAttributes()["uuid"].GetStringVal()
	qid := func(id string) string { return emulator.QualifiedID("nvidia", "gpumem", g.GetDeviceName(), id) }

	train, res := place(t, c, 4)
	eval, _ := place(t, c, 2)
	task := testutil.StartTask(t, res.GetEnvs())
	sim := simAt(t, dir)
	const used = 3 * size.GiB
	if err := sim.SetProcess(uuid, task.PID(), used, true); err != nil {
		t.Fatal(err)
	}

	total := int64(g.GetAttributes()["memory"].GetIntVal())
	limitW := gpu.SimPowerLimit("T4") / 1000
	busyW := (gpu.SimPowerLimit("T4")/100*78 + 500) / 1000
	gpuLine := map[string]string{
		"GPU memory state": fmt.Sprintf("%d / %d MiB", (used+gpu.SimDriverReserve)/size.MiB, total),
		"GPU utilization":  "100 %",
		"Temperature":      fmt.Sprintf("%d C", gpu.SimBusyTemperature),
		"Power usage":      fmt.Sprintf("%d / %d W", busyW, limitW),
	}
	trainLine := fmt.Sprintf("%d / %d MiB", used/size.MiB, 4*1024)
	evalLine := fmt.Sprintf("0 / %d MiB", 2*1024)
	st, err := c.WaitStats(20*time.Second, func(s *devicepb.StatsResponse) bool {
		out := rows(emulator.AllocStatus(s, train, true), " = ")
		return rows(emulator.AllocStatus(s, train, false), "  ")[qid(train[0])] == trainLine &&
			out["GPU utilization"] == gpuLine["GPU utilization"] && out["Temperature"] == gpuLine["Temperature"]
	})
	if err != nil {
		t.Fatalf("the busy task's stats: %v\n%s", err, emulator.AllocStatus(st, train, true))
	}

	// nomad alloc status: one line per unit of the task, the figure on the first only.
	for _, tc := range []struct {
		name string
		ids  []string
		line string
	}{{"train", train, trainLine}, {"eval", eval, evalLine}} {
		out := emulator.AllocStatus(st, tc.ids, false)
		got := rows(out, "  ")
		if len(got) != len(tc.ids) || !strings.HasPrefix(out, "Device Stats\n") {
			t.Errorf("%s: alloc status lists %d units, want its %d:\n%s", tc.name, len(got), len(tc.ids), out)
		}
		if got[qid(tc.ids[0])] != tc.line {
			t.Errorf("%s: first unit reads %q, want %q", tc.name, got[qid(tc.ids[0])], tc.line)
		}
		for _, id := range tc.ids[1:] {
			if want := "held, see " + tc.ids[0]; got[qid(id)] != want {
				t.Errorf("%s: unit %s reads %q, want %q", tc.name, id, got[qid(id)], want)
			}
		}
		if n := strings.Count(out, " MiB"); n != 1 {
			t.Errorf("%s: %d memory figures, want the task's one:\n%s", tc.name, n, out)
		}
	}

	// nomad alloc status -stats: every unit's block carries the GPU's line; the task's memory
	// and cap only its first.
	stats := emulator.AllocStatus(st, train, true)
	blocks := strings.Split(stats[strings.Index(stats, "\n\nDevice Stats\n")+len("\n\nDevice Stats\n"):], "\n\n")
	if len(blocks) != len(train) {
		t.Fatalf("alloc status -stats: %d blocks, want %d:\n%s", len(blocks), len(train), stats)
	}
	for _, b := range blocks {
		kv := rows(b, " = ")
		for k, v := range gpuLine {
			if kv[k] != v {
				t.Errorf("unit %s: %s = %q, want %q", kv["Device"], k, kv[k], v)
			}
		}
		first := kv["Device"] == qid(train[0])
		if mem, ok := kv["Memory state"]; ok != first || (first && (mem != trainLine || kv["Reservation cap"] != "4096 MiB")) {
			t.Errorf("unit %s: Memory state %q, Reservation cap %q (first unit %v)", kv["Device"], mem, kv["Reservation cap"], first)
		}
	}

	// nomad node status -verbose: every unit once; the two tasks' figures, their other units
	// pointing at them, and the rest free.
	fp := c.Latest()
	node := emulator.NodeStatus(fp, st, false)
	split := strings.Index(node, "\n\nDevice Group Attributes")
	if split < 0 {
		t.Fatalf("node status -verbose without device group attributes:\n%s", node)
	}
	util := rows(node[:split], "  ")
	if len(util) != len(g.GetDevices()) {
		t.Errorf("node status lists %d units, want %d:\n%s", len(util), len(g.GetDevices()), node)
	}
	counts := map[string]int{}
	for id, v := range util {
		switch {
		case v == "free":
			counts["free"]++
		case strings.HasPrefix(v, "held, see "):
			counts["held"]++
		case id == qid(train[0]) && v == trainLine, id == qid(eval[0]) && v == evalLine:
			counts["task"]++
		default:
			t.Errorf("node status: %s reads %q", id, v)
		}
	}
	if want := map[string]int{"free": len(g.GetDevices()) - 6, "held": 4, "task": 2}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("node status rows %v, want %v:\n%s", counts, want, node)
	}
	attrs := rows(node[split:], " = ")
	if attrs["Device Group"] != "nvidia/gpumem/"+g.GetDeviceName() || attrs["memory"] != fmt.Sprintf("%d MiB", total) || attrs["backend"] != "simulated" {
		t.Errorf("device group attributes %v", attrs)
	}
	// -stats: a free unit's block is the GPU's line alone.
	for _, b := range strings.Split(emulator.NodeStatus(fp, st, true), "\n\n") {
		kv := rows(b, " = ")
		if util[kv["Device"]] != "free" {
			continue
		}
		if _, ok := kv["Memory state"]; ok || kv["Temperature"] != gpuLine["Temperature"] || kv["Power usage"] != gpuLine["Power usage"] {
			t.Errorf("free unit block:\n%s", b)
		}
	}
	if t.Failed() {
		t.Logf("rendered:\n%s\n%s\n%s", emulator.AllocStatus(st, train, false), emulator.AllocStatus(st, train, true), node)
	}
	checkCLIQuotes(t, "docs/plugin.md", map[string]string{
		"nomad alloc status <alloc>":        emulator.AllocStatus(st, train, false),
		"nomad alloc status -stats <alloc>": emulator.AllocStatus(st, train, true),
		"nomad node status -verbose <node>": node,
	})

	// A reading the backend loses says so on that stat alone.
	if err := sim.SetSensorFault(uuid, gpu.SensorPower, "Not Supported"); err != nil {
		t.Fatal(err)
	}
	want := "N/A: simulated NVML error on GPU " + uuid + ": power: Not Supported"
	st, err = c.WaitStats(20*time.Second, func(s *devicepb.StatsResponse) bool {
		return rows(emulator.AllocStatus(s, train[:1], true), " = ")["Power usage"] == want
	})
	if err != nil {
		t.Fatalf("power usage after the fault: %v\n%s", err, emulator.AllocStatus(st, train[:1], true))
	}
	kv := rows(emulator.AllocStatus(st, train[:1], true), " = ")
	for _, k := range []string{"Temperature", "GPU utilization", "GPU memory state"} {
		if kv[k] != gpuLine[k] {
			t.Errorf("after the power fault %s = %q, want %q", k, kv[k], gpuLine[k])
		}
	}
}

// checkCLIQuotes checks every fenced block of doc that starts with "$ <command>" for a command
// of rendered: each quoted line ("..." skips lines) must be a line of the rendering, in order.
// A quote of a command not rendered here, or a command never quoted, fails.
func checkCLIQuotes(t *testing.T, doc string, rendered map[string]string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	quoted := map[string]bool{}
	var cmd string
	var lines []string
	in, first := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			if in && cmd != "" {
				out, ok := rendered[cmd]
				if !ok {
					t.Errorf("%s:%d quotes %q, which this test does not render", doc, n, cmd)
				} else if err := subsequence(lines, strings.Split(out, "\n")); err != nil {
					t.Errorf("%s: the quote of %q: %v\nrendered:\n%s", doc, cmd, err, out)
				}
				quoted[cmd] = true
			}
			in, first, cmd, lines = !in, !in, "", nil
		case first:
			first = false
			if strings.HasPrefix(line, "$ nomad ") {
				cmd = strings.TrimPrefix(line, "$ ")
			}
		case in && cmd != "" && line != "...":
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for c := range rendered {
		if !quoted[c] {
			t.Errorf("%s quotes no %q", doc, c)
		}
	}
}

func subsequence(quote, lines []string) error {
	i := 0
	for _, q := range quote {
		for i < len(lines) && lines[i] != q {
			i++
		}
		if i == len(lines) {
			return fmt.Errorf("line %q is not in the output (or not in this order)", q)
		}
		i++
	}
	return nil
}
