package eslog

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/cockroachdb/errors"
)

// Frame layout on disk: a little-endian uint32 body length, a little-endian
// uint32 CRC-32C of the body, then the body. The first body byte is the frame
// kind.
const (
	frameHeaderSize = 8

	kindAppend    byte = 1
	kindTombstone byte = 2
	// kindStub is what scavenge leaves of a stream's last event when that
	// event is dead (expired or truncated) but the stream is not
	// tombstoned: the stream, the revision and the created time, so that
	// the index and a replay know the stream's last revision. No read
	// returns it, from the stream or from $all. Its body: the kind, the
	// stream as an append frame has it, the revision (uvarint) and the
	// created time (uint64).
	kindStub byte = 4
)

// maxFrameSize bounds a frame's body so that a corrupt length cannot make the
// reader allocate without limit.
const maxFrameSize = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errTorn marks a frame body whose fields do not decode.
var errTorn = errors.New("malformed frame")

// appendFrame is the decoded body of an append frame.
type appendFrame struct {
	stream        string
	firstRevision uint64
	created       int64
	// events holds, per event, its offset within the body and its length.
	events []eventSpan
}

type eventSpan struct {
	offset int
	length int
}

// encodeAppend appends one append frame to buf and returns the new buffer and
// the offsets, relative to the start of the frame, of each event's bytes.
func encodeAppend(buf []byte, stream string, firstRevision uint64, created int64, events []ProposedEvent) ([]byte, []int) {
	start := len(buf)
	buf = append(buf, make([]byte, frameHeaderSize)...)
	buf = append(buf, kindAppend)
	buf = appendString(buf, stream)
	buf = binary.AppendUvarint(buf, firstRevision)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(created))
	buf = binary.AppendUvarint(buf, uint64(len(events)))
	offsets := make([]int, len(events))
	for i := range events {
		buf = binary.AppendUvarint(buf, uint64(encodedEventSize(&events[i])))
		offsets[i] = len(buf) - start
		buf = appendEvent(buf, &events[i])
	}
	return sealFrame(buf, start), offsets
}

// encodeStub returns a stub frame (see kindStub).
func encodeStub(stream string, rev uint64, created int64) []byte {
	buf := make([]byte, frameHeaderSize)
	buf = append(buf, kindStub)
	buf = appendString(buf, stream)
	buf = binary.AppendUvarint(buf, rev)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(created))
	return sealFrame(buf, 0)
}

// decodeStub decodes a stub frame's body after its kind.
func decodeStub(d *decoder) (stream string, rev uint64, created int64, err error) {
	stream = string(d.bytes())
	rev = d.uvarint()
	created = int64(d.uint64())
	if d.err == nil && d.off != len(d.b) {
		d.fail()
	}
	return stream, rev, created, d.err
}

// encodeTombstone appends one tombstone frame to buf.
func encodeTombstone(buf []byte, stream string) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, frameHeaderSize)...)
	buf = append(buf, kindTombstone)
	buf = appendString(buf, stream)
	return sealFrame(buf, start)
}

func sealFrame(buf []byte, start int) []byte {
	body := buf[start+frameHeaderSize:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castagnoli))
	return buf
}

func encodedEventSize(e *ProposedEvent) int {
	return 16 + stringSize(e.Type) + stringSize(e.ContentType) + bytesSize(e.Metadata) + bytesSize(e.Data)
}

func appendEvent(buf []byte, e *ProposedEvent) []byte {
	buf = append(buf, e.ID[:]...)
	buf = appendString(buf, e.Type)
	buf = appendString(buf, e.ContentType)
	buf = appendBytes(buf, e.Metadata)
	return appendBytes(buf, e.Data)
}

func stringSize(s string) int { return uvarintSize(uint64(len(s))) + len(s) }
func bytesSize(b []byte) int  { return uvarintSize(uint64(len(b))) + len(b) }

func uvarintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func appendBytes(buf []byte, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}

// decoder reads the fields of a frame body and remembers the first error.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errors.Wrapf(errTorn, "malformed field at offset %d", d.off)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail()
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) uint64() uint64 {
	if d.err != nil || len(d.b)-d.off < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)-d.off) {
		d.fail()
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) fixed(n int) []byte {
	if d.err != nil || len(d.b)-d.off < n {
		d.fail()
		return nil
	}
	v := d.b[d.off : d.off+n]
	d.off += n
	return v
}

// decodeAppend decodes an append frame body whose kind byte was consumed.
func decodeAppend(d *decoder) (appendFrame, error) {
	f := appendFrame{
		stream:        string(d.bytes()),
		firstRevision: d.uvarint(),
		created:       int64(d.uint64()),
	}
	count := d.uvarint()
	if d.err == nil && count > uint64(len(d.b)) {
		d.fail()
	}
	if d.err != nil {
		return f, d.err
	}
	f.events = make([]eventSpan, 0, count)
	for i := uint64(0); i < count; i++ {
		n := d.uvarint()
		if d.err != nil || n > uint64(len(d.b)-d.off) {
			d.fail()
			return f, d.err
		}
		f.events = append(f.events, eventSpan{offset: d.off, length: int(n)})
		d.off += int(n)
	}
	if d.off != len(d.b) {
		d.fail()
	}
	return f, d.err
}

// decodeEvent decodes an event's bytes as written by appendEvent, taking its
// type and content type from names when they are the last ones it saw
// (names may be nil).
func decodeEvent(b []byte, names *lastNames) (ProposedEvent, error) {
	d := decoder{b: b}
	var e ProposedEvent
	copy(e.ID[:], d.fixed(16))
	e.Type = names.typ(d.bytes())
	e.ContentType = names.contentType(d.bytes())
	e.Metadata = d.bytes()
	e.Data = d.bytes()
	if d.err == nil && d.off != len(b) {
		d.fail()
	}
	return e, d.err
}

// lastNames keeps the last event type and content type decoded, so that a
// run of events that share them (as events of one append or one stream
// mostly do) shares their strings instead of allocating each.
type lastNames struct {
	lastType, lastContentType string
}

func (n *lastNames) typ(b []byte) string {
	if n == nil {
		return string(b)
	}
	if string(b) != n.lastType {
		n.lastType = string(b)
	}
	return n.lastType
}

func (n *lastNames) contentType(b []byte) string {
	if n == nil {
		return string(b)
	}
	if string(b) != n.lastContentType {
		n.lastContentType = string(b)
	}
	return n.lastContentType
}
