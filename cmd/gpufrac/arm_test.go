package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/record"
)

// `gpufrac run` runs a benchmark baseline by hand, named by --arm or by the queue file's arm:
// its rules come from the benchmark (bench/arms), and the run records the arm and its caps.
func TestRunTakesABaselineArm(t *testing.T) {
	for _, tc := range []struct {
		name, flag, fileArm string
		want                record.Arm
		capped              bool
	}{
		{"flag", "static", "", record.ArmStatic, true},
		{"queue file", "", "uncapped", record.ArmUncapped, false},
		{"the flag wins", "exclusive", "uncapped", record.ArmExclusive, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			dir := t.TempDir()
			q := filepath.Join(dir, "q.hcl")
			src := "template \"t\" {}\njob \"a\" {\n  template = \"t\"\n  command  = [\"gpufrac\", \"simjob\", \"--peak\", \"1GiB\", \"--hold\", \"100ms\"]\n}\n"
			if tc.fileArm != "" {
				src = "arm = \"" + tc.fileArm + "\"\n" + src
			}
			if err := os.WriteFile(q, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			args := []string{"run", "--out", out}
			if tc.flag != "" {
				args = append(args, "--arm", tc.flag)
			}
			if code, stdout, stderr := c.run(append(args, q)...); code != 0 {
				t.Fatalf("run exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			data, err := os.ReadFile(filepath.Join(out, record.ResultsFile))
			if err != nil {
				t.Fatal(err)
			}
			var res record.Result
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			if res.Arm != tc.want || len(res.Attempts) != 1 || res.Attempts[0].Capped != tc.capped || res.Attempts[0].Probe {
				t.Fatalf("arm %q, attempts %+v: want arm %q, one attempt, capped %v, no probe", res.Arm, res.Attempts, tc.want, tc.capped)
			}
		})
	}
}
