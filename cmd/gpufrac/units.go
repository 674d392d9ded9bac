package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/version"
)

// unitsOutput is what `gpufrac units --json` prints.
type unitsOutput struct {
	Template  string     `json:"template,omitempty"`
	From      string     `json:"from"` // where the peak came from
	Policy    string     `json:"policy"`
	PeakBytes size.Bytes `json:"peak_bytes"`
	CapBytes  size.Bytes `json:"cap_bytes"`
	Cap       string     `json:"cap"`
	Override  bool       `json:"cap_override"`
	Units     int        `json:"units"`
	UnitBytes size.Bytes `json:"unit_bytes"`
}

func cmdUnits(ctx context.Context, g *globals, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("units", "units (--peak SIZE | --template NAME) [--policy-file F] [--json]", g, stderr)
	var sf storeFlags
	sf.register(fs)
	peakS := fs.String("peak", "", `measured peak GPU memory, e.g. "12GiB" or "14.5GB"`)
	tmpl := fs.String("template", "", "a template whose stored footprint to use (policy store, else the ledger)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, g, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if (*peakS == "") == (*tmpl == "") {
		return usagef("give exactly one of --peak SIZE or --template NAME")
	}
	pol, _, err := sf.loadPolicy(ctx, g)
	if err != nil {
		return err
	}
	out := unitsOutput{Policy: pol.Name, UnitBytes: pol.UnitBytes, Template: *tmpl}
	if *peakS != "" {
		p, err := size.Parse(*peakS)
		if err != nil {
			return usagef("--peak: %w", err)
		}
		if p == 0 {
			return usagef("--peak %q: a peak of zero needs no GPU", *peakS)
		}
		if p > policy.MaxTemplateBytes {
			// As for a template's peak: no GPU holds it, so it is a typo (80TB for 80GB).
			return usagef("--peak %q is %s, more than any GPU holds (at most %s, as a template's peak)", *peakS, p, policy.MaxTemplateBytes)
		}
		out.PeakBytes, out.From = p, "--peak"
		out.CapBytes = pol.Cap(p)
	} else {
		t, err := findTemplate(ctx, g, &sf, *tmpl)
		if err != nil {
			return err
		}
		out.PeakBytes, out.From = t.PeakBytes, t.Description
		out.CapBytes = t.Cap(pol)
		out.Override = t.CapOverrideBytes != 0
	}
	out.Cap = out.CapBytes.String()
	out.Units = pol.Units(out.CapBytes)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if *tmpl != "" {
		fmt.Fprintf(stdout, "template %s (footprint from %s)\n", *tmpl, out.From)
	}
	if out.Override {
		fmt.Fprintf(stdout, "cap %s (the template's cap override; peak %s)\n", out.CapBytes, out.PeakBytes)
	} else {
		fmt.Fprintf(stdout, "peak %s -> cap %s = %s (policy %q)\n", out.PeakBytes, out.CapBytes, pol.CapFormula(out.PeakBytes.String()), pol.Name)
	}
	fmt.Fprintf(stdout, "units: %d of %s (request device \"nvidia/gpumem\" { count = %d })\n", out.Units, pol.UnitBytes, out.Units)
	return nil
}

// findTemplate looks a template up in the policy store, then among the ledger's profiles. The
// Description of the result says where it came from.
func findTemplate(ctx context.Context, g *globals, sf *storeFlags, name string) (policy.Template, error) {
	st, where, err := sf.open(g)
	if err != nil {
		return policy.Template{}, err
	}
	t, _, err := st.GetTemplate(ctx, name)
	if err == nil {
		t.Description = where
		return t, nil
	}
	if !errors.Is(err, policy.ErrNotFound) && sf.explicit() {
		return policy.Template{}, fmt.Errorf("template %q from the %s: %w", name, where, err)
	}
	dir := expandHome(g.stateDir)
	if snap, serr := ledger.ReadSnapshot(dir); serr == nil {
		for _, p := range snap.Profiles {
			if p.Template == name {
				return policy.Template{Name: name, PeakBytes: p.PeakBytes, Description: "the ledger's " + p.Source + " profile in " + dir}, nil
			}
		}
	}
	return policy.Template{}, fmt.Errorf("template %q: no footprint in the %s nor in the ledger in %s (measure it: gpufrac probe --template %s -- CMD)",
		name, where, dir, name)
}

func cmdVersion(_ context.Context, g *globals, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version", g, stderr)
	if err := parseFlags(fs, g, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintf(stdout, "gpufrac %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
