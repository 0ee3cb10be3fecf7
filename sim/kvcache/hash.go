// Package kvcache is the simulator's paged KV cache: a fixed number of
// blocks of BlockSize tokens, chained block hashes over token ids, reference
// counts for blocks used by running requests, and LRU eviction of unreferenced
// cached blocks. It reports what it does as vLLM-style KV events.
package kvcache

import "encoding/binary"

// BlockSize is the number of tokens per KV block (vLLM's default).
const BlockSize = 16

// Hasher chains block hashes: a block's hash covers its parent's hash and its
// 16 token ids, so one hash names the whole prefix ending at that block (as
// vLLM's sha256 chain does). Hashes are 64-bit and uniform, so about half lie
// above the int64 range, like vLLM's; SGLang mode shows them as signed.
type Hasher struct {
	root uint64 // stands in for vLLM's NONE_HASH (PYTHONHASHSEED-derived)
}

// NewHasher returns a hasher whose chain root derives from seed, so every
// worker of one sim agrees on hashes (as with a shared PYTHONHASHSEED).
func NewHasher(seed uint64) Hasher { return Hasher{root: mix(seed ^ 0x6b76746f70)} }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// Block returns the hash of one full block given its parent's hash (ignored
// when hasParent is false: the first block of a prompt chains off the root).
func (h Hasher) Block(parent uint64, hasParent bool, tokens []uint32) uint64 {
	if !hasParent {
		parent = h.root
	}
	var buf [8 + 4*BlockSize]byte
	binary.LittleEndian.PutUint64(buf[:8], parent)
	for i := 0; i < BlockSize && i < len(tokens); i++ {
		binary.LittleEndian.PutUint32(buf[8+4*i:], tokens[i])
	}
	x := uint64(fnvOffset)
	for _, b := range buf {
		x ^= uint64(b)
		x *= fnvPrime
	}
	// FNV's high bits mix poorly over short inputs; finish with splitmix64.
	return mix(x)
}

// Extend appends to hashes the hashes of the full blocks of tokens that
// hashes does not cover yet, and returns the extended slice. hashes must be
// the chain of tokens' leading blocks.
func (h Hasher) Extend(hashes []uint64, tokens []uint32) []uint64 {
	for i := len(hashes); (i+1)*BlockSize <= len(tokens); i++ {
		var parent uint64
		if i > 0 {
			parent = hashes[i-1]
		}
		hashes = append(hashes, h.Block(parent, i > 0, tokens[i*BlockSize:(i+1)*BlockSize]))
	}
	return hashes
}

// mix is the splitmix64 finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Bytes32 is the 32-byte form of a hash for `--hash bytes` (vLLM with
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0): 24 filler bytes derived from the
// key, then the key itself big-endian, so the last 8 bytes are the key.
func Bytes32(key uint64) [32]byte {
	var b [32]byte
	x := key
	for i := 0; i < 3; i++ {
		x = mix(x + 0x9e3779b97f4a7c15)
		binary.BigEndian.PutUint64(b[8*i:], x)
	}
	binary.BigEndian.PutUint64(b[24:], key)
	return b
}

// Reseed rewrites events as a worker hashing with another seed would
// publish them: every block hash (and parent) through a bijection keyed by
// seed, so chains stay chains and equal blocks stay equal, but no hash
// matches the pool's. The hashes are written to buf (grown as needed); the
// events and the buffer are returned. seed 0 returns events as they are.
func Reseed(events []Event, seed uint64, out []Event, buf []uint64) ([]Event, []uint64) {
	if seed == 0 {
		return events, buf
	}
	out, buf = out[:0], buf[:0]
	n := 0
	for i := range events {
		n += len(events[i].Hashes)
	}
	if cap(buf) < n {
		buf = make([]uint64, 0, n)
	}
	for _, ev := range events {
		start := len(buf)
		for _, h := range ev.Hashes {
			buf = append(buf, ReseedHash(h, seed))
		}
		ev.Hashes = buf[start:len(buf):len(buf)]
		if ev.HasParent {
			ev.Parent = ReseedHash(ev.Parent, seed)
		}
		out = append(out, ev)
	}
	return out, buf
}

// ReseedHash is one hash as a worker hashing with seed publishes it (seed
// 0: the pool's, h itself).
func ReseedHash(h, seed uint64) uint64 {
	if seed == 0 {
		return h
	}
	return mix(h ^ seed)
}
