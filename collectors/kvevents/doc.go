// Package kvevents collects KV-cache events: a ZMQ SUB per worker endpoint
// and DP rank (or one bound SUB in the centralized layout), a decoder for
// every batch and event encoding of PROTOCOLS.md §1, DEALER replay of gaps,
// and the per-publisher seq state machine of DESIGN.md.
//
// Goroutines: one reader per SUB socket (it also decodes, in place in
// libzmq's buffers: recv.go, one cgo call per message), one goroutine
// per replay with its own DEALER (at most MaxReplays at once), and one state
// goroutine that owns every publisher's seq machine and sends observations
// in apply order. Each ZMQ socket is used by exactly one goroutine.
//
// Decisions the design left open, and why:
//
//   - Late join. A publisher's lowest seq is 0, or FirstSeq for one
//     configured (Endpoint.FirstSeq, workers[].first_seq) or seen to count
//     from 1. A first batch at it is the whole history; one past it asks
//     the replay endpoint for everything from it. The history is complete
//     when every seq from there up to the live batch arrived. A replay
//     from 0 that starts at 1 is complete too when nothing before seq 1
//     can exist, decided from what the replay returned: it sent every seq
//     from 1 on, contiguously, up to its end marker, and fewer than 10 000
//     batches in all. vLLM and SGLang count from 0 and their ring
//     (buffer_steps) holds 10 000 by default: one that evicted seq 0 is
//     full and returns 10 000 or more. So fewer is a publisher counting
//     from 1 (llm-d-inference-sim, some TRT-LLM builds), and kvtop
//     remembers it as such. (A vLLM whose ring was set below 10 000 and
//     lost exactly seq 0, one batch's window, would pass for complete.)
//     Otherwise the stream is joined_late: blocks stored before kvtop
//     arrived are unknown, but nothing kvtop had was lost, so the late join
//     is an incident and a state, never missing/lost counts. Without a
//     replay endpoint any first seq above the lowest one is joined_late.
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
//     the lowest seq. A first batch after a reconnect that continues in order (last+1)
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
//     goroutine in chunks (replayChunkBatches), which applies them at once:
//     a replay holds its replies until the state goroutine takes them,
//     plus the batches past its range kept to fill gaps among the held
//     live batches (at most maxExtraBytes, and a quarter of what replays
//     may hold; then the replay stops). A seq missing before the first
//     replayed seq is gone from the publisher's buffer (evicted); one
//     missing after it was in the buffer but did not arrive: "replay
//     incomplete", a distinct note. Both are lost. Two clocks end a replay
//     like a timeout: ReplayTimeout without progress (a reply below the seq
//     asked for, a repeat or one out of order is no progress, so stale
//     replies trickled forever cannot hold it open) and ReplayDeadline in
//     all (in-range replies trickled too slowly). What is still missing is
//     then lost (history_lost; for a join, joined_late) and the held live
//     batches flow again. A replay that would hold more than HoldBack live
//     batches is given up (its seqs lost) rather than delaying or dropping
//     live data.
//   - Memory. Every decoded batch is costed (batchCost: what the decoder
//     allocated for it, Batch.Mem) against QueueBytes. A quarter bounds the hand-off
//     from the SUB readers to the state goroutine: a reader never waits on
//     a busy state goroutine, it keeps draining libzmq (whose own queue
//     thus stays short; it holds at most subHWM messages: the hand-off quarter over 64 KiB, 1 024 by default) and drops a
//     batch that does not fit, counted in Dropped: a gap, which replay
//     repairs. The rest bounds what replays hold: the live batches held
//     behind them (after drops, up to the whole hand-off quarter), their
//     extra batches and the replayed batches not yet applied. Holding one
//     more live batch over it gives up the replay holding the most. A
//     replay reader at it waits for the pool to apply its own batches
//     (the publisher's buffers fill meanwhile, as behind any slow reader)
//     and stops, its remaining seqs lost, if the pool takes nothing for
//     ReplayTimeout.
//     The replay reader does not wait on the state goroutine either, and
//     takes every reply libzmq has queued, raw (counted), before decoding
//     the next one, so the DEALER's receive high-water mark can be small:
//     replayHWM replies (heldBudget/MaxMsgSize, at least 16) of at most
//     MaxMsgSize.
//     The trade-off: a publisher replaying its whole buffer in a burst
//     (vLLM loops over it, and its ROUTER silently drops what its pipe
//     cannot take) loses nothing while kvtop's replay reader runs, however
//     slow the pool, as long as the burst fits the budget (10 000 batches
//     of 1.5 kB take 20 MB, of 15 kB 160 MB); a reader starved of CPU
//     leans on the TCP buffers and the ROUTER's own high-water mark, where
//     an unbounded DEALER queue would have taken anything, of any size.
//   - Message size. Every socket refuses a frame over MaxMsgSize
//     (ZMQ_MAXMSGSIZE): libzmq 4.3.4 closes the link on its header, before
//     reading it, and never redials a connecting socket. The reader tells
//     that from an ordinary disconnect (no CONNECT_RETRIED follows; see
//     link.go), counts it in Oversized, says so on the stream and connects
//     again; the batches lost with the link are a gap. A replay reply over
//     the size ends its replay the same way, counted too. A bound SUB
//     cannot tell an oversized message from a peer that left (the peer
//     redials by itself): there it is a gap, and its replay counts it.
//   - Centralized layout: the worker comes from the topic id (or Resolve;
//     ResolveEndpoint also gives its FirstSeq), the rank from the batch itself (0..255; others are refused). At most
//     MaxPublishers streams are kept (batches of more are refused and
//     counted). A bound SUB cannot tell which peer dropped, so a publisher is
//     shown disconnected only after IdleEvict without a batch, when kvtop
//     forgets it (its blocks stay in the pool); a small tombstone keeps its
//     seq and counters so its return neither re-applies old batches nor
//     misses a restart.
package kvevents
