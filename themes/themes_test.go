package themes

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// withProfile forces a colour profile for one test; lipgloss keeps it globally.
func withProfile(t *testing.T, p termenv.Profile) {
	t.Helper()
	old := lipgloss.ColorProfile()
	lipgloss.SetColorProfile(p)
	t.Cleanup(func() { lipgloss.SetColorProfile(old) })
}

func TestNamesAllLoad(t *testing.T) {
	withProfile(t, termenv.ANSI256)
	t.Setenv("NO_COLOR", "")
	want := []string{"default", "dark", "light", "high-contrast", "mono"}
	if got := Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		th, err := Load(n, nil)
		if err != nil {
			t.Fatalf("Load(%q): %v", n, err)
		}
		if th.Name != n {
			t.Errorf("Load(%q).Name = %q", n, th.Name)
		}
		// Crit must stand out in every theme, colour or not.
		if got := th.Paint(Crit, "down"); got == "down" || !strings.Contains(got, "down") {
			t.Errorf("%s: crit paints %q, want an escape-wrapped 'down'", n, got)
		}
		if th.Plain() {
			t.Errorf("%s: Plain() on a 256-colour terminal", n)
		}
	}
	if th, _ := Load("", nil); th.Name != "default" {
		t.Errorf(`Load("") = %q, want default`, th.Name)
	}
}

var colourSGR = regexp.MustCompile(`\x1b\[[0-9;]*(3[0-7]|9[0-7]|4[0-7]|10[0-7]|38;|48;)`)

func TestMonoHasNoColour(t *testing.T) {
	withProfile(t, termenv.TrueColor)
	t.Setenv("NO_COLOR", "")
	th, err := Load("mono", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Roles() {
		out := th.Paint(r, "x")
		if colourSGR.MatchString(out) {
			t.Errorf("mono %s paints a colour: %q", r, out)
		}
	}
	if got := th.Paint(Selected, "row"); !strings.Contains(got, "7m") && !strings.Contains(got, ";7") {
		t.Errorf("mono selected = %q, want reverse video", got)
	}
}

func TestNoColorDropsEverything(t *testing.T) {
	withProfile(t, termenv.TrueColor)
	t.Setenv("NO_COLOR", "1")
	for _, n := range Names() {
		th, err := Load(n, map[string]string{"crit": "#ff0000"})
		if err != nil {
			t.Fatal(err)
		}
		if !th.NoColor || !th.Plain() {
			t.Fatalf("%s with NO_COLOR: NoColor=%v Plain=%v", n, th.NoColor, th.Plain())
		}
		for _, r := range Roles() {
			if got := th.Paint(r, "w3"); got != "w3" {
				t.Errorf("%s %s with NO_COLOR paints %q, want plain (no bold or reverse either)", n, r, got)
			}
		}
	}
	// An empty NO_COLOR does not count (no-color.org: "present and not empty").
	t.Setenv("NO_COLOR", "")
	th, _ := Load("default", nil)
	if th.NoColor || th.Plain() {
		t.Error("empty NO_COLOR turned colour off")
	}
}

func TestOverrides(t *testing.T) {
	withProfile(t, termenv.TrueColor)
	t.Setenv("NO_COLOR", "")
	th, err := Load("default", map[string]string{
		"crit":     "#ff0000",
		"ok":       "bright-green",
		"selected": "4",
		"warn":     "#fa0",
		"dim":      "245",
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		role Role
		want string
	}{
		{Crit, "38;2;255;0;0"},
		{OK, "92"},       // bright green foreground
		{Selected, "44"}, // blue background, not a foreground
		{Warn, "38;2;255;170;0"},
		{Dim, "38;5;245"},
	}
	for _, c := range cases {
		if got := th.Paint(c.role, "x"); !strings.Contains(got, c.want) {
			t.Errorf("%s = %q, want it to contain %q", c.role, got, c.want)
		}
	}
	// The override must not leak into other loads of the same palette.
	plain, _ := Load("default", nil)
	if strings.Contains(plain.Paint(Crit, "x"), "255;0;0") {
		t.Error("override leaked into the shared palette")
	}
}

func TestLoadErrors(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	cases := []struct {
		name      string
		theme     string
		overrides map[string]string
		want      []string
	}{
		{"unknown theme", "solarized", nil, []string{`"solarized"`, "default, dark, light, high-contrast, mono"}},
		{"unknown role", "dark", map[string]string{"critical": "red"}, []string{`"critical"`, "unknown role", "crit"}},
		{"bad hex", "dark", map[string]string{"ok": "#12345"}, []string{"colors.ok", `"#12345"`, "#rrggbb"}},
		{"ansi out of range", "light", map[string]string{"warn": "300"}, []string{"colors.warn", `"300"`, "0–255"}},
		{"bad name", "default", map[string]string{"spark": "purpleish"}, []string{"colors.spark", `"purpleish"`, "red"}},
		{"negative", "default", map[string]string{"dim": "-1"}, []string{"colors.dim", `"-1"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.theme, c.overrides)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseColor(t *testing.T) {
	ok := map[string]string{
		"#FF8800": "#ff8800", "#f80": "#ff8800", "0": "0", "255": "255", " 42 ": "42",
		"red": "1", "Bright-Blue": "12", "bright_white": "15", "grey": "8", "gray": "8",
	}
	for in, want := range ok {
		got, err := ParseColor(in)
		if err != nil || got != want {
			t.Errorf("ParseColor(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "#", "#ggg", "#1234567", "256", "1.5", "reddish", "rgb(1,2,3)"} {
		if _, err := ParseColor(bad); err == nil {
			t.Errorf("ParseColor(%q) accepted", bad)
		}
	}
}

func TestAsciiProfileIsPlain(t *testing.T) {
	withProfile(t, termenv.Ascii)
	t.Setenv("NO_COLOR", "")
	th, err := Load("high-contrast", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !th.Plain() || th.Paint(Crit, "down") != "down" {
		t.Errorf("ascii profile still emits escapes: %q", th.Paint(Crit, "down"))
	}
}

func TestRolesHaveNamesAndLegend(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Roles() {
		if r.String() == "" || r.Description() == "" {
			t.Errorf("role %d lacks a name or description", r)
		}
		if seen[r.String()] {
			t.Errorf("duplicate role name %q", r)
		}
		seen[r.String()] = true
		if back, ok := RoleByName(r.String()); !ok || back != r {
			t.Errorf("RoleByName(%q) = %v, %v", r, back, ok)
		}
	}
	if HeatRole(-3) != Heat0 || HeatRole(2) != Heat2 || HeatRole(99) != Heat4 {
		t.Error("HeatRole does not clamp")
	}
}

// FuzzParseColor: any value from a config either parses to a colour lipgloss
// understands or is refused with a message that quotes it.
func FuzzParseColor(f *testing.F) {
	for _, s := range []string{"#ff8800", "#f80", "0", "255", "256", "-1", "red", "bright-blue", "gray", "#", "#gggggg", "", " 7 ", "rgb(1,2,3)", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, err := ParseColor(v)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
				t.Fatalf("error %q does not quote the value %q", err, v)
			}
			return
		}
		if !regexp.MustCompile(`^(#[0-9a-f]{6}|[0-9]{1,3})$`).MatchString(c) {
			t.Fatalf("ParseColor(%q) = %q, not a lipgloss colour", v, c)
		}
	})
}
