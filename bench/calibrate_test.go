package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestSuggest(t *testing.T) {
	tests := []struct {
		name              string
		wall, work, smAct float64
		knob              string
		value             int
		wantTo            int
		wantWall, wantSM  float64 // predicted, when wantTo > 0
		wantReady         bool
		wantNote          string
	}{
		// gpu-facts.md: 120 LoRA steps at batch 8 x 512 ran 37.0 s (work 22.0 s) at 21.8% SM
		// util: its work phase keeps the SMs 37% active, so more steps cannot reach 60%.
		{name: "the H200's 120-step LoRA", wall: 37, work: 22, smAct: 0.218 * 37, knob: "GPUFRAC_STEPS", value: 120,
			wantNote: "raise its batch"},
		// s = 10, w = 10, a = 9.5: k = 6 / 3.5 = 1.714, 30 steps -> 51 (k 1.7): 27 s, 59.8%.
		{name: "more steps", wall: 20, work: 10, smAct: 9.5, knob: "GPUFRAC_STEPS", value: 30,
			wantTo: 51, wantWall: 27, wantSM: 1.7 * 9.5 / 27},
		// s = 13, w = 22, a = 21: already 60%, k = 7.8 / 7.8 = 1.
		{name: "already in the target", wall: 35, work: 22, smAct: 21, knob: "GPUFRAC_SEQS", value: 768,
			wantTo: 768, wantWall: 35, wantSM: 0.6, wantReady: true},
		// s = 15, w = 10, a = 9.2: k = 9 / 3.2 = 2.81, 16 -> 45 (k 2.8125): 43.1 s, past 40 s.
		{name: "too long at the target", wall: 25, work: 10, smAct: 9.2, knob: "GPUFRAC_STEPS", value: 16,
			wantTo: 45, wantWall: 43.125, wantSM: 2.8125 * 9.2 / 43.125, wantNote: "past 40s"},
		// s = 10, w = 30, a = 28: k = 6 / 10 = 0.6, 100 -> 60: 28 s, 60%.
		{name: "fewer steps", wall: 40, work: 30, smAct: 28, knob: "GPUFRAC_NEW", value: 100,
			wantTo: 60, wantWall: 28, wantSM: 0.6},
		{name: "the leaker has no knob", wall: 30, work: 20, smAct: 18, wantNote: "no work knob", wantReady: true},
		{name: "a work phase longer than the run", wall: 10, work: 12, smAct: 5, knob: "GPUFRAC_STEPS", value: 10, wantNote: "cannot model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sg := Suggest(secs(tc.wall), secs(tc.work), tc.smAct, tc.knob, tc.value, CalibrationTarget, CalibrationMaxWall)
			if sg.To != tc.wantTo || sg.Ready != tc.wantReady {
				t.Fatalf("Suggest = %+v; want to %d, ready %v", sg, tc.wantTo, tc.wantReady)
			}
			if tc.wantTo > 0 && (math.Abs(sg.Wall.Seconds()-tc.wantWall) > 1e-6 || math.Abs(sg.SM-tc.wantSM) > 1e-6) {
				t.Errorf("predicted %.3f s at %.4f, want %.3f s at %.4f", sg.Wall.Seconds(), sg.SM, tc.wantWall, tc.wantSM)
			}
			if (tc.wantNote == "") != (sg.Note == "") || !strings.Contains(sg.Note, tc.wantNote) {
				t.Errorf("note %q, want one containing %q", sg.Note, tc.wantNote)
			}
		})
	}
}

func TestCalibrationProfiles(t *testing.T) {
	run := ArmRun{Attempts: []record.Attempt{
		{Job: "c01", Template: LoRA06B, Outcome: record.OutcomeOK, PeakBytes: 40 * size.GiB},
		{Job: "c01", Template: LoRA06B, Outcome: record.OutcomeOK, PeakBytes: 38 * size.GiB},
		{Job: "c02", Template: ResNet50, Outcome: record.OutcomeFailed, PeakBytes: 90 * size.GiB},
		{Job: "c08", Template: Leaker, Outcome: record.OutcomeOK, PeakBytes: 130 * size.GiB},
	}}
	perJob := []JobScore{
		{Job: "c01", Template: LoRA06B, SM: &SMUse{Fraction: 0.5}},
		{Job: "c01b", Template: LoRA06B, SM: &SMUse{Fraction: 0.5444}},
		{Job: "c02", Template: ResNet50, SM: &SMUse{Fraction: 0.6}},
		{Job: "c08", Template: Leaker, SM: &SMUse{Fraction: 0.355}},
	}
	data, err := CalibrationProfiles(run, perJob, ProfileBusy, "test")
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/p.json"
	if err := writeAtomic(path, data); err != nil {
		t.Fatal(err)
	}
	got, err := LoadProfilesFor(path, ProfileBusy)
	if err != nil {
		t.Fatal(err)
	}
	// The larger of two clean runs, no failed attempt's, no leaker; the SM share is the mean
	// of the template's jobs alone, and only a template with a peak has one.
	if len(got) != 1 || got[0].Template != LoRA06B || got[0].PeakBytes != 40*size.GiB ||
		got[0].SMActivePercent == nil || *got[0].SMActivePercent != 52.2 {
		t.Fatalf("profiles %+v from %s", got, data)
	}
	if _, err := LoadProfilesFor(path, ProfileStartup); err == nil {
		t.Fatal("busy footprints were accepted for a startup run")
	}
}

func TestCalibrationQueue(t *testing.T) {
	q := CalibrationQueue()
	if len(q) != len(Templates) {
		t.Fatalf("%d jobs, want one per template", len(q))
	}
	for i, e := range q {
		if e.Template != Templates[i] || !strings.HasSuffix(e.Name, e.Template) {
			t.Errorf("job %d: %+v", i, e)
		}
	}
}

func TestCalibrationQueueOf(t *testing.T) {
	q, err := CalibrationQueueOf("resnet50, lora-0.6b")
	if err != nil || len(q) != 2 || q[0].Template != ResNet50 || q[1].Template != LoRA06B {
		t.Fatalf("queue %+v, %v", q, err)
	}
	if q, err := CalibrationQueueOf(""); err != nil || len(q) != len(Templates) {
		t.Fatalf("all: %+v, %v", q, err)
	}
	if _, err := CalibrationQueueOf("resnet50,bert"); err == nil || !strings.Contains(err.Error(), `"bert"`) {
		t.Fatalf("unknown template: %v", err)
	}
}
