package themes

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
)

// Theme is a palette turned into lipgloss styles. Styles are built once in
// Load; Paint then only concatenates precomputed escape sequences, which
// keeps rendering a 256-row table cheap.
type Theme struct {
	// Name is the built-in theme this was loaded from.
	Name string
	// NoColor is set when NO_COLOR is in the environment: every role is
	// plain text, without even bold or reverse.
	NoColor bool

	styles [numRoles]lipgloss.Style
	pre    [numRoles]string
	post   [numRoles]string
}

// Style returns the lipgloss style of a role.
func (t *Theme) Style(r Role) lipgloss.Style {
	if r < 0 || r >= numRoles {
		return lipgloss.NewStyle()
	}
	return t.styles[r]
}

// Paint styles s as role r. s must not contain newlines; callers truncate
// plain text first and paint after, so escape codes are never cut.
func (t *Theme) Paint(r Role, s string) string {
	if r < 0 || r >= numRoles || t.pre[r] == "" || s == "" {
		return s
	}
	return t.pre[r] + s + t.post[r]
}

// Plain reports whether the theme emits no escape codes at all (NO_COLOR,
// or a colour-less terminal profile).
func (t *Theme) Plain() bool {
	for r := range numRoles {
		if t.pre[r] != "" {
			return false
		}
	}
	return true
}

// NoColorSet reports whether NO_COLOR is set and non-empty
// (https://no-color.org).
func NoColorSet() bool { return os.Getenv("NO_COLOR") != "" }

// Load builds the named theme ("" means default) with colour overrides by
// role name. Values are "#rrggbb", "0".."255" or a colour name like "red"
// or "bright-blue". Unknown themes, roles and colours are errors that name
// the culprit. With NO_COLOR set the overrides are still checked, but the
// theme is plain text. Styles use lipgloss's current colour profile: set it
// (lipgloss.SetColorProfile) before loading if you need a specific one.
func Load(name string, overrides map[string]string) (*Theme, error) {
	if name == "" {
		name = "default"
	}
	pal, ok := palettes[name]
	if !ok {
		return nil, fmt.Errorf("theme %q is not one of %s", name, strings.Join(names, ", "))
	}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the first bad override deterministically
	for _, k := range keys {
		r, ok := RoleByName(k)
		if !ok {
			return nil, fmt.Errorf("theme colors: unknown role %q (roles: %s)", k, roleList())
		}
		c, err := ParseColor(overrides[k])
		if err != nil {
			return nil, fmt.Errorf("theme colors.%s: %w", k, err)
		}
		if bgRole(r) {
			pal[r].bg, pal[r].reverse = c, false
		} else {
			pal[r].fg = c
		}
	}
	t := &Theme{Name: name, NoColor: NoColorSet()}
	for r := range numRoles {
		st := lipgloss.NewStyle()
		if !t.NoColor {
			st = pal[r].style()
		}
		t.styles[r] = st
		t.pre[r], t.post[r] = split(st)
	}
	return t, nil
}

func (s spec) style() lipgloss.Style {
	st := lipgloss.NewStyle()
	if s.fg != "" {
		st = st.Foreground(lipgloss.Color(s.fg))
	}
	if s.bg != "" {
		st = st.Background(lipgloss.Color(s.bg))
	}
	if s.bold {
		st = st.Bold(true)
	}
	if s.reverse {
		st = st.Reverse(true)
	}
	if s.under {
		st = st.Underline(true)
	}
	return st
}

// marker is a private-use rune that lipgloss passes through untouched.
const marker = "\uE000"

// split renders a marker once and keeps what comes before and after it:
// the escape sequences that open and close the style.
func split(st lipgloss.Style) (pre, post string) {
	out := st.Render(marker)
	i := strings.Index(out, marker)
	if i < 0 {
		return "", ""
	}
	return out[:i], out[i+len(marker):]
}

func roleList() string {
	var b strings.Builder
	for r := range numRoles {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.String())
	}
	return b.String()
}

var colorNames = map[string]int{
	"black": 0, "red": 1, "green": 2, "yellow": 3, "blue": 4, "magenta": 5, "cyan": 6, "white": 7,
	"bright-black": 8, "gray": 8, "grey": 8, "bright-red": 9, "bright-green": 10, "bright-yellow": 11,
	"bright-blue": 12, "bright-magenta": 13, "bright-cyan": 14, "bright-white": 15,
}

// ParseColor checks a colour value and returns it in lipgloss form:
// "#rrggbb" (or "#rgb"), an ANSI index "0".."255", or a name from the 16
// ANSI colours ("red", "bright-blue", "gray").
func ParseColor(v string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	if n, ok := colorNames[strings.ReplaceAll(s, "_", "-")]; ok {
		return strconv.Itoa(n), nil
	}
	if strings.HasPrefix(s, "#") {
		hex := s[1:]
		if (len(hex) == 6 || len(hex) == 3) && isHex(hex) {
			if len(hex) == 3 {
				hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
			}
			return "#" + hex, nil
		}
		return "", fmt.Errorf("%q is not a colour: hex colours are #rrggbb or #rgb", v)
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n > 255 {
			return "", fmt.Errorf("%q is not a colour: ANSI colours are 0–255", v)
		}
		return strconv.Itoa(n), nil
	}
	return "", fmt.Errorf("%q is not a colour (use #rrggbb, 0–255, or a name like red, bright-blue, gray)", v)
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
