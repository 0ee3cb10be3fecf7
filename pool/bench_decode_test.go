package pool

import (
	"bytes"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/kvevents"
)

// encodeMapBatch writes a batch the way vLLM >= 0.24 does: an array
// [ts, events, dp_rank] of map-encoded events, BlockStored with its 16
// token ids per block.
func encodeMapBatch(b *testing.B, bt collectors.EventBatch) []byte {
	return encodeMapBatchKeys(b, bt, false)
}

// encodeMapBatchKeys is encodeMapBatch; with groups, events also carry
// the keys vLLM 0.26+ adds (issue 23): group_idx and locality on both
// kinds, the group's spec kind and window on stores (one full-attention
// group).
func encodeMapBatchKeys(b *testing.B, bt collectors.EventBatch, groups bool) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(enc.EncodeArrayLen(3))
	must(enc.EncodeFloat64(1.8e9))
	must(enc.EncodeArrayLen(len(bt.Events)))
	keys := map[bool][2]int{false: {6, 3}, true: {10, 5}}[groups] // a store's keys, a removal's
	for _, ev := range bt.Events {
		extra := func(stored bool) {
			if !groups {
				return
			}
			must(enc.EncodeString("group_idx"))
			must(enc.EncodeInt(0))
			must(enc.EncodeString("locality"))
			must(enc.EncodeString("LOCAL"))
			if stored {
				must(enc.EncodeString("kv_cache_spec_kind"))
				must(enc.EncodeString("full_attention"))
				must(enc.EncodeString("kv_cache_spec_sliding_window"))
				must(enc.EncodeNil())
			}
		}
		if ev.Kind == collectors.BlockStored {
			must(enc.EncodeMapLen(keys[0]))
			must(enc.EncodeString("type"))
			must(enc.EncodeString("BlockStored"))
			must(enc.EncodeString("block_hashes"))
			must(enc.EncodeArrayLen(len(ev.Hashes)))
			for _, h := range ev.Hashes {
				must(enc.EncodeUint64(h))
			}
			must(enc.EncodeString("parent_block_hash"))
			if ev.HasParent {
				must(enc.EncodeUint64(ev.Parent))
			} else {
				must(enc.EncodeNil())
			}
			must(enc.EncodeString("token_ids"))
			must(enc.EncodeArrayLen(16 * len(ev.Hashes)))
			for i := 0; i < 16*len(ev.Hashes); i++ {
				must(enc.EncodeUint32(uint32(mix(uint64(i)))))
			}
			must(enc.EncodeString("block_size"))
			must(enc.EncodeInt(16))
			must(enc.EncodeString("medium"))
			must(enc.EncodeString("GPU"))
			extra(true)
			continue
		}
		must(enc.EncodeMapLen(keys[1]))
		must(enc.EncodeString("type"))
		must(enc.EncodeString("BlockRemoved"))
		must(enc.EncodeString("block_hashes"))
		must(enc.EncodeArrayLen(len(ev.Hashes)))
		for _, h := range ev.Hashes {
			must(enc.EncodeUint64(h))
		}
		must(enc.EncodeString("medium"))
		must(enc.EncodeString("GPU"))
		extra(false)
	}
	must(enc.EncodeInt(0))
	return buf.Bytes()
}

// BenchmarkDecodeAndIndex is the target as one measurement: raw
// msgpack payloads (a map-encoded BlockStored of 16 blocks with token ids
// plus a BlockRemoved of 16 blocks) decoded by the collector's decoder and
// applied to the pool's index, in steady state with 256 k resident blocks.
func BenchmarkDecodeAndIndex(b *testing.B) { benchDecodeAndIndex(b, false) }

// BenchmarkDecodeAndIndexGroups is BenchmarkDecodeAndIndex with the keys
// vLLM 0.26+ adds to every event (group, locality, the group's kind):
// issue 23's measure, run against the build before them too (they skip
// unknown keys).
func BenchmarkDecodeAndIndexGroups(b *testing.B) { benchDecodeAndIndex(b, true) }

func benchDecodeAndIndex(b *testing.B, groups bool) {
	const resident = 256 << 10
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}})
	batches := churnBatches("w0", resident)
	payloads := make([][]byte, len(batches))
	for i := range batches {
		payloads[i] = encodeMapBatchKeys(b, batches[i], groups)
	}
	t0 := time.Unix(1_800_000_000, 0)
	apply := func(i int, at time.Time) {
		j := i % len(payloads)
		dec, err := kvevents.DecodeBatch(payloads[j])
		if err != nil {
			b.Fatal(err)
		}
		s.Apply(&collectors.EventBatch{Worker: "w0", Seq: uint64(i), TS: dec.TS, Events: dec.Events, At: at})
	}
	warm := resident / 16
	for i := 0; i < warm; i++ {
		apply(i, t0)
	}
	b.SetBytes(int64(len(payloads[warm])))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		apply(warm+i, t0.Add(time.Duration(i)*time.Microsecond))
	}
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(32*b.N)/el, "blocks/s")
	// Per CPU second: what a loaded machine's wall clock hides (run it
	// with -cpu 1).
	if cpu := (cpuTime() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(32*b.N)/cpu, "blocks/cpu-s")
	}
	if got := s.Snapshot(t0.Add(time.Minute)).Workers[0].Blocks; blocksOf(got) != resident {
		b.Fatalf("resident blocks = %d, want %d", blocksOf(got), resident)
	}
}
