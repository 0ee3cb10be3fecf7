package kvevents

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors"
)

// The frame reader gives every message whole and byte-exact, straight from
// libzmq's buffers (its fast path taken: zmq4's layout is the one it
// knows), keeps the frame count of messages of many frames, and a frame
// stays intact until the next message is read.
func TestFrameReader(t *testing.T) {
	pub, _ := zmq.NewSocket(zmq.PUB)
	defer pub.Close()
	ep := bindLoopback(t, pub, 0)
	sub, _ := zmq.NewSocket(zmq.SUB)
	defer sub.Close()
	_ = sub.SetSubscribe("")
	if err := sub.Connect(ep); err != nil {
		t.Fatal(err)
	}
	fr := newFrameReader(sub)
	defer fr.close()
	if fr.raw == nil {
		t.Fatal("frame reader fell back to zmq4's RecvMessageBytes: zmq4's Socket layout is not the one it knows")
	}
	big := bytes.Repeat([]byte{0xab}, 1<<20)
	msgs := [][][]byte{
		{[]byte("kv@w0@m"), seq8(7), []byte{0x93, 0xcb}},
		{[]byte("one frame")},
		{[]byte("t"), {}, big},
		{[]byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e"), []byte("f")},
		{[]byte("kv@w0@m"), seq8(8), []byte("last")},
	}
	// The slow joiner: send a probe until the subscription has landed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _ = pub.SendMessage("probe")
		time.Sleep(10 * time.Millisecond)
		if f, err := fr.next(); err == nil && string(f[0]) == "probe" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("subscription never landed")
		}
	}
	for _, m := range msgs {
		parts := make([]any, len(m))
		for i, p := range m {
			parts[i] = p
		}
		if _, err := pub.SendMessage(parts...); err != nil {
			t.Fatal(err)
		}
	}
	var got [][][]byte
	for len(got) < len(msgs) && time.Now().Before(deadline) {
		f, err := fr.next()
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if string(f[0]) == "probe" {
			continue
		}
		if len(got) == 0 {
			first := f[2] // held until the next read
			time.Sleep(20 * time.Millisecond)
			if !bytes.Equal(first, msgs[0][2]) {
				t.Errorf("a frame changed before the next read: %x", first)
			}
		}
		cp := make([][]byte, len(f))
		for i := range f {
			cp[i] = bytes.Clone(f[i])
		}
		got = append(got, cp)
	}
	if len(got) != len(msgs) {
		t.Fatalf("read %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		if len(got[i]) != len(m) {
			t.Errorf("message %d: %d frames, want %d", i, len(got[i]), len(m))
			continue
		}
		for k := range m {
			if k >= 4 { // past the kept frames: counted, empty
				if len(got[i][k]) != 0 {
					t.Errorf("message %d frame %d: %d bytes, want an empty placeholder", i, k, len(got[i][k]))
				}
				continue
			}
			if !bytes.Equal(got[i][k], m[k]) {
				t.Errorf("message %d frame %d: %s, want %s", i, k, short(got[i][k]), short(m[k]))
			}
		}
	}
	if _, err := fr.next(); err == nil {
		t.Error("a message read from an empty queue")
	}
}

func short(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%d bytes %x…", len(b), b[:8])
	}
	return fmt.Sprintf("%q", b)
}

// Live messages of the wrong shape, read by the collector's frame reader,
// are reported saying what they were (with their frame count however many
// frames they had), and the batches around them are applied.
func TestBadLiveMessages(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0, storedMap(nil, h1)))
	_, _ = p.pub.SendMessage("just a topic")
	_, _ = p.pub.SendMessage("kv@w0@m", seq8(1), batchSeq(0, 1), "4", "5", "6", "7")
	_, _ = p.pub.SendMessage("kv@w0@m", []byte{0, 1}, batchSeq(0, 1))
	p.publish(batchSeq(0, 1, removedMap(h1)))
	st := h.waitStatus("w0", 0, "seq 1 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 1 })
	if st.State != live || st.Batches != 2 || st.Gaps != 0 {
		t.Errorf("state %s batches %d gaps %d; want live 2 0", st.State, st.Batches, st.Gaps)
	}
	var msgs []string
	for _, e := range h.sourceErrors("decode") {
		msgs = append(msgs, e.Message)
	}
	want := []string{"has 1 frames", "has 7 frames", "seq frame is 0001"}
	if len(msgs) != len(want) {
		t.Fatalf("decode errors %q, want %d", msgs, len(want))
	}
	for i, w := range want {
		if !strings.Contains(msgs[i], w) {
			t.Errorf("decode error %q, want it to say %q", msgs[i], w)
		}
	}
}
