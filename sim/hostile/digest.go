package hostile

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The parts of kvtop's snapshot JSON (README: the contract for scripts)
// the digest reads. Decoded here, not from package pool: what is read is
// what a script would read.
type snapshot struct {
	At   time.Time `json:"at"`
	Pool struct {
		Workers   int  `json:"workers"`
		Up        int  `json:"up"`
		Blocks    *int `json:"blocks"`
		IndexFull bool `json:"index_full"`
		HitRate   struct {
			Tokens *float64 `json:"tokens"`
			Reason string   `json:"reason"`
		} `json:"prefix_hit_rate"`
	} `json:"pool"`
	Workers []struct {
		Name          string     `json:"name"`
		Up            bool       `json:"up"`
		Error         *string    `json:"error"`
		State         string     `json:"state"`
		Reason        string     `json:"reason"`
		Queue         *float64   `json:"queue"`
		Running       *float64   `json:"running"`
		Blocks        *int       `json:"blocks"`
		IndexComplete bool       `json:"index_complete"`
		IndexFull     bool       `json:"index_full"`
		Restarts      int        `json:"restarts"`
		LastScrapeOK  *time.Time `json:"last_scrape_ok"`
		Invalid       []struct {
			Engine, Field, Note string
		} `json:"invalid"`
		HitRate struct {
			Tokens *float64 `json:"tokens"`
			Reason string   `json:"reason"`
		} `json:"prefix_hit_rate"`
		Engines []struct {
			Engine    string   `json:"engine"`
			HitTokens *float64 `json:"hit_tokens"`
			HitReason string   `json:"hit_reason"`
		} `json:"engines"`
		Streams []struct {
			State           string `json:"state"`
			Batches         uint64 `json:"batches"`
			Gaps            uint64 `json:"gaps"`
			Missing         uint64 `json:"missing"`
			Replayed        uint64 `json:"replayed"`
			Lost            uint64 `json:"lost"`
			Restarts        uint64 `json:"restarts"`
			Oversized       uint64 `json:"oversized"`
			Dropped         uint64 `json:"dropped"`
			Blocks          int    `json:"blocks"`
			UnknownRemovals uint64 `json:"unknown_removals"`
			DroppedBlocks   uint64 `json:"dropped_blocks"`
			History         []struct {
				Kind string `json:"kind"`
				Lost uint64 `json:"lost"`
				Note string `json:"note"`
			} `json:"history"`
		} `json:"streams"`
	} `json:"workers"`
	Errors []struct {
		Source string `json:"source"`
		Kind   string `json:"kind"`
		Count  int    `json:"count"`
		Last   string `json:"last"`
	} `json:"errors"`
	Alerts []struct {
		Kind    string `json:"kind"`
		Subject string `json:"subject"`
		Text    string `json:"text"`
	} `json:"alerts"`
}

// Digest says what kvtop's snapshot (JSON) tells the operator about the
// hostile workers, one line per fact, and how the other workers fared.
func Digest(snapshotJSON []byte, hostile []string) ([]string, error) {
	var s snapshot
	if err := json.Unmarshal(snapshotJSON, &s); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	others, othersUp, oldest := 0, 0, time.Duration(0)
	for _, w := range s.Workers {
		if !slices.Contains(hostile, w.Name) {
			others++
			if w.Up {
				othersUp++
			}
			if w.LastScrapeOK != nil {
				oldest = max(oldest, s.At.Sub(*w.LastScrapeOK))
			}
			continue
		}
		line := fmt.Sprintf("%s: state %s", w.Name, w.State)
		if w.Reason != "" {
			line += fmt.Sprintf(" (%s)", w.Reason)
		}
		if w.Error != nil {
			line += fmt.Sprintf("; error %q", *w.Error)
		}
		if w.IndexFull {
			line += "; index_full"
		}
		if w.Restarts > 0 {
			line += fmt.Sprintf("; restarts %d", w.Restarts)
		}
		if w.Up {
			line += fmt.Sprintf("; queue %s running %s hit %s", num(w.Queue), num(w.Running), num(w.HitRate.Tokens))
			if w.HitRate.Reason != "" {
				line += fmt.Sprintf(" (%s)", w.HitRate.Reason)
			}
		}
		add("%s", line)
		for _, iv := range w.Invalid {
			add("  invalid %s engine %q: %s", iv.Field, iv.Engine, iv.Note)
		}
		for _, st := range w.Streams {
			add("  stream %s: %d batches, gaps %d, replayed %d, lost %d, restarts %d, oversized %d, dropped %d, blocks %d, dropped_blocks %d, unknown_removals %d",
				st.State, st.Batches, st.Gaps, st.Replayed, st.Lost, st.Restarts, st.Oversized, st.Dropped, st.Blocks, st.DroppedBlocks, st.UnknownRemovals)
			kinds := map[string]int{}
			var notes []string
			for _, h := range st.History {
				kinds[h.Kind]++
				if h.Note != "" && !slices.Contains(notes, h.Note) {
					notes = append(notes, h.Note)
				}
			}
			if len(kinds) > 0 {
				add("  history: %s", counts(kinds))
			}
			for _, n := range notes[max(0, len(notes)-3):] {
				add("  history note: %s", n)
			}
		}
	}
	for _, e := range s.Errors {
		for _, h := range hostile {
			if strings.HasPrefix(e.Source, h+" ") {
				add("error %s [%s] x%d: %s", e.Source, e.Kind, e.Count, e.Last)
			}
		}
	}
	for _, a := range s.Alerts {
		if slices.Contains(hostile, a.Subject) {
			add("alert %s: %s", a.Kind, a.Text)
		}
	}
	line := fmt.Sprintf("others: %d/%d up, oldest good scrape %.1f s before the snapshot; pool: index_full %v, blocks %s, hit %s",
		othersUp, others, oldest.Seconds(), s.Pool.IndexFull, inum(s.Pool.Blocks), num(s.Pool.HitRate.Tokens))
	if s.Pool.HitRate.Reason != "" {
		line += " (" + s.Pool.HitRate.Reason + ")"
	}
	add("%s", line)
	return out, nil
}

func num(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%.3g", *p)
}

func inum(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
