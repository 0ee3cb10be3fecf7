package msgpack

// Type is the kind of value a type code starts.
type Type uint8

// The types of msgpack values. Invalid is 0xc1, the one code never used.
const (
	Invalid Type = iota
	Nil
	Bool
	Int // any integer, signed or not
	Float
	Str
	Bin
	Array
	Map
	Ext
)

var typeNames = [...]string{"invalid code", "nil", "bool", "integer", "float", "string", "bytes", "array", "map", "extension"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "unknown type"
}

// TypeOf is the type of the value a code starts.
func TypeOf(code byte) Type { return types[code] }

var types = func() (t [256]Type) {
	for i := range t {
		c := byte(i)
		switch {
		case c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3:
			t[i] = Int
		case c <= 0x8f || c == 0xde || c == 0xdf:
			t[i] = Map
		case c <= 0x9f || c == 0xdc || c == 0xdd:
			t[i] = Array
		case c <= 0xbf || c >= 0xd9 && c <= 0xdb:
			t[i] = Str
		case c == 0xc0:
			t[i] = Nil
		case c == 0xc2 || c == 0xc3:
			t[i] = Bool
		case c >= 0xc4 && c <= 0xc6:
			t[i] = Bin
		case c == 0xca || c == 0xcb:
			t[i] = Float
		case c == 0xc1:
			t[i] = Invalid
		default: // 0xc7..0xc9, 0xd4..0xd8
			t[i] = Ext
		}
	}
	return t
}()

// Signed reports an integer code that is a signed encoding (negative
// fixint, int8..int64), whatever its value.
func Signed(code byte) bool { return code >= 0xe0 || code >= 0xd0 && code <= 0xd3 }

// article is "an" before the names that start with a vowel.
func article(t Type) string {
	switch t {
	case Int, Array, Ext, Invalid:
		return "an"
	}
	return "a"
}
