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
//     everything from 0. The history is complete when the replay starts at 0,
//     or at 1 (llm-d-inference-sim counts from 1), with nothing missing up to
//     the live batch. Otherwise the stream is joined_late: blocks stored before
//     kvtop arrived are unknown, but nothing kvtop had was lost, so the late
//     join is an incident and a state, never missing/lost counts. Without a
//     replay endpoint any first seq > 0 is joined_late (kvtop cannot tell a
//     publisher that counts from 1 from one whose seq 0 it missed).
//   - history_lost and joined_late stay until the publisher restarts (seq
//     goes backwards) or sends AllBlocksCleared: only then is its block set
//     fully known again. Meanwhile the known blocks are kept (no reset).
//   - Duplicates. A batch whose seq is at or below the last one is a
//     duplicate only if kvtop applied that seq recently (the last 256) with the
//     same fingerprint (publisher ts, size, event count, tail bytes): vLLM has
//     no epoch, and a restarted engine re-uses seqs with new content. Anything
//     else going backwards is a restart: StreamReset, then the new run.
//   - A batch that is not msgpack at all is counted in decode_errors and its
//     seq is accounted for (no gap, no replay: the publisher would send the
//     same bytes), but its events are unknown, so the stream is history_lost.
//     A malformed event inside a good batch is skipped, counted in
//     unknown_events with the unknown types and fields, and reported.
//   - Replay timeout is inactivity: ReplayTimeout without any reply. A
//     replay that would hold more than HoldBack live batches is given up
//     (its seqs lost) rather than delaying or dropping live data.
//   - Centralized layout: the worker comes from the topic id (or Resolve),
//     the rank from the batch itself. A bound SUB cannot tell which peer
//     dropped, so those publishers never show disconnected.
//
// Known limit: a publisher that restarts while kvtop is disconnected and is
// already past kvtop's last seq when it reconnects looks like a gap, not a
// restart (seq is the only in-band restart signal); the metrics scrape's
// process start time is what reveals it.
package kvevents
