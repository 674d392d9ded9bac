package nomad_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/gpu"
)

// Typos in GPU references and unusable paths stop the plugin at agent start, as an operator
// meets them: a malformed entry or path at SetConfig (the agent does not start), an entry
// naming a GPU the node lacks at the first fingerprint (Nomad disables the plugin), each error
// naming the bad entry and, for GPUs, listing the ones that exist.
func TestTyposRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1 := gpu.SimUUID(0, "H100"), gpu.SimUUID(1, "H100")
	short := gpu1[:len(gpu1)-1]
	listed := []string{"0 = " + gpu0, "1 = " + gpu1}
	tests := []struct {
		name, extra string
		stage       string // where the agent sees it
		want        []string
	}{
		{"index that does not exist", `ignored_gpu_ids = ["7"]`, "fingerprint stream ended", append([]string{`ignored_gpu_ids = "7"`}, listed...)},
		{"uuid one char short", `ignored_gpu_ids = ["` + short + `"]`, "config validation pass: SetConfig", []string{"ignored_gpu_ids", short}},
		{"mode for a GPU that does not exist", `gpu_modes = { "9" = "mps" }`, "fingerprint stream ended", append([]string{`gpu_modes.9 = "mps"`}, listed...)},
		{"state_dir under a regular file", `state_dir = "` + file + `/state"`, "config validation pass: SetConfig", []string{"state_dir", file + " is not a directory"}},
		{"missing policy_file", `policy_file = "` + dir + `/policy.json"`, "config validation pass: SetConfig", []string{"policy_file", dir + "/policy.json", "file not found"}},
		{"fence_dir holding state_dir", `fence_dir = "` + dir + `"`, "config validation pass: SetConfig", []string{`fence_dir = "` + dir + `"`, "state_dir", "token"}},
		{"policy_name without policy_file", `policy_name = "inference"`, "config validation pass: SetConfig", []string{`policy_name = "inference"`, "policy_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hcl := agentConfig(filepath.Join(dir, "state"), `"2xH100=80GiB"`, tt.extra)
			if strings.Contains(tt.extra, "state_dir") {
				hcl = strings.Replace(hcl, `state_dir      = "`+filepath.Join(dir, "state")+`"`, "", 1)
			}
			c, err := emulator.Start(binary, hcl)
			if err == nil {
				c.Close()
				t.Fatal("the plugin started with the typo")
			}
			if !strings.Contains(err.Error(), tt.stage) {
				t.Errorf("refused elsewhere than at %s: %v", tt.stage, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %s", err, w)
				}
			}
		})
	}
}
