package config

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The schema of the config is derived from the Config struct's mapstructure
// tags: one list of keys for typo checks, type checks, KVTOP_* variables and
// line lookups, so a new field is known everywhere the moment it is added.

// kind is what a key holds.
type kind int

const (
	kString kind = iota
	kBool
	kInt
	kFloat
	kDuration
	kStrings // a list of strings (aliases)
	kMap     // free-form string map (colors)
	kSection // a mapping of known keys (thresholds, limits)
	kList    // a list of mappings of known keys (workers, routers, decisions)
)

// field is one key of a mapping.
type field struct {
	name string
	kind kind
	sub  *section // the keys inside, for kSection and kList
	// index is the field's path in its section's struct (reflect's
	// FieldByIndex), through squashed structs.
	index []int
}

// section is the keys one YAML mapping may hold, in struct order.
type section struct {
	fields []field
}

func (s *section) field(name string) *field {
	for i := range s.fields {
		if s.fields[i].name == name {
			return &s.fields[i]
		}
	}
	return nil
}

func (s *section) names() []string {
	out := make([]string, len(s.fields))
	for i, f := range s.fields {
		out[i] = f.name
	}
	return out
}

// schema is the whole config's: derived once from Config.
var schema = sectionOf(reflect.TypeOf(Config{}))

var durationType = reflect.TypeOf(time.Duration(0))

func sectionOf(t reflect.Type) *section {
	s := &section{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("mapstructure")
		if tag == "-" || !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if opts == "squash" {
			for _, f := range sectionOf(sf.Type).fields {
				f.index = append([]int{i}, f.index...)
				s.fields = append(s.fields, f)
			}
			continue
		}
		if name == "" {
			panic("config: field " + sf.Name + " has no mapstructure name")
		}
		f := fieldOf(name, sf.Type)
		f.index = []int{i}
		s.fields = append(s.fields, f)
	}
	return s
}

func fieldOf(name string, t reflect.Type) field {
	f := field{name: name}
	switch {
	case t == durationType:
		f.kind = kDuration
	case t.Kind() == reflect.String:
		f.kind = kString
	case t.Kind() == reflect.Bool:
		f.kind = kBool
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		f.kind = kInt
	case t.Kind() == reflect.Float64:
		f.kind = kFloat
	case t.Kind() == reflect.Struct:
		f.kind, f.sub = kSection, sectionOf(t)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		f.kind, f.sub = kList, sectionOf(t.Elem())
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		f.kind = kStrings
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		f.kind = kMap
	default:
		panic(fmt.Sprintf("config: key %s has a type the schema does not know: %s", name, t))
	}
	return f
}

// scalarKey is a key that holds one value and so can come from a KVTOP_*
// variable: top-level scalars and those of nested sections (thresholds.*,
// limits.*). Keys inside lists (workers[].name) cannot.
type scalarKey struct {
	key  string // dotted path, as viper names it
	env  string // KVTOP_SCRAPE_TIMEOUT, KVTOP_LIMITS_DECISIONS, …
	kind kind
	// index is the key's field in Config (reflect's FieldByIndex).
	index []int
}

var scalarKeys = func() []scalarKey {
	var out []scalarKey
	var walk func(s *section, prefix string, index []int)
	walk = func(s *section, prefix string, index []int) {
		for _, f := range s.fields {
			key, idx := prefix+f.name, append(append([]int(nil), index...), f.index...)
			switch f.kind {
			case kSection:
				walk(f.sub, key+".", idx)
			case kString, kBool, kInt, kFloat, kDuration:
				out = append(out, scalarKey{key: key, env: envName(key), kind: f.kind, index: idx})
			}
		}
	}
	walk(schema, "", nil)
	return out
}()

// EnvPrefix starts every environment variable kvtop reads as a setting.
const EnvPrefix = "KVTOP_"

func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// EnvVars lists every KVTOP_* variable that sets a config key, sorted.
func EnvVars() []string {
	out := make([]string, len(scalarKeys))
	for i, k := range scalarKeys {
		out[i] = k.env
	}
	sort.Strings(out)
	return out
}

// checkScalar says why s cannot be a value of kind k ("" if it can). It
// accepts what viper's decoding accepts, and refuses what it would
// silently bend: a fraction for a whole number, NaN or Inf for a number.
func checkScalar(k kind, s string) string {
	switch k {
	case kDuration:
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Sprintf("%q is not a duration (write it like 1s, 500ms, 2m)", s)
		}
	case kInt:
		if _, err := strconv.ParseInt(s, 0, 64); err != nil {
			return fmt.Sprintf("%q is not a whole number", s)
		}
	case kFloat:
		if f, err := strconv.ParseFloat(s, 64); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Sprintf("%q is not a number", s)
		}
	case kBool:
		if _, err := strconv.ParseBool(s); err != nil {
			return fmt.Sprintf("%q is not true or false", s)
		}
	}
	return ""
}

func (k kind) want() string {
	switch k {
	case kDuration:
		return "a duration like 1s"
	case kInt:
		return "a whole number"
	case kFloat:
		return "a number"
	case kBool:
		return "true or false"
	case kStrings:
		return "a list of names"
	case kMap:
		return "a mapping of role: colour"
	case kSection:
		return "a mapping"
	case kList:
		return "a list of mappings (- name: …)"
	}
	return "one value"
}

// checked is what checkKeys found in a file.
type checked struct {
	errs Errors
	// drop holds the key nodes of entries left out of what viper reads
	// (unknown keys, values of the wrong type), blank the list items that
	// are read as empty mappings (not a mapping: an item kept in place, so
	// the indexes Validate names stay those of the file).
	drop, blank map[*yaml.Node]bool
	// said are the paths whose problem is told already: Validate's
	// findings under them (routers[0].name missing…) would be noise.
	said []string
}

// checkKeys walks the YAML and names every key kvtop does not know (with
// the closest known key as a hint) and every value of the wrong type or
// shape, with its line: viper's own messages name neither. Those entries
// are left out of what viper reads, so the rest of the file is still
// decoded and validated in the same run.
func checkKeys(root *yaml.Node, file string) checked {
	ck := checked{drop: map[*yaml.Node]bool{}, blank: map[*yaml.Node]bool{}}
	seen := map[*yaml.Node]bool{} // a merged mapping is walked once per merge: say each problem once
	bad := func(at *yaml.Node, key, reason string) {
		if !seen[at] {
			seen[at] = true
			ck.errs = append(ck.errs, &Error{File: file, Key: key, Line: at.Line, Reason: reason})
		}
	}
	// walking holds the mappings being walked: a merge of one of them
	// (<<: *base inside &base) is a cycle, which would recurse for ever.
	walking := map[*yaml.Node]bool{}
	var walkMap func(n *yaml.Node, s *section, path string)
	walkMap = func(n *yaml.Node, s *section, path string) {
		if walking[n] { // an alias of an anchor it is inside, as a value
			bad(n, path, "refers to a mapping it is inside (an alias of its own anchor)")
			return
		}
		walking[n] = true
		defer delete(walking, n)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, val := n.Content[i], resolve(n.Content[i+1])
			if kn.ShortTag() == "!!merge" { // <<: *anchor merges its keys here
				switch {
				case val.Kind != yaml.MappingNode:
				case walking[val]:
					bad(kn, join(path, kn.Value), "merges a mapping into itself (<<: names an anchor this mapping is inside)")
					ck.drop[kn] = true
				default:
					walkMap(val, s, path)
				}
				continue
			}
			kp := join(path, kn.Value)
			f := s.field(kn.Value)
			if f == nil {
				reason := "unknown key"
				if c := closest(kn.Value, s.names()); c != "" {
					reason += fmt.Sprintf(" (did you mean %q?)", c)
				}
				bad(kn, kp, reason)
				ck.drop[kn] = true
				continue
			}
			if val.ShortTag() == "!!null" {
				continue // not set: the default stands
			}
			var reason string
			switch f.kind {
			case kSection:
				if val.Kind == yaml.MappingNode {
					walkMap(val, f.sub, kp)
					continue
				}
			case kList:
				if val.Kind == yaml.SequenceNode {
					for j, item := range val.Content {
						ip := fmt.Sprintf("%s[%d]", kp, j)
						if r := resolve(item); r.Kind == yaml.MappingNode {
							walkMap(r, f.sub, ip)
							continue
						}
						bad(item, ip, fmt.Sprintf("want a mapping of %s, not %s", strings.Join(f.sub.names(), ", "), shape(item)))
						ck.blank[item] = true
						ck.said = append(ck.said, ip)
					}
					continue
				}
			case kMap:
				if val.Kind == yaml.MappingNode {
					continue
				}
			case kStrings:
				if val.Kind == yaml.SequenceNode || val.Kind == yaml.ScalarNode {
					continue
				}
			default:
				if val.Kind == yaml.ScalarNode {
					if reason = checkScalar(f.kind, val.Value); reason == "" {
						continue
					}
				}
			}
			if reason == "" {
				reason = fmt.Sprintf("want %s, not %s", f.kind.want(), shape(val))
			}
			bad(val, kp, reason)
			ck.drop[kn] = true
			ck.said = append(ck.said, kp)
		}
	}
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	switch {
	case doc.Kind == yaml.MappingNode:
		walkMap(doc, schema, "")
	case doc.ShortTag() == "!!null" || doc.Kind == 0:
		// an empty file: defaults only
	default:
		bad(doc, "", "want a mapping of settings (pool:, workers:, …) at the top, not "+shape(doc))
		ck.blank[doc] = true
		ck.said = append(ck.said, "") // nothing else in it can be read
	}
	return ck
}

// told says whether a problem with key is told already by checkKeys.
func (ck checked) told(key string) bool {
	for _, p := range ck.said {
		if p == "" || key == p || strings.HasPrefix(key, p+".") || strings.HasPrefix(key, p+"[") {
			return true
		}
	}
	return false
}

// shape names what a node is, for "want X, not Y".
func shape(n *yaml.Node) string {
	switch resolve(n).Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// pruned is a copy of the document without the entries whose key node is
// in ck.drop, and with empty mappings for the nodes in ck.blank.
func pruned(n *yaml.Node, ck checked) *yaml.Node {
	if ck.blank[n] {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line}
	}
	c := *n
	c.Content = make([]*yaml.Node, 0, len(n.Content))
	for i := 0; i < len(n.Content); i++ {
		if n.Kind == yaml.MappingNode && i+1 < len(n.Content) {
			if !ck.drop[n.Content[i]] {
				c.Content = append(c.Content, pruned(n.Content[i], ck), pruned(n.Content[i+1], ck))
			}
			i++
			continue
		}
		c.Content = append(c.Content, pruned(n.Content[i], ck))
	}
	return &c
}

// nodeAt finds the node of a key path like "workers[1].metrics" or
// "thresholds.kv_usage_high": the key's node for a mapping entry, the item
// for a list index. nil when the file does not hold it.
func nodeAt(root *yaml.Node, path string) *yaml.Node {
	if root == nil || path == "" {
		return nil
	}
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	var at *yaml.Node
	for _, part := range strings.Split(path, ".") {
		name, rest, indexed := strings.Cut(part, "[")
		k, v := lookup(resolve(n), name)
		if k == nil {
			return nil
		}
		at, n = k, resolve(v)
		if !indexed {
			continue
		}
		for _, s := range strings.Split(strings.TrimSuffix(rest, "]"), "][") {
			i, err := strconv.Atoi(s)
			if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
				return nil
			}
			at, n = n.Content[i], resolve(n.Content[i])
		}
	}
	return at
}

// lookup finds a key in a mapping, through <<: merges (each mapping
// looked in once: a merge may name a mapping it is inside).
func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	return lookupIn(m, key, map[*yaml.Node]bool{})
}

func lookupIn(m *yaml.Node, key string, seen map[*yaml.Node]bool) (k, v *yaml.Node) {
	if m.Kind != yaml.MappingNode || seen[m] {
		return nil, nil
	}
	seen[m] = true
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i].ShortTag() != "!!merge" {
			return m.Content[i], m.Content[i+1]
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].ShortTag() == "!!merge" {
			if k, v := lookupIn(resolve(m.Content[i+1]), key, seen); k != nil {
				return k, v
			}
		}
	}
	return nil, nil
}

// envSettings reads the KVTOP_* variable of every scalar key: valid values
// are returned by key for viper to bind, invalid ones are errors naming the
// variable, empty ones a warning.
func envSettings() (set map[string]string, errs Errors, warnings []string) {
	set = map[string]string{}
	for _, k := range scalarKeys {
		val, ok := os.LookupEnv(k.env)
		if !ok {
			continue
		}
		if val == "" {
			warnings = append(warnings, k.env+" is set but empty: ignored")
			continue
		}
		if reason := checkScalar(k.kind, val); reason != "" {
			errs = append(errs, &Error{Env: k.env, Key: k.key, Reason: reason})
			continue
		}
		set[k.key] = k.env
	}
	return set, errs, warnings
}

// envWarnings names every KVTOP_* variable that sets nothing, with the
// closest real one as a hint. Variables the config names as bearer token
// sources are the operator's own and are left alone. Values are never
// shown: a mistyped variable may hold a secret.
func envWarnings(environ []string, tokenVars map[string]bool) []string {
	known := EnvVars()
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || tokenVars[name] || contains(known, name) {
			continue
		}
		key := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
		f := schema.field(key)
		if head, _, ok := strings.Cut(key, "_"); f == nil && ok {
			// KVTOP_WORKERS_0_NAME, KVTOP_COLORS_WARN: inside a list or a map
			if h := schema.field(head); h != nil && (h.kind == kList || h.kind == kMap) {
				f = h
			}
		}
		var msg string
		switch {
		case name == EnvPrefix+"CONFIG":
			msg = name + " is not a kvtop setting (name the config file with --config)"
		case f != nil && (f.kind == kList || f.kind == kMap):
			msg = fmt.Sprintf("%s is not a kvtop setting: %s can only be set in the config file", name, f.name)
		case f != nil && f.kind == kSection:
			msg = fmt.Sprintf("%s is not a kvtop setting: set one key of %s, like %s", name, f.name, envName(f.name+"."+f.sub.fields[0].name))
		default:
			msg = name + " is not a kvtop setting"
			if c := closest(name, known); c != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", c)
			}
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// closest returns the known key within edit distance 2 of k, if any.
func closest(k string, keys []string) string {
	best, bestD := "", 3
	for _, c := range keys {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
