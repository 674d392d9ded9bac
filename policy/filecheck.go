package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// jsonValue is one value of a policy file met while walking it: where its key starts (the
// value's own start for the top level), the keys that lead to it, and its JSON kind.
type jsonValue struct {
	keys []string
	at   int64
	kind string // "string", "number", "bool", "null", "object" or "array"
	raw  string // a number or a bool as written
}

// walkJSON reads data token by token, which encoding/json's Unmarshal does not let a caller
// do: it returns every value under its keys, and refuses, with the file's line and column, a
// syntax error (Unmarshal's message says no line) and a key written twice in one object
// (Unmarshal keeps the last silently, so the first value a person wrote would be lost).
func walkJSON(path string, data []byte) ([]jsonValue, error) {
	// Unmarshal's scanner counts from the file's first byte; the Decoder's errors count from
	// the token they are in. The walk then meets only valid JSON.
	if err := json.Unmarshal(data, new(any)); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			// Offset counts the bytes read, the bad one included.
			return nil, fmt.Errorf("%s: not a JSON object: %w", pos(path, data, syntax.Offset-1), err)
		}
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []jsonValue
	var walk func(keys []string, at int64) error
	walk = func(keys []string, at int64) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		v := jsonValue{keys: keys, at: at}
		switch t := tok.(type) {
		case json.Delim:
			if t == '[' {
				v.kind = "array"
				for i := 0; dec.More(); i++ {
					if err := walk(append(keys[:len(keys):len(keys)], fmt.Sprint(i)), dec.InputOffset()); err != nil {
						return err
					}
				}
				break
			}
			v.kind = "object"
			seen := map[string]int64{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				start := keyStart(data, dec.InputOffset())
				if first, dup := seen[k]; dup {
					line, col := lineCol(data, first)
					return fmt.Errorf("%s: %q is written twice in one object (first at line %d, column %d): only one value may stand",
						pos(path, data, start), k, line, col)
				}
				seen[k] = start
				if err := walk(append(keys[:len(keys):len(keys)], k), start); err != nil {
					return err
				}
			}
		case string:
			v.kind = "string"
		case json.Number:
			v.kind, v.raw = "number", t.String()
		case bool:
			v.kind, v.raw = "bool", fmt.Sprint(t)
		case nil:
			v.kind = "null"
		}
		if v.kind == "object" || v.kind == "array" {
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return err
			}
		}
		out = append(out, v)
		return nil
	}
	if err := walk(nil, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// keyStart is where the key that ends at end (just past its closing quote) begins.
func keyStart(data []byte, end int64) int64 {
	for i := end - 2; i >= 0; i-- {
		if data[i] == '"' && (i == 0 || data[i-1] != '\\') {
			return i
		}
	}
	return end
}

// pos writes offset off of data as path:line,column, as queue files' errors do.
func pos(path string, data []byte, off int64) string {
	line, col := lineCol(data, off)
	return fmt.Sprintf("%s:%d,%d", path, line, col)
}

// lineCol is the line and column (both from 1, the column in bytes) of offset off of data.
func lineCol(data []byte, off int64) (int, int64) {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte{'\n'}), off - int64(bytes.LastIndexByte(data[:off], '\n'))
}

// itemKinds refuses an item whose value is not a string, naming it and where it is: items are
// strings, as in Nomad Variables, and encoding/json's refusal names neither the item nor the
// line. isItem says which walked values are items, and of what.
func itemKinds(path string, data []byte, vals []jsonValue, isItem func(keys []string) (string, bool)) error {
	var errs []error
	for _, v := range vals {
		what, ok := isItem(v.keys)
		if !ok || v.kind == "string" {
			continue
		}
		k := v.keys[len(v.keys)-1]
		hint := ""
		if v.raw != "" {
			hint = fmt.Sprintf(" (write %q)", v.raw)
		}
		errs = append(errs, fmt.Errorf("%s: %s item %q is a %s; every item's value is a JSON string%s",
			pos(path, data, v.at), what, k, v.kind, hint))
	}
	return errors.Join(errs...)
}

// The store form's keys: encoding/json's DisallowUnknownFields refuses others, but its error
// names neither the line nor, for a key inside an entry, the entry.
var (
	storeKeys = []string{"format", "index", "policies", "templates"}
	entryKeys = []string{"items", "create_index", "modify_index", "modify_time"}
)

// unknownKeys refuses a key the store form does not have, with where it is, which entry it is
// in, and the keys that are: a misspelt "policies" or "items" would otherwise be lost whole.
func unknownKeys(path string, data []byte, vals []jsonValue) error {
	var errs []error
	for _, v := range vals {
		k := v.keys
		switch {
		case len(k) == 1 && !slices.Contains(storeKeys, k[0]):
			errs = append(errs, fmt.Errorf("%s: unknown field %q at the top of the store form; its fields are %s",
				pos(path, data, v.at), k[0], quoted(storeKeys)))
		case len(k) == 3 && (k[0] == "policies" || k[0] == "templates") && !slices.Contains(entryKeys, k[2]):
			what := map[string]string{"policies": "policy", "templates": "template"}[k[0]]
			errs = append(errs, fmt.Errorf("%s: unknown field %q in %s %q; an entry's fields are %s",
				pos(path, data, v.at), k[2], what, k[1], quoted(entryKeys)))
		}
	}
	return errors.Join(errs...)
}

func quoted(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}
