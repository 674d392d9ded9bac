package emulator

import (
	"slices"
	"strconv"
	"strings"

	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
)

// What Nomad's CLI prints from a device plugin's fingerprint and stats, so tests can read a
// plugin's output as an operator does. Written from the output's observable shape:
//
//   - an instance is named vendor/type/name[id];
//   - a list ("Device Stats" of `nomad alloc status`, "Device Resource Utilization" of
//     `nomad node status`) is one "<instance>  <summary>" row per instance, rows sorted as
//     strings, columns aligned, an empty field shown as <none>;
//   - a block (`-stats`, "Device Group Attributes" of `-verbose`) is "Device = <instance>" (or
//     "Device Group = vendor/type/name") then "<name> = <value>" rows sorted as strings, keys
//     aligned, blocks separated by an empty line;
//   - a value is a string or bool as it is (a unit is not shown), a number "n unit", a fraction
//     "n / d unit", a float cut to 3 decimals.
//
// Nomad prints the -stats blocks in map order; these renderers sort them, so output compares.

// none is what Nomad prints for an empty field.
const none = "<none>"

// QualifiedID names one instance as Nomad's CLI does.
func QualifiedID(vendor, typ, name, id string) string {
	p := vendor
	if typ != "" {
		p += "/" + typ
	}
	if name != "" {
		p += "/" + name
	}
	return p + "[" + id + "]"
}

// StatString is a stat value as Nomad's CLI prints it.
func StatString(v *structspb.StatValue) string {
	switch {
	case v == nil:
		return none
	case v.GetBoolVal() != nil:
		return strconv.FormatBool(v.GetBoolVal().GetValue())
	case v.GetStringVal() != nil:
		return v.GetStringVal().GetValue()
	case v.GetFloatNumeratorVal() != nil:
		s := cutFloat(v.GetFloatNumeratorVal().GetValue())
		if v.GetFloatDenominatorVal() != nil {
			s += " / " + cutFloat(v.GetFloatDenominatorVal().GetValue())
		}
		return withUnit(s, v.GetUnit())
	case v.GetIntNumeratorVal() != nil:
		s := strconv.FormatInt(v.GetIntNumeratorVal().GetValue(), 10)
		if v.GetIntDenominatorVal() != nil {
			s += " / " + strconv.FormatInt(v.GetIntDenominatorVal().GetValue(), 10)
		}
		return withUnit(s, v.GetUnit())
	}
	return "<unknown>"
}

// AttributeString is a fingerprint attribute as Nomad's CLI prints it.
func AttributeString(a *structspb.Attribute) string {
	switch v := a.GetValue().(type) {
	case *structspb.Attribute_FloatVal:
		return withUnit(cutFloat(v.FloatVal), a.GetUnit())
	case *structspb.Attribute_IntVal:
		return withUnit(strconv.FormatInt(v.IntVal, 10), a.GetUnit())
	case *structspb.Attribute_StringVal:
		return v.StringVal
	case *structspb.Attribute_BoolVal:
		return strconv.FormatBool(v.BoolVal)
	}
	return "<unknown>"
}

func withUnit(s, unit string) string {
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// cutFloat prints f in full and cuts it (no rounding) to 3 decimals.
func cutFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if i := strings.IndexByte(s, '.'); i >= 0 && len(s) > i+4 {
		s = s[:i+4]
	}
	return s
}

// align lays rows of '|'-separated fields out in columns joined by glue: every field but a row's
// last is padded to its column's width, fields are trimmed, an empty one is <none>.
func align(rows []string, glue string) string {
	split := make([][]string, len(rows))
	var width []int
	for i, r := range rows {
		fields := strings.Split(r, "|")
		for j, f := range fields {
			f = strings.TrimSpace(f)
			if f == "" {
				f = none
			}
			fields[j] = f
			if j >= len(width) {
				width = append(width, 0)
			}
			width[j] = max(width[j], len(f))
		}
		split[i] = fields
	}
	lines := make([]string, len(split))
	for i, fields := range split {
		var b strings.Builder
		for j, f := range fields {
			if j == len(fields)-1 {
				b.WriteString(f)
				break
			}
			b.WriteString(f + strings.Repeat(" ", width[j]-len(f)) + glue)
		}
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}

func list(rows []string) string { return align(rows, "  ") }
func kv(rows []string) string   { return align(rows, " = ") }

// statRows are a stat object's "name|value" rows, nested objects' names prefixed "outer.".
func statRows(o *structspb.StatObject, prefix string) []string {
	var rows []string
	for k, v := range o.GetAttributes() {
		rows = append(rows, prefix+k+"|"+StatString(v))
	}
	for k, n := range o.GetNested() {
		rows = append(rows, statRows(n, prefix+k+".")...)
	}
	return rows
}

// instanceBlocks are the -stats blocks of the instances keep selects, sorted by instance.
func instanceBlocks(st *devicepb.StatsResponse, keep func(id string) bool) []string {
	type block struct{ qid, text string }
	var blocks []block
	for _, g := range st.GetGroups() {
		for id, ds := range g.GetInstanceStats() {
			if !keep(id) {
				continue
			}
			qid := QualifiedID(g.GetVendor(), g.GetType(), g.GetName(), id)
			rows := statRows(ds.GetStats(), "")
			slices.Sort(rows)
			blocks = append(blocks, block{qid, kv(append([]string{"Device|" + qid}, rows...))})
		}
	}
	slices.SortFunc(blocks, func(a, b block) int { return strings.Compare(a.qid, b.qid) })
	out := make([]string, len(blocks))
	for i, b := range blocks {
		out[i] = b.text
	}
	return out
}

// summaries maps every instance of st to its summary as printed.
func summaries(st *devicepb.StatsResponse) map[string]string {
	out := map[string]string{}
	for _, g := range st.GetGroups() {
		for id, ds := range g.GetInstanceStats() {
			out[QualifiedID(g.GetVendor(), g.GetType(), g.GetName(), id)] = StatString(ds.GetSummary())
		}
	}
	return out
}
