// Package kvevents collects KV-cache events: a ZMQ SUB per worker endpoint
// and DP rank (or one bound SUB in the centralized layout), a decoder for
// every batch and event encoding of PROTOCOLS.md §1, DEALER replay of gaps,
// and the per-publisher seq state machine of DESIGN.md.
//
// Goroutines: one reader per SUB socket (it also decodes), one goroutine
// per replay with its own DEALER (at most MaxReplays at once), and one state
// goroutine that owns every publisher's seq machine and sends observations
// in apply order. Each ZMQ socket is used by exactly one goroutine.
//
// Decisions the design left open, and why:
//
//   - Late join. A first batch with seq > 0 asks the replay endpoint for
//     everything from 0. The history is complete when the replay starts at 0
//     with nothing missing up to the live batch. A replay starting at 1 is
//     complete only for a publisher seen to count from 1: its first live
//     batch was seq 1 and its buffer had no seq 0 (llm-d-inference-sim).
//     vLLM counts from 0, so for it a buffer starting at 1 means seq 0 was
//     evicted. (A counts-from-1 publisher kvtop joins late is therefore
//     joined_late: kvtop cannot tell it from a vLLM whose seq 0 is gone.)
//     Otherwise the stream is joined_late: blocks stored before kvtop
//     arrived are unknown, but nothing kvtop had was lost, so the late join
//     is an incident and a state, never missing/lost counts. Without a
//     replay endpoint any first seq > 0 is joined_late.
//   - history_lost and joined_late stay until the publisher restarts (seq
//     goes backwards) or sends AllBlocksCleared: only then is its block set
//     fully known again. Meanwhile the known blocks are kept (no reset).
//   - Duplicates. A batch whose seq is at or below the last one is a
//     duplicate only if kvtop applied that seq recently (the last 256) with the
//     same fingerprint (publisher ts, size, event count, tail bytes): vLLM has
//     no epoch, and a restarted engine re-uses seqs with new content. Anything
//     else going backwards is a restart: StreamReset, then the new run.
//   - Restart across a disconnect. A publisher that restarts while kvtop is
//     disconnected may be past kvtop's last seq when the link is back: its
//     jump looks like a gap. So the first jump after a reconnect (socket
//     monitor events; in the centralized layout, a publisher coming back
//     after IdleEvict) is checked: the replay is asked from the last applied
//     seq, not the one after, and that batch's fingerprint must match the one
//     applied. A match is the same run (the replay then repairs the gap). A
//     mismatch, a buffer starting after that seq, a replay that fails, or no
//     replay endpoint at all mean a restart: StreamReset, then the join from
//     seq 0. A first batch after a reconnect that continues in order (last+1)
//     is trusted. A restarted publisher that stays idle sends nothing to
//     check: the pool uses the metrics' process start time for that.
//   - A batch that is not msgpack at all is counted in decode_errors and its
//     seq is accounted for (no gap, no replay: the publisher would send the
//     same bytes), but its events are unknown, so the stream is history_lost.
//   - Skipped input is counted apart: unknown_events (events of an unknown
//     type: a newer producer, harmless), unknown_fields (one per occurrence
//     of an unknown map key or trailing array position in a batch or an
//     event: one new field on every event counts once per event), and
//     malformed (known events that could not be read: real data loss, so the
//     stream is history_lost until the publisher's block set is known again).
//   - Replay. Replies are decoded as they arrive and handed to the state
//     goroutine in chunks (replayChunkBatches), which applies them at once: a
//     replay holds one raw reply and one chunk, plus the batches past its
//     range kept to fill gaps among the held live batches (at most
//     maxExtraBytes of payload, then the replay stops). The DEALER's receive
//     high-water mark is off, so a publisher replaying its whole buffer in a
//     burst loses nothing at kvtop's end. A seq missing before the first
//     replayed seq is gone from the publisher's buffer (evicted); one missing
//     after it was in the buffer but did not arrive: "replay incomplete", a
//     distinct note. Both are lost. Replay timeout is inactivity:
//     ReplayTimeout without any reply. A replay that would hold more than
//     HoldBack live batches is given up (its seqs lost) rather than delaying
//     or dropping live data.
//   - Centralized layout: the worker comes from the topic id (or Resolve),
//     the rank from the batch itself (0..255; others are refused). At most
//     MaxPublishers streams are kept (batches of more are refused and
//     counted). A bound SUB cannot tell which peer dropped, so a publisher is
//     shown disconnected only after IdleEvict without a batch, when kvtop
//     forgets it (its blocks stay in the pool); a small tombstone keeps its
//     seq and counters so its return neither re-applies old batches nor
//     misses a restart.
package kvevents
