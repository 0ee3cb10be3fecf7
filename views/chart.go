package views

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NimbleMarkets/ntcharts/canvas"
	"github.com/NimbleMarkets/ntcharts/canvas/graph"
	"github.com/NimbleMarkets/ntcharts/linechart"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// chartSpec is one time series panel on the Worker screen.
type chartSpec struct {
	title   string
	short   string // title in the one-line form
	pts     []snapshot.Point
	percent bool // values are fractions 0..1, labelled in %
	now     string
	role    themes.Role // the line's: Spark, or Dim for last-known data
	// more are further lines drawn dim behind the main one (TTFT's p50
	// and p99 around its p95); the scale covers them too.
	more [][]snapshot.Point
	// ms: values are milliseconds (axis in ms, or s from 1 s up);
	// nowShort is now in the one-line form, when now is too long for it.
	ms       bool
	nowShort string
}

// peak is the largest value of the spec's lines.
func (c chartSpec) peak() float64 {
	m := seriesMax(c.pts)
	for _, pts := range c.more {
		m = max(m, seriesMax(pts))
	}
	return m
}

// chart draws a series over the window with ntcharts: explicit time and
// value ranges (its auto range only grows), whole-second time stamps, and
// x labels relative to the snapshot ("-60s", "now") so the picture depends
// on the snapshot alone. The chart's canvas is reused between frames
// (chartCanvas); everything on it is set and drawn anew each time.
func chart(c chartSpec, end time.Time, window time.Duration, w, h int, th *themes.Theme) []string {
	title := line{{" " + c.title, themes.Title}, {"  now " + c.now, themes.Dim}}.render(th, w)
	out := []string{title}
	ch := h - 1
	if ch < 3 || w < 20 {
		return out
	}
	start := end.Add(-window).Truncate(time.Second)
	end = end.Truncate(time.Second)
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	// Four y steps on a graph a multiple of 4 rows high keep the labels
	// round: 0 25 50 75 100%, or multiples of ymax/4 for counts.
	gh := (ch - 2) / 4 * 4
	if gh < 4 {
		gh = ch - 2
	}
	ch = gh + 2
	ystep := max(1, gh/4)
	ymax := 1.0
	yfmt := func(_ int, v float64) string { return fmt.Sprintf("%.0f%%", v*100) }
	if !c.percent {
		ymax = math.Max(4, math.Ceil(c.peak()*1.1/4)*4)
		yfmt = func(_ int, v float64) string { return numf(math.Round(v)) }
		if c.ms && ymax >= 1000 {
			yfmt = func(_ int, v float64) string {
				if v == 0 {
					return "0"
				}
				return strconv.FormatFloat(v/1000, 'f', 1, 64) + "s"
			}
		}
	}
	xfmt := func(_ int, v float64) string {
		d := end.Unix() - int64(v)
		if d <= 0 {
			return "now"
		}
		return fmt.Sprintf("-%ds", d)
	}
	charts.Lock()
	defer charts.Unlock()
	cc := charts.get(w, ch)
	lc := &cc.lc
	lc.XLabelFormatter, lc.YLabelFormatter = xfmt, yfmt
	lc.SetXStep(max(8, (w-8)/4))
	lc.SetYStep(ystep)
	lc.SetXYRange(float64(start.Unix()), float64(end.Unix()), 0, ymax)
	lc.SetViewXYRange(float64(start.Unix()), float64(end.Unix()), 0, ymax)
	lc.UpdateGraphSizes()
	lc.DrawXYAxisAndLabel() // on a blank canvas: paint clears what it reads
	cc.dots, cc.more = cc.blank(cc.dots), cc.blank(cc.more)
	cc.plot(cc.dots, c.pts, start, end, ymax)
	for _, pts := range c.more {
		cc.plot(cc.more, pts, start, end, ymax) // ORed: one dim layer
	}
	out = append(out, cc.paint(th, c.role)...)
	for len(out) < h {
		out = append(out, "")
	}
	return out
}

// chartCanvas is one chart size's ntcharts line chart, kept between
// frames with the braille dots of its line: a new line chart allocates a
// canvas of lipgloss-styled cells (most of what the worker screen cost),
// and reusing one does not. A chart is drawn and read out whole under the
// cache's lock, and reading clears what was drawn, so what it shows
// depends on its inputs alone.
type chartCanvas struct {
	lc    linechart.Model
	grids map[[2]int]*graph.BrailleGrid // by graph area: maps points to dots
	dots  []uint8                       // braille dots of the graph area's cells, row by row
	more  []uint8                       // the dim lines' dots, the same way (none: empty)
	pts   []canvas.Float64Point
}

// charts are the canvases by size. A resize adds sizes; past a few the
// cache starts over, so it stays bounded.
var charts = chartCache{bySize: map[[2]int]*chartCanvas{}}

type chartCache struct {
	sync.Mutex
	bySize map[[2]int]*chartCanvas
}

const maxChartSizes = 8

func (c *chartCache) get(w, h int) *chartCanvas {
	k := [2]int{w, h}
	if cc := c.bySize[k]; cc != nil {
		return cc
	}
	if len(c.bySize) >= maxChartSizes {
		clear(c.bySize)
	}
	cc := &chartCanvas{lc: linechart.New(w, h, 0, 1, 0, 1), grids: map[[2]int]*graph.BrailleGrid{}}
	c.bySize[k] = cc
	return cc
}

// The braille dot bits of a cell, by dot column and row.
var brailleBits = [2][4]uint8{{0x01, 0x02, 0x04, 0x40}, {0x08, 0x10, 0x20, 0x80}}

// blank returns d sized to the graph area's cells, all dots off.
func (cc *chartCanvas) blank(d []uint8) []uint8 {
	n := max(cc.lc.GraphWidth()*cc.lc.GraphHeight(), 0)
	if cap(d) < n {
		return make([]uint8, n)
	}
	d = d[:n]
	clear(d)
	return d
}

// plot sets in dots (blank, or holding other lines: they OR) the braille
// dots of the points inside [start, end], the way ntcharts' time series
// chart draws them: each point joined to the next, in the graph area right
// of the y axis. Values are held inside [0, ymax].
func (cc *chartCanvas) plot(dots []uint8, pts []snapshot.Point, start, end time.Time, ymax float64) {
	lc := &cc.lc
	gw, gh := lc.GraphWidth(), lc.GraphHeight()
	xs := float64(gw) / (lc.ViewMaxX() - lc.ViewMinX())
	ys := float64(lc.Origin().Y) / (lc.ViewMaxY() - lc.ViewMinY())
	cc.pts = cc.pts[:0]
	for _, p := range pts {
		if p.T.Before(start) || p.T.After(end) {
			continue
		}
		x := float64(p.T.Truncate(time.Second).Unix())
		y := math.Max(0, math.Min(p.V, ymax))
		if math.IsNaN(p.V) {
			y = 0
		}
		cc.pts = append(cc.pts, canvas.Float64Point{X: (x - lc.ViewMinX()) * xs, Y: (y - lc.ViewMinY()) * ys})
	}
	if len(cc.pts) == 0 || gw <= 0 || gh <= 0 {
		return
	}
	g := cc.grids[[2]int{gw, gh}]
	if g == nil {
		g = graph.NewBrailleGrid(gw, gh, 0, float64(gw), 0, float64(gh))
		cc.grids[[2]int{gw, gh}] = g
	}
	for i, p1 := range cc.pts {
		p2 := cc.pts[min(i+1, len(cc.pts)-1)]
		if (p1.X < 0 && p2.X < 0) || (p1.X > float64(gw) && p2.X > float64(gw)) {
			continue
		}
		for _, d := range graph.GetLinePoints(g.GridPoint(p1), g.GridPoint(p2)) {
			if d.X >= 0 && d.X < 2*gw && d.Y >= 0 && d.Y < 4*gh {
				dots[d.Y/4*gw+d.X/2] |= brailleBits[d.X%2][d.Y%4]
			}
		}
	}
}

// cellRole is what an axis or label cell shows, told by its rune: the axes
// are box drawing, the labels text.
func cellRole(r rune) themes.Role {
	if r >= 0x2500 && r <= 0x257F {
		return themes.Border
	}
	return themes.Dim
}

// paint reads the chart out as painted lines: the axes and labels from the
// canvas (clearing each cell it reads, so the canvas is blank for the next
// chart), the line from the dots, in lineRole. ntcharts' own View renders
// every cell through lipgloss (milliseconds per chart); painting runs of
// cells with the theme's precomputed codes does not.
func (cc *chartCanvas) paint(th *themes.Theme, lineRole themes.Role) []string {
	c := &cc.lc.Canvas
	gw, gh := cc.lc.GraphWidth(), cc.lc.GraphHeight()
	left := c.Width() - gw // the y labels and axis; the graph area is right of them
	out := make([]string, 0, c.Height())
	run := make([]rune, 0, c.Width())
	for y := 0; y < c.Height(); y++ {
		var b strings.Builder
		role := themes.Text
		flush := func() {
			if len(run) > 0 {
				b.WriteString(th.Paint(role, string(run)))
				run = run[:0]
			}
		}
		for x := 0; x < c.Width(); x++ {
			var r rune
			cr := lineRole
			if y < gh && x >= left {
				// A cell the main line passes is its colour (with the dim
				// lines' dots in it too); one only they pass is dim.
				if d, m := cc.dots[y*gw+x-left], cc.more[y*gw+x-left]; d != 0 {
					r = 0x2800 + rune(d|m)
				} else if m != 0 {
					r, cr = 0x2800+rune(m), themes.Dim
				}
			} else if p := (canvas.Point{X: x, Y: y}); c.Cell(p).Rune != 0 {
				r = c.Cell(p).Rune
				cr = cellRole(r)
				c.SetCell(p, canvas.Cell{})
			}
			if r == 0 {
				run = append(run, ' ')
				continue
			}
			if cr != role {
				flush()
				role = cr
			}
			run = append(run, r)
		}
		flush()
		out = append(out, strings.TrimRight(b.String(), " "))
	}
	return out
}

// sparkRow is the compact form of a chart on small terminals: one line
// with its title, a sparkline over the window and the current value.
func sparkRow(c chartSpec, end time.Time, window time.Duration, w int, th *themes.Theme) string {
	maxv := 1.0 // fractions: 0..1 fixed
	if !c.percent {
		maxv = countScale(seriesMax(c.pts))
	}
	const titleW = 8
	const nowW, peakW = 9, 15
	sw := w - titleW - nowW - peakW - 5
	if sw < 4 {
		return line{{" " + fit(c.short, titleW, false), themes.Title}, {" " + c.oneLineNow(), themes.Text}}.render(th, w)
	}
	// The label is the peak over the window and the scale when it is
	// above the peak: "max 1 of 4" says why one request draws a low bar.
	var peak string
	switch m := seriesMax(c.pts); {
	case c.percent:
		peak = "0–100%"
	case len(c.pts) == 0:
		peak = "no data"
	case c.ms:
		peak = "max " + latText(m, false)
	case m < maxv:
		peak = "max " + numf(m) + " of " + numf(maxv)
	default:
		peak = "max " + numf(m)
	}
	return line{
		{" " + fit(c.short, titleW, false) + " ", themes.Title},
		{sparkline(c.pts, end, window, sw, maxv), c.role},
		{" " + fit(c.oneLineNow(), nowW, true), themes.Text},
		{" " + fit(peak, peakW, false), themes.Dim},
	}.render(th, w)
}

func (c chartSpec) oneLineNow() string {
	if c.nowShort != "" {
		return c.nowShort
	}
	return c.now
}

// sparkFloor is the least top of a count sparkline's scale, so that one
// waiting request does not draw a full bar.
const sparkFloor = 4

// countScale is the top of a count sparkline's scale for a peak: the
// first of 4, 6, 8, 12, 16, 24, 32… at or above it. A scale that followed
// the peak itself would move whenever the peak did (another worker's
// queue, an old point leaving the window), and a steady value would
// flicker between two glyphs; this one moves only when the peak crosses a
// step, and leaves at most half the height as headroom.
func countScale(peak float64) float64 {
	s, half := float64(sparkFloor), true
	for s < peak && !math.IsInf(s, 0) {
		if half {
			s *= 1.5
		} else {
			s = s / 3 * 4
		}
		half = !half
	}
	return s
}
