package decisions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// decodeObject decodes one JSON object keeping numbers exact (json.Number):
// Dynamo worker ids are uint64 values well above 2^53.
func decodeObject(line []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, jsonError(err)
	}
	if obj == nil {
		return nil, errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not JSON: data after the object")
	}
	return obj, nil
}

// jsonError rewrites a decoding error so it names a position or a field,
// never a value from the line (it may be prompt text).
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn) && syn.Error() == "unexpected end of JSON input":
		return errors.New("not JSON: truncated")
	case errors.As(err, &syn):
		return fmt.Errorf("not JSON: syntax error at byte %d", syn.Offset)
	case errors.As(err, &typ):
		got, _, _ := strings.Cut(typ.Value, " ") // "number 1e999" → "number"
		if typ.Field == "" {
			return fmt.Errorf("not a JSON object (got %s)", got)
		}
		return fmt.Errorf("field %s: want %s, got %s", typ.Field, jsonKind(typ.Type.String()), got)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not JSON: truncated")
	}
	return errors.New("not JSON")
}

func jsonKind(goType string) string {
	switch strings.TrimLeft(goType, "*") {
	case "string":
		return "string"
	case "float64", "int", "int64", "uint64":
		return "number"
	case "bool":
		return "boolean"
	}
	if strings.HasPrefix(goType, "[]") {
		return "array"
	}
	return "object"
}

func has(obj map[string]any, key string) bool {
	_, ok := obj[key]
	return ok
}

// str returns a string field, or a number field's literal text ("" when
// absent, null or of another type).
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	return ""
}

// num returns a numeric field (a number, or a string holding one).
func num(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil && finite(f)
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil && finite(f)
	}
	return 0, false
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
