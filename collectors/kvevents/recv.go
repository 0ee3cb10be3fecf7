package kvevents

/*
#cgo !windows pkg-config: libzmq
#include <errno.h>
#include <stdlib.h>
#include <zmq.h>

#define KVTOP_FRAMES 4

// The frames of one received message, in C memory: the first KVTOP_FRAMES
// are kept (a live message has 3), later ones counted and closed.
typedef struct {
	zmq_msg_t msg[KVTOP_FRAMES];
	void *data[KVTOP_FRAMES];
	size_t size[KVTOP_FRAMES];
	int held;
} kvtop_frames;

static void kvtop_release(kvtop_frames *f) {
	for (int i = 0; i < f->held; i++) zmq_msg_close(&f->msg[i]);
	f->held = 0;
}

// kvtop_recv releases the previous message, then receives the next whole
// one without waiting. It returns how many frames the message had (more
// than KVTOP_FRAMES are received but not kept), or -1 with errno (EAGAIN:
// nothing queued). One call per message instead of a dozen.
static int kvtop_recv(void *sock, kvtop_frames *f) {
	kvtop_release(f);
	int frames = 0;
	for (;;) {
		zmq_msg_t extra;
		zmq_msg_t *m = frames < KVTOP_FRAMES ? &f->msg[frames] : &extra;
		zmq_msg_init(m);
		int rc;
		do {
			rc = zmq_msg_recv(m, sock, ZMQ_DONTWAIT);
		} while (rc < 0 && errno == EINTR);
		if (rc < 0) {
			int e = errno;
			zmq_msg_close(m);
			kvtop_release(f);
			errno = e;
			return -1;
		}
		int more = zmq_msg_more(m);
		if (m == &extra) {
			zmq_msg_close(m);
		} else {
			f->data[frames] = zmq_msg_data(m);
			f->size[frames] = zmq_msg_size(m);
			f->held = frames + 1;
		}
		frames++;
		if (!more) return frames;
	}
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	zmq "github.com/pebbe/zmq4"
)

// frameReader receives whole messages from one socket straight from
// libzmq's buffers: no frame is copied into Go memory (the decoder keeps
// no byte of its payload), and one cgo call receives a message where
// zmq4's RecvMessageBytes makes about six per frame and allocates each.
// The frames it returns are valid until the next call or release. It is
// used by the socket's goroutine only.
type frameReader struct {
	sock   *zmq.Socket
	raw    unsafe.Pointer // libzmq's socket, nil: use sock (see newFrameReader)
	f      *C.kvtop_frames
	frames [C.KVTOP_FRAMES][]byte
	extra  [][]byte // the frames past KVTOP_FRAMES, as empty placeholders
}

// newFrameReader reads from sock. The libzmq socket behind a zmq4.Socket is
// its first field, unexported: it is taken only when the socket's own
// String (which prints it) agrees, else every receive goes through zmq4.
func newFrameReader(sock *zmq.Socket) *frameReader {
	fr := &frameReader{sock: sock}
	raw := *(*unsafe.Pointer)(unsafe.Pointer(sock))
	if t, err := sock.GetType(); err == nil {
		if id, _ := sock.GetIdentity(); id == "" && sock.String() == fmt.Sprintf("Socket(%v,%p)", t, raw) {
			fr.raw = raw
			fr.f = (*C.kvtop_frames)(C.calloc(1, C.sizeof_kvtop_frames))
		}
	}
	return fr
}

// next receives one whole message without waiting; an error (EAGAIN) when
// none is queued. A message of more than KVTOP_FRAMES frames keeps their
// count, the frames past it empty.
func (fr *frameReader) next() ([][]byte, error) {
	if fr.raw == nil {
		return fr.sock.RecvMessageBytes(zmq.DONTWAIT)
	}
	n, err := C.kvtop_recv(fr.raw, fr.f)
	if n < 0 {
		return nil, err
	}
	kept := min(int(n), C.KVTOP_FRAMES)
	for i := 0; i < kept; i++ {
		size := int(fr.f.size[i])
		if size == 0 {
			fr.frames[i] = []byte{}
			continue
		}
		fr.frames[i] = unsafe.Slice((*byte)(fr.f.data[i]), size)
	}
	out := fr.frames[:kept]
	if int(n) > kept {
		if cap(fr.extra) < int(n) {
			fr.extra = make([][]byte, int(n))
		}
		out = append(fr.extra[:0], out...)
		for len(out) < int(n) {
			out = append(out, []byte{})
		}
	}
	return out, nil
}

// release gives libzmq back the last message's frames.
func (fr *frameReader) release() {
	if fr.f != nil {
		C.kvtop_release(fr.f)
		fr.frames = [C.KVTOP_FRAMES][]byte{}
	}
}

// close releases everything; call it before closing the socket.
func (fr *frameReader) close() {
	if fr.f != nil {
		fr.release()
		C.free(unsafe.Pointer(fr.f))
		fr.f, fr.raw = nil, nil
	}
}
