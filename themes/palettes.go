package themes

// spec is how one role looks: ANSI colours (0–15 in the built-in palettes,
// so the terminal's own scheme decides the exact shade) and attributes.
type spec struct {
	fg, bg  string
	bold    bool
	reverse bool
	under   bool
}

type palette [numRoles]spec

// names lists the built-in themes in the order `t` cycles through them.
var names = []string{"default", "dark", "light", "high-contrast", "mono"}

// Names lists the built-in themes.
func Names() []string { return append([]string(nil), names...) }

var palettes = map[string]palette{
	// default uses the 16 ANSI colours and attributes only, so it follows
	// whatever scheme (dark or light) the terminal has.
	"default": {
		Header:    {bold: true},
		Title:     {bold: true},
		Dim:       {fg: "8"},
		OK:        {fg: "2"},
		Warn:      {fg: "3", bold: true},
		Crit:      {fg: "1", bold: true},
		Selected:  {reverse: true},
		Border:    {fg: "8"},
		BarFull:   {fg: "6"},
		BarEmpty:  {fg: "8"},
		Spark:     {fg: "4"},
		Heat0:     {fg: "8"},
		Heat1:     {fg: "4"},
		Heat2:     {fg: "6"},
		Heat3:     {fg: "3"},
		Heat4:     {fg: "1", bold: true},
		Tab:       {fg: "8"},
		TabActive: {reverse: true, bold: true},
		Key:       {fg: "6", bold: true},
	},
	// dark assumes a dark background: bright colours.
	"dark": {
		Text:      {fg: "7"},
		Header:    {fg: "15", bold: true},
		Title:     {fg: "14", bold: true},
		Dim:       {fg: "8"},
		OK:        {fg: "10"},
		Warn:      {fg: "11", bold: true},
		Crit:      {fg: "9", bold: true},
		Selected:  {fg: "0", bg: "6"},
		Border:    {fg: "8"},
		BarFull:   {fg: "14"},
		BarEmpty:  {fg: "8"},
		Spark:     {fg: "12"},
		Heat0:     {fg: "8"},
		Heat1:     {fg: "12"},
		Heat2:     {fg: "14"},
		Heat3:     {fg: "11"},
		Heat4:     {fg: "9", bold: true},
		Tab:       {fg: "7"},
		TabActive: {fg: "0", bg: "14", bold: true},
		Key:       {fg: "14", bold: true},
	},
	// light assumes a light background: dark colours, no bright yellow.
	"light": {
		Text:      {fg: "0"},
		Header:    {fg: "0", bold: true},
		Title:     {fg: "4", bold: true},
		Dim:       {fg: "8"},
		OK:        {fg: "2"},
		Warn:      {fg: "3", bold: true},
		Crit:      {fg: "1", bold: true},
		Selected:  {fg: "15", bg: "4"},
		Border:    {fg: "8"},
		BarFull:   {fg: "4"},
		BarEmpty:  {fg: "7"},
		Spark:     {fg: "4"},
		Heat0:     {fg: "7"},
		Heat1:     {fg: "4"},
		Heat2:     {fg: "6"},
		Heat3:     {fg: "3"},
		Heat4:     {fg: "1", bold: true},
		Tab:       {fg: "8"},
		TabActive: {fg: "15", bg: "4", bold: true},
		Key:       {fg: "4", bold: true},
	},
	// high-contrast: bright text, warnings and criticals on solid backgrounds.
	"high-contrast": {
		Text:      {fg: "15"},
		Header:    {fg: "15", bold: true},
		Title:     {fg: "15", bold: true, under: true},
		Dim:       {fg: "7"},
		OK:        {fg: "10", bold: true},
		Warn:      {fg: "0", bg: "11", bold: true},
		Crit:      {fg: "15", bg: "1", bold: true},
		Selected:  {reverse: true, bold: true},
		Border:    {fg: "15"},
		BarFull:   {fg: "15"},
		BarEmpty:  {fg: "8"},
		Spark:     {fg: "14"},
		Heat0:     {fg: "8"},
		Heat1:     {fg: "12"},
		Heat2:     {fg: "14"},
		Heat3:     {fg: "11", bold: true},
		Heat4:     {fg: "9", bold: true},
		Tab:       {fg: "15"},
		TabActive: {reverse: true, bold: true},
		Key:       {fg: "11", bold: true},
	},
	// mono has no colour at all: bold and reverse carry the emphasis, and
	// words and glyphs carry the meaning.
	"mono": {
		Header:    {bold: true},
		Title:     {bold: true},
		Warn:      {bold: true},
		Crit:      {bold: true, reverse: true},
		Selected:  {reverse: true},
		Heat3:     {bold: true},
		Heat4:     {bold: true},
		TabActive: {reverse: true, bold: true},
		Key:       {bold: true},
	},
}
