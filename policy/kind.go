package policy

import "fmt"

// Kind is one kind of stored object, a Policy or a Template: what a Store needs to read and
// write either the same way.
type Kind[T any] struct {
	// Name is "policy" or "template", as errors and paths spell it.
	Name    string
	path    func(name string) string
	nameOf  func(T) string
	encode  func(T) (map[string]string, error)
	decode  func(map[string]string) (T, error)
	entries func(*fileDoc) map[string]*fileEntry // where a FileStore keeps this kind
}

// The two kinds of stored objects.
var (
	PolicyKind = Kind[Policy]{Name: "policy", path: PolicyPath, nameOf: func(p Policy) string { return p.Name },
		encode: EncodePolicy, decode: DecodePolicy, entries: func(d *fileDoc) map[string]*fileEntry { return d.Policies }}
	TemplateKind = Kind[Template]{Name: "template", path: TemplatePath, nameOf: func(t Template) string { return t.Name },
		encode: EncodeTemplate, decode: DecodeTemplate, entries: func(d *fileDoc) map[string]*fileEntry { return d.Templates }}
)

// Path is the Nomad Variable path of the object called name.
func (k Kind[T]) Path(name string) string { return k.path(name) }

// NameOf is v's name.
func (k Kind[T]) NameOf(v T) string { return k.nameOf(v) }

// Encode validates v and returns its Nomad Variable items; an error names the object.
func (k Kind[T]) Encode(v T) (map[string]string, error) {
	items, err := k.encode(v)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", k.Name, k.nameOf(v), err)
	}
	return items, nil
}

// DecodeAt decodes items stored at path and checks that the name item matches the path's name,
// so a copied variable cannot masquerade as another object.
func (k Kind[T]) DecodeAt(path, name string, items map[string]string) (T, error) {
	var zero T
	v, err := k.decode(items)
	if err != nil {
		return zero, fmt.Errorf("%s at %s: %w", k.Name, path, err)
	}
	if got := k.nameOf(v); got != name {
		return zero, fmt.Errorf("%s at %s: %w", k.Name, path, &FieldError{Field: KeyName, Value: fmt.Sprintf("%q", got), Reason: fmt.Sprintf("does not match the path's name %q", name)})
	}
	return v, nil
}
