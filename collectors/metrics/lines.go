package metrics

import (
	"bytes"
	"hash/maphash"
)

// Byte-level helpers of the prefilter. They look at one line of a page
// and never allocate.

// nameLen is the length of the metric name at the start of line
// ([a-zA-Z_:][a-zA-Z0-9_:]*), 0 if there is none.
func nameLen(line []byte) int {
	for i, c := range line {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == ':':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return i
		}
	}
	return len(line)
}

// looksLikeSample checks what follows a name: optional labels, blanks, and
// something that starts like a number. It is a cheap guard that tells an
// HTML or JSON body from a metrics page; the text parser has the last word
// on the lines kvtop keeps.
func looksLikeSample(rest []byte) bool {
	if len(rest) == 0 {
		return false
	}
	switch rest[0] {
	case '{':
		j := bytes.LastIndexByte(rest, '}')
		if j < 0 {
			return false
		}
		rest = rest[j+1:]
	case ' ', '\t':
	default:
		return false
	}
	rest = trimBlank(rest)
	if len(rest) == 0 {
		return false
	}
	switch c := rest[0]; {
	case c >= '0' && c <= '9', c == '+', c == '-', c == '.', c == 'N', c == 'n', c == 'I', c == 'i':
		return true
	}
	return false
}

// cutAfterValue drops what OpenMetrics may put after a sample's value (a
// timestamp in seconds, an exemplar) and the classic parser would reject.
func cutAfterValue(line []byte, nameEnd int) []byte {
	i := nameEnd
	if i < len(line) && line[i] == '{' {
		i = labelsEnd(line, i)
		if i < 0 {
			return line // let the parser report it
		}
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	for i < len(line) && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	return line[:i]
}

// labelsEnd returns the index just past the '}' closing the label set that
// opens at line[open], honouring quotes and escapes; -1 if unclosed.
func labelsEnd(line []byte, open int) int {
	quoted := false
	for i := open + 1; i < len(line); i++ {
		switch c := line[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i + 1
		}
	}
	return -1
}

// hasLabel reports whether the label set at the start of rest has a label
// with this name (only label-name positions count, not values).
func hasLabel(rest []byte, name string) bool {
	end := labelsEnd(rest, 0)
	if end < 0 {
		return false
	}
	set := rest[1 : end-1]
	for i := 0; i < len(set); {
		for i < len(set) && (set[i] == ' ' || set[i] == ',') {
			i++
		}
		j := i
		for j < len(set) && set[j] != '=' && set[j] != ' ' {
			j++
		}
		if string(set[i:j]) == name {
			return true
		}
		// skip the quoted value
		k := bytes.IndexByte(set[j:], '"')
		if k < 0 {
			return false
		}
		k += j + 1
		for k < len(set) && set[k] != '"' {
			if set[k] == '\\' {
				k++
			}
			k++
		}
		i = k + 1
	}
	return false
}

func trimBlank(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// scanLabels walks the label set at the start of rest (if there is one)
// once. It returns the sum of the hashes of its name="value" pairs (the
// same for one series whatever order its labels are listed in) and the
// raw value of the label named id (nil when absent). ok is false for a
// label set the text parser will reject anyway.
func scanLabels(rest []byte, seed maphash.Seed, id string) (sum uint64, idVal []byte, ok bool) {
	if len(rest) == 0 || rest[0] != '{' {
		return 0, nil, true
	}
	for i := 1; ; {
		name, value, pair, next := nextLabel(rest, i)
		switch next {
		case labelsDone:
			return sum, idVal, true
		case labelsBad:
			return 0, nil, false
		}
		if id != "" && string(name) == id {
			idVal = value
		}
		sum += maphash.Bytes(seed, pair)
		i = next
	}
}

// labelValue returns the value, unescaped, of the label called name in
// the label set at the start of rest.
func labelValue(rest []byte, name string) (string, bool) {
	if len(rest) == 0 || rest[0] != '{' {
		return "", false
	}
	for i := 1; ; {
		n, value, _, next := nextLabel(rest, i)
		if next < 0 {
			return "", false
		}
		if string(n) == name {
			return unescape(value), true
		}
		i = next
	}
}

// nextLabel's ends of a label set.
const (
	labelsDone = -1 // the closing brace
	labelsBad  = -2 // something the text parser will reject
)

// nextLabel reads the label pair at rest[i:] (after blanks and a comma):
// its name, its raw (escaped) value, the whole name="value" text, and
// where the next one starts, or labelsDone / labelsBad.
func nextLabel(rest []byte, i int) (name, value, pair []byte, next int) {
	for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == ',') {
		i++
	}
	if i >= len(rest) {
		return nil, nil, nil, labelsBad
	}
	if rest[i] == '}' {
		return nil, nil, nil, labelsDone
	}
	start := i
	if rest[i] == '"' { // a quoted UTF-8 label name
		j := quotedEnd(rest, i)
		if j < 0 {
			return nil, nil, nil, labelsBad
		}
		name, i = rest[i+1:j-1], j
	} else {
		for i < len(rest) && rest[i] != '=' && rest[i] != ' ' && rest[i] != '\t' && rest[i] != '}' && rest[i] != ',' {
			i++
		}
		name = rest[start:i]
	}
	for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t') {
		i++
	}
	if i >= len(rest) || rest[i] != '=' {
		return nil, nil, nil, labelsBad
	}
	i++
	for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t') {
		i++
	}
	if i >= len(rest) || rest[i] != '"' {
		return nil, nil, nil, labelsBad
	}
	j := quotedEnd(rest, i)
	if j < 0 {
		return nil, nil, nil, labelsBad
	}
	return name, rest[i+1 : j-1], rest[start:j], j
}

// unescape undoes the text format's escapes in a label value.
func unescape(v []byte) string {
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v)
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' && i+1 < len(v) {
			i++
			switch c = v[i]; c {
			case 'n':
				c = '\n'
			case '\\', '"':
			default:
				out = append(out, '\\')
			}
		}
		out = append(out, c)
	}
	return string(out)
}

// quotedEnd returns the index just past the quote closing the string that
// opens at b[open], honouring escapes; -1 if unclosed.
func quotedEnd(b []byte, open int) int {
	for i := open + 1; i < len(b); {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		j += i
		k := j // an odd run of backslashes escapes the quote
		for k > i && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
	return -1
}
