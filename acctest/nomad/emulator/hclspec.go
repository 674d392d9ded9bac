package emulator

import (
	"encoding/json"
	"fmt"

	hcl1 "github.com/hashicorp/hcl"
	hcl1ast "github.com/hashicorp/hcl/hcl/ast"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	"github.com/zclconf/go-cty/cty/msgpack"

	hclspecpb "github.com/gpufrac/gpufrac/nomad-device/proto/hclspec"
)

// EvalContext holds the functions Nomad makes available to Literal expressions and to the
// operator's config values.
func EvalContext() *hcl.EvalContext {
	return &hcl.EvalContext{Functions: map[string]function.Function{
		"abs":        stdlib.AbsoluteFunc,
		"coalesce":   stdlib.CoalesceFunc,
		"concat":     stdlib.ConcatFunc,
		"hasindex":   stdlib.HasIndexFunc,
		"int":        stdlib.IntFunc,
		"jsondecode": stdlib.JSONDecodeFunc,
		"jsonencode": stdlib.JSONEncodeFunc,
		"length":     stdlib.LengthFunc,
		"lower":      stdlib.LowerFunc,
		"max":        stdlib.MaxFunc,
		"min":        stdlib.MinFunc,
		"reverse":    stdlib.ReverseFunc,
		"strlen":     stdlib.StrlenFunc,
		"substr":     stdlib.SubstrFunc,
		"upper":      stdlib.UpperFunc,
	}}
}

// SpecToHCLDec converts a plugin's ConfigSchema the way a Nomad agent does: an Object's keys
// name their children, Default converts both sides with no implied name (so an Attr under a
// Default must name itself), types are HCL type expressions and Literals are HCL expressions.
func SpecToHCLDec(s *hclspecpb.Spec) (hcldec.Spec, error) { return convert(s, "") }

func convert(s *hclspecpb.Spec, implied string) (hcldec.Spec, error) {
	name := func(own string) (string, error) {
		if own != "" {
			return own, nil
		}
		if implied != "" {
			return implied, nil
		}
		return "", fmt.Errorf("hclspec: Missing name in %T", s.GetBlock())
	}
	switch b := s.GetBlock().(type) {
	case *hclspecpb.Spec_Object:
		out := hcldec.ObjectSpec{}
		for k, child := range b.Object.GetAttributes() {
			c, err := convert(child, k)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = c
		}
		return out, nil
	case *hclspecpb.Spec_Array:
		out := hcldec.TupleSpec{}
		for i, child := range b.Array.GetValues() {
			c, err := convert(child, "")
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out = append(out, c)
		}
		return out, nil
	case *hclspecpb.Spec_Attr:
		n, ty, err := namedType(name, b.Attr.GetName(), b.Attr.GetType(), "attribute")
		if err != nil {
			return nil, err
		}
		return &hcldec.AttrSpec{Name: n, Type: ty, Required: b.Attr.GetRequired()}, nil
	case *hclspecpb.Spec_BlockValue:
		n, nested, err := namedBlock(name, b.BlockValue.GetName(), b.BlockValue.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSpec{TypeName: n, Required: b.BlockValue.GetRequired(), Nested: nested}, nil
	case *hclspecpb.Spec_BlockAttrs:
		n, ty, err := namedType(name, b.BlockAttrs.GetName(), b.BlockAttrs.GetType(), "block")
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockAttrsSpec{TypeName: n, ElementType: ty, Required: b.BlockAttrs.GetRequired()}, nil
	case *hclspecpb.Spec_BlockList:
		n, nested, err := namedBlock(name, b.BlockList.GetName(), b.BlockList.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockListSpec{TypeName: n, Nested: nested,
			MinItems: int(b.BlockList.GetMinItems()), MaxItems: int(b.BlockList.GetMaxItems())}, nil
	case *hclspecpb.Spec_BlockSet:
		n, nested, err := namedBlock(name, b.BlockSet.GetName(), b.BlockSet.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSetSpec{TypeName: n, Nested: nested,
			MinItems: int(b.BlockSet.GetMinItems()), MaxItems: int(b.BlockSet.GetMaxItems())}, nil
	case *hclspecpb.Spec_BlockMap:
		n, err := name(b.BlockMap.GetName())
		if err != nil {
			return nil, err
		}
		if len(b.BlockMap.GetLabels()) == 0 {
			return nil, fmt.Errorf("block map %s: at least one label is required", n)
		}
		nested, err := convertNested(b.BlockMap.GetNested())
		if err != nil {
			return nil, fmt.Errorf("block map %s: %w", n, err)
		}
		return &hcldec.BlockMapSpec{TypeName: n, LabelNames: b.BlockMap.GetLabels(), Nested: nested}, nil
	case *hclspecpb.Spec_Default:
		p, err := convert(b.Default.GetPrimary(), "")
		if err != nil {
			return nil, fmt.Errorf("default primary: %w", err)
		}
		d, err := convert(b.Default.GetDefault(), "")
		if err != nil {
			return nil, fmt.Errorf("default value: %w", err)
		}
		return &hcldec.DefaultSpec{Primary: p, Default: d}, nil
	case *hclspecpb.Spec_Literal:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Literal.GetValue()), "<literal>", hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("literal %s: %s", b.Literal.GetValue(), diags.Error())
		}
		v, diags := expr.Value(EvalContext())
		if diags.HasErrors() {
			return nil, fmt.Errorf("literal %s: %s", b.Literal.GetValue(), diags.Error())
		}
		return &hcldec.LiteralSpec{Value: v}, nil
	case nil:
		return nil, fmt.Errorf("hclspec: empty spec")
	default:
		return nil, fmt.Errorf("hclspec: unsupported member %T", b)
	}
}

// namedType is an attribute's or a block's name (its own, or the one name implies) and its
// parsed type; what names it in an error about the type.
func namedType(name func(string) (string, error), raw, typ, what string) (string, cty.Type, error) {
	n, err := name(raw)
	if err != nil {
		return "", cty.NilType, err
	}
	ty, err := parseType(typ)
	if err != nil {
		return "", cty.NilType, fmt.Errorf("%s %s: %w", what, n, err)
	}
	return n, ty, nil
}

// namedBlock is a block's name (its own, or the one name implies) and its nested spec, converted.
func namedBlock(name func(string) (string, error), raw string, nested *hclspecpb.Spec) (string, hcldec.Spec, error) {
	n, err := name(raw)
	if err != nil {
		return "", nil, err
	}
	c, err := convertNested(nested)
	if err != nil {
		return "", nil, fmt.Errorf("block %s: %w", n, err)
	}
	return n, c, nil
}

func convertNested(s *hclspecpb.Spec) (hcldec.Spec, error) {
	if s == nil {
		return hcldec.ObjectSpec{}, nil
	}
	return convert(s, "")
}

func parseType(t string) (cty.Type, error) {
	if t == "" {
		return cty.NilType, fmt.Errorf("no type")
	}
	expr, diags := hclsyntax.ParseExpression([]byte(t), "<type>", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("type %q: %s", t, diags.Error())
	}
	ty, diags := typeexpr.TypeConstraint(expr)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("type %q: %s", t, diags.Error())
	}
	return ty, nil
}

// EncodeConfig turns agent HCL holding at most one `config { ... }` block into SetConfig's bytes
// the way a Nomad agent does: the agent file is parsed with HCL1 (so a nested object or block
// arrives as a list of maps), the config map is JSON-encoded, parsed back as HCL2 JSON, decoded
// through the converted schema, and the value is msgpack-encoded with its own type. No config
// block decodes an empty map, so defaults apply.
func EncodeConfig(schema *hclspecpb.Spec, hclText string) ([]byte, error) {
	spec, err := SpecToHCLDec(schema)
	if err != nil {
		return nil, fmt.Errorf("plugin schema: %w", err)
	}
	f, err := hcl1.Parse(hclText)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	// Both of hcl1's parsers (HCL and JSON) make the root an object list.
	root := f.Node.(*hcl1ast.ObjectList)
	if n := len(root.Filter("config").Items); n > 1 {
		return nil, fmt.Errorf("agent config: %d config blocks, want at most one", n)
	}
	var stanza struct {
		Config map[string]interface{} `hcl:"config"`
	}
	if err := hcl1.DecodeObject(&stanza, f.Node); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if stanza.Config == nil {
		stanza.Config = map[string]interface{}{}
	}
	js, err := json.Marshal(stanza.Config)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	jf, diags := hcljson.Parse(js, "")
	if diags.HasErrors() {
		return nil, fmt.Errorf("agent config: %s", diags.Error())
	}
	val, diags := hcldec.Decode(jf.Body, spec, EvalContext())
	if diags.HasErrors() {
		return nil, fmt.Errorf("failed to parse plugin config: %s", diags.Error())
	}
	return msgpack.Marshal(val, val.Type())
}
