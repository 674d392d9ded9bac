package policy

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

func TestFileStoreForms(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		content string
		policy  string // policy to read; "" = expect the read to fail
		wantErr string
	}{
		{"empty file is an empty store", "", "", "not found"},
		{"single-policy form", `{"schema_version":"1","name":"default","headroom_bytes":"1073741824","cap_margin_percent":"15",
			"cap_margin_bytes":"1500000000","max_tasks_per_gpu":"4","unit_bytes":"1073741824","mode":"isolated",
			"watchdog_interval":"100ms","unmanaged":"report"}`, "default", ""},
		{"hand-written store form without indexes", `{"format":"gpufrac-policy-file","policies":{"default":{"items":
			{"schema_version":"1","name":"default","headroom_bytes":"1073741824","cap_margin_percent":"15",
			"cap_margin_bytes":"1500000000","max_tasks_per_gpu":"4","unit_bytes":"1073741824","mode":"isolated",
			"watchdog_interval":"100ms","unmanaged":"report"}}}}`, "default", ""},
		{"wrong format name", `{"format":"other","policies":{}}`, "", `format "other"`},
		{"unknown top-level key", `{"format":"gpufrac-policy-file","policys":{}}`, "", `p.json:1,33: unknown field "policys" at the top`},
		{"unknown key in an entry", "{\"format\":\"gpufrac-policy-file\",\n \"policies\":{\"default\":{\"itmes\":{}}}}", "",
			`p.json:2,25: unknown field "itmes" in policy "default"; an entry's fields are "items", "create_index", "modify_index" and "modify_time"`},
		{"not JSON", `policy = "default"`, "", "not a JSON object"},
		{"single form with a number", `{"schema_version":1}`, "", "neither the store form"},
		{"single form, bad item", `{"schema_version":"1","name":"default","headroom":"1"}`, "", `"headroom"`},
		// The name item is what the policy is found by: misspelt or left out, the file held
		// no policy "default", and the commands ran on the built-in defaults without a word.
		{"single form, misspelt name item", `{"schema_version":"1","nmae":"default","headroom_bytes":"1073741824",
			"cap_margin_percent":"15","cap_margin_bytes":"1500000000","max_tasks_per_gpu":"4","unit_bytes":"1073741824",
			"mode":"isolated","watchdog_interval":"100ms","unmanaged":"report"}`, "", `items = "nmae": unknown item key(s)`},
		{"single form without a name item", `{"schema_version":"1","headroom_bytes":"1073741824","cap_margin_percent":"15",
			"cap_margin_bytes":"1500000000","max_tasks_per_gpu":"4","unit_bytes":"1073741824","mode":"isolated",
			"watchdog_interval":"100ms","unmanaged":"report"}`, "", `p.json holds one policy's items but no valid "name" item`},
		{"single form with an empty name", `{"schema_version":"1","name":"","headroom_bytes":"1073741824","cap_margin_percent":"15",
			"cap_margin_bytes":"1500000000","max_tasks_per_gpu":"4","unit_bytes":"1073741824","mode":"isolated",
			"watchdog_interval":"100ms","unmanaged":"report"}`, "", `name = "": must be`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			s := NewFileStore(path, FileOptions{})
			p, m, err := s.GetPolicy(ctx, "default")
			if tc.policy == "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.MaxTasksPerGPU != 4 || m.ModifyIndex == 0 {
				t.Fatalf("policy %+v meta %+v", p, m)
			}
		})
	}
}

func TestFileStoreSingleFormIsReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	items, _ := EncodePolicy(samplePolicy())
	data, _ := json.Marshal(items)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewFileStore(path, FileOptions{})
	if _, err := s.PutPolicyUnchecked(context.Background(), samplePolicy()); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("write to single form: %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(data) {
		t.Fatal("single-form file changed")
	}
}

func TestFileStoreWritesAtomicallyAndReadably(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	s := NewFileStore(path, FileOptions{})
	ctx := context.Background()
	if _, err := s.PutPolicy(ctx, samplePolicy(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTemplate(ctx, Template{Name: "llama", PeakBytes: 5 * size.GiB}, 0); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "p.json,p.json.lock" {
		t.Fatalf("directory holds %v: temp files left behind?", names)
	}
	var doc map[string]any
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &doc); err != nil || doc["format"] != FileFormat || doc["index"] != float64(2) {
		t.Fatalf("file = %s (%v)", data, err)
	}
	if !strings.Contains(string(data), `"peak_bytes": "5368709120"`) {
		t.Fatalf("items not stored exactly:\n%s", data)
	}
}

// TestFileStoreConcurrentCAS: of many writers racing with the same index, exactly one wins.
func TestFileStoreConcurrentCAS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	ctx := context.Background()
	m, err := NewFileStore(path, FileOptions{}).PutPolicy(ctx, samplePolicy(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := NewFileStore(path, FileOptions{}) // separate stores: only the flock serialises them
			p := samplePolicy()
			p.MaxTasksPerGPU = i + 1
			_, err := s.PutPolicy(ctx, p, m.ModifyIndex)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrConflict):
				conflicts++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 7 {
		t.Fatalf("wins %d conflicts %d, want 1 and 7", wins, conflicts)
	}
}

func TestFileStoreUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte("{}"), 0o000); err != nil {
		t.Fatal(err)
	}
	_, _, err := NewFileStore(path, FileOptions{}).GetPolicy(context.Background(), "default")
	if !errors.Is(err, ErrPermissionDenied) || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("unreadable file: %v, want ErrPermissionDenied wrapping the fs.ErrPermission", err)
	}
}

// A file that does not parse is ErrInvalid, and the decoder's own error stays reachable.
func TestFileStoreBadJSONKeepsTheCause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(`{"policies": `), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := NewFileStore(path, FileOptions{}).GetPolicy(context.Background(), "default")
	var syntax *json.SyntaxError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &syntax) || !strings.Contains(err.Error(), path) {
		t.Fatalf("GetPolicy of a truncated file = %v, want ErrInvalid naming %s and wrapping the *json.SyntaxError", err, path)
	}
}

// A policy file written by hand that is wrong says where: the line and column of a syntax
// error, the item whose value is not a string (Unmarshal's message named a Go type and no
// item), and a key written twice, which Unmarshal read as the last one without a word.
func TestFileStoreErrorsSayWhere(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"a missing comma", "{\n  \"schema_version\": \"1\",\n  \"name\": \"default\"\n  \"unit_bytes\": \"1073741824\"\n}\n",
			[]string{"p.json:4,3", "invalid character"}},
		{"cut short", "{\"policies\": ", []string{"p.json:1,13", "unexpected end"}},
		{"a number item, single form", "{\n  \"schema_version\": \"1\",\n  \"name\": \"default\",\n  \"max_tasks_per_gpu\": 6\n}\n",
			[]string{"p.json:4,3", `item "max_tasks_per_gpu" is a number`, `write "6"`}},
		{"a number item, store form", "{\n \"format\": \"gpufrac-policy-file\",\n \"policies\": {\n  \"default\": {\"items\": {\"schema_version\": 1}}\n }\n}\n",
			[]string{"p.json:4,25", `policy "default" item "schema_version" is a number`}},
		{"a key written twice", "{\n  \"schema_version\": \"1\",\n  \"headroom_bytes\": \"1\",\n  \"headroom_bytes\": \"2\"\n}\n",
			[]string{"p.json:4,3", `"headroom_bytes" is written twice`, "line 3, column 3"}},
		{"an entry written twice", "{\n \"format\": \"gpufrac-policy-file\",\n \"policies\": {\n  \"default\": {\"items\": {}},\n  \"default\": {\"items\": {}}\n }\n}\n",
			[]string{"p.json:5,3", `"default" is written twice`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := NewFileStore(path, FileOptions{}).GetPolicy(context.Background(), "default")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("GetPolicy = %v, want ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
