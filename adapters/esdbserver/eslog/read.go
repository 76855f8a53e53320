package eslog

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"regexp"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
)

// Filter selects $all events by stream name or event type, with prefixes or
// a regular expression. The zero Filter selects everything.
type Filter struct {
	// OnEventType filters on the event type instead of the stream name.
	OnEventType bool
	Prefixes    []string
	Regex       *regexp.Regexp
}

func (f *Filter) match(stream, typ string) bool {
	if f == nil || (len(f.Prefixes) == 0 && f.Regex == nil) {
		return true
	}
	subject := stream
	if f.OnEventType {
		subject = typ
	}
	for _, p := range f.Prefixes {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return f.Regex != nil && f.Regex.MatchString(subject)
}

// Page is the result of one bounded read.
type Page struct {
	Events []RecordedEvent
	// Examined counts the index entries looked at, matching or not; Last is
	// the position ($all) or revision (stream) of the last one.
	Examined int
	Last     uint64
	// End is set when the read reached the end of the committed log.
	End bool
	// Changed is closed by the first commit after this read, so a follower
	// that found nothing new can wait on it without missing a commit.
	Changed <-chan struct{}
}

// AllFrom says where a $all read starts.
type AllFrom struct {
	// FromEnd starts at the end of the log; otherwise Position applies:
	// forwards the first event at or after it, backwards the last event
	// before it.
	FromEnd  bool
	Position uint64
}

// ReadLimits bound one read of the store.
type ReadLimits struct {
	// Events is the most events returned.
	Events int
	// Examine is the most index entries looked at, matching the filter or
	// not; 0 means no bound beyond Events.
	Examine int
	// Bytes bounds the stored size of the events returned; the first event
	// is returned whatever its size, so a read always makes progress. 0
	// means no bound.
	Bytes int
}

// overBytes reports whether one more event of size n would break the byte
// limit, given the events and bytes picked so far.
func (l *ReadLimits) overBytes(events, bytes int, n uint32) bool {
	return events > 0 && l.Bytes > 0 && bytes+int(n) > l.Bytes
}

// checkEvery is how many events a $all read examines between looks at its
// context.
const checkEvery = 1024

// ReadAll reads up to limit events of $all that match filter, examining at
// most maxExamine events (0 means no bound beyond limit).
func (s *Store) ReadAll(dir Direction, from AllFrom, limit, maxExamine int, filter *Filter) (Page, error) {
	return s.ReadAllContext(context.Background(), dir, from, ReadLimits{Events: limit, Examine: maxExamine}, filter)
}

// ReadAllContext reads the events of $all that match filter, within lim. It
// reads the log itself, from the sampled frame start at or before the
// position asked for, up to the end committed when it starts; it holds the
// store's lock only to find those two places, so a slow filter never holds
// up the writer. It stops with ctx's error when ctx is done.
func (s *Store) ReadAllContext(ctx context.Context, dir Direction, from AllFrom, lim ReadLimits, filter *Filter) (Page, error) {
	return s.ReadAllAppend(ctx, dir, from, lim, filter, nil)
}

// ReadAllAppend is ReadAllContext with the page's events appended to
// events[:0], so that a reader going through the log page by page can reuse
// one slice once it is done with the previous page's events.
func (s *Store) ReadAllAppend(ctx context.Context, dir Direction, from AllFrom, lim ReadLimits, filter *Filter, events []RecordedEvent) (Page, error) {
	page := Page{Events: events[:0]}
	if err := ctx.Err(); err != nil {
		return page, errors.Wrap(err, "read $all")
	}
	// Before the sample: a segment scavenge replaces after this makes the
	// scanner resync (see frameScanner.resync).
	gen := s.log.gen.Load()
	s.mu.RLock()
	head := s.mem.to
	page.Changed = s.changed
	start := from.Position
	if from.FromEnd || start > head {
		start = head
	}
	var sample uint64
	var err error
	if dir == Forwards {
		sample, err = s.floorSample(start)
	}
	s.mu.RUnlock()
	if err != nil {
		return page, err
	}
	r := allReader{s: s, ctx: ctx, lim: lim, filter: filter, page: &page, gen: gen}
	if dir == Forwards {
		err = r.forwards(sample, start, head)
	} else {
		err = r.backwards(start, head)
	}
	return page, err
}

type allReader struct {
	s      *Store
	ctx    context.Context
	lim    ReadLimits
	filter *Filter
	page   *Page
	bytes  int
	names  lastNames
	gen    uint64
}

// full reports whether the page may take no more events.
func (r *allReader) full() bool {
	return len(r.page.Events) >= r.lim.Events || (r.lim.Examine > 0 && r.page.Examined >= r.lim.Examine)
}

// examine looks at one event and reports whether the read must stop before
// it (a full page); it returns ctx's error every checkEvery events.
func (r *allReader) examine(ev *frameEvent) (stop bool, err error) {
	if r.full() {
		return true, nil
	}
	match := r.filter.match(ev.stream, ev.typ)
	if match && r.lim.overBytes(len(r.page.Events), r.bytes, uint32(ev.length)) {
		return true, nil
	}
	if r.page.Examined%checkEvery == checkEvery-1 {
		if err := r.ctx.Err(); err != nil {
			return true, errors.Wrap(err, "read $all")
		}
	}
	r.page.Examined++
	r.page.Last = ev.pos
	if match {
		e, err := ev.decode(&r.names)
		if err != nil {
			return true, err
		}
		r.page.Events = append(r.page.Events, e)
		r.bytes += ev.length
	}
	return false, nil
}

func (r *allReader) forwards(sample, start, head uint64) error {
	sc := r.s.scanner(sample, head, r.gen)
	var evs []frameEvent
	for {
		fpos, body, ok, err := sc.next()
		if err != nil || !ok {
			r.page.End = !ok && err == nil
			return err
		}
		if evs, err = frameEvents(fpos, body, evs[:0], &r.names); err != nil {
			return err
		}
		for i := range evs {
			if evs[i].pos < start {
				continue
			}
			if stop, err := r.examine(&evs[i]); stop || err != nil {
				return err
			}
		}
	}
}

func (r *allReader) backwards(before, head uint64) error {
	var evs []frameEvent
	for before > 0 {
		gen := r.s.log.gen.Load()
		r.s.mu.RLock()
		sample, err := r.s.floorSample(before - 1)
		r.s.mu.RUnlock()
		if err != nil {
			return err
		}
		evs = evs[:0]
		sc := r.s.scanner(sample, head, gen)
		for sc.pos < before {
			fpos, body, ok, err := sc.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if evs, err = frameEvents(fpos, body, evs, &r.names); err != nil {
				return err
			}
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].pos >= before {
				continue
			}
			if stop, err := r.examine(&evs[i]); stop || err != nil {
				return err
			}
		}
		before = sample
	}
	r.page.End = true
	return nil
}

// frameEvent is one event of a frame read from the log, decoded only as
// far as a filter needs.
type frameEvent struct {
	pos     uint64
	length  int
	stream  string
	typ     string
	created int64
	rev     uint64
	raw     []byte
}

func (e *frameEvent) decode(names *lastNames) (RecordedEvent, error) {
	ev, err := decodeEvent(e.raw, names)
	if err != nil {
		return RecordedEvent{}, errors.Wrapf(ErrCorrupt, "event at %d: %v", e.pos, err)
	}
	return RecordedEvent{ProposedEvent: ev, Stream: e.stream, Revision: e.rev, Position: e.pos, Created: e.created}, nil
}

// frameEvents appends the events of the frame at pos to out; a tombstone
// frame has none. Their types come from names when they repeat.
func frameEvents(pos uint64, body []byte, out []frameEvent, names *lastNames) ([]frameEvent, error) {
	d := decoder{b: body}
	if d.byte() != kindAppend {
		return out, nil
	}
	f, err := decodeAppend(&d)
	if err != nil {
		return out, errors.Wrapf(ErrCorrupt, "append frame at %d: %v", pos, err)
	}
	for i, span := range f.events {
		raw := body[span.offset : span.offset+span.length]
		ed := decoder{b: raw}
		ed.fixed(16)
		typ := ed.bytes()
		if ed.err != nil {
			return out, errors.Wrapf(ErrCorrupt, "event %d of frame at %d", i, pos)
		}
		out = append(out, frameEvent{
			pos:     pos + frameHeaderSize + uint64(span.offset),
			length:  span.length,
			stream:  f.stream,
			typ:     names.typ(typ),
			created: f.created,
			rev:     f.firstRevision + uint64(i),
			raw:     raw,
		})
	}
	return out, nil
}

// frameScanner reads the committed frames of the log from a frame start
// up to limit, in reads that grow to maxScanRead.
type frameScanner struct {
	log   *segmentLog
	pos   uint64
	limit uint64
	// floor returns the sample at or before a position, and gen is the
	// log's generation the scanner's bytes belong to (see resync).
	floor func(uint64) (uint64, error)
	gen   uint64
	buf   []byte
	at    uint64
	read  int
}

const maxScanRead = 1 << 20

// next returns the next frame's position and body, or false at the limit.
// It jumps over skip frames, where scavenge removed events. A bad frame met
// while scavenge replaced a segment file is read again from the nearest
// sample (see resync).
func (sc *frameScanner) next() (uint64, []byte, bool, error) {
	for {
		pos, body, ok, err := sc.frame()
		if err != nil {
			if errors.Is(err, ErrCorrupt) && sc.resync() {
				continue
			}
			return pos, body, ok, err
		}
		if !ok {
			return pos, body, ok, nil
		}
		if span, skip := skipSpan(body); skip {
			if pos+span > sc.limit || span < frameHeaderSize+uint64(len(body)) {
				return 0, nil, false, errors.Wrapf(ErrCorrupt, "skip frame at %d spans %d bytes", pos, span)
			}
			sc.pos = pos + span
			continue
		}
		return pos, body, true, nil
	}
}

// frame returns the frame at sc.pos, skip frames included.
func (sc *frameScanner) frame() (uint64, []byte, bool, error) {
	if sc.pos >= sc.limit {
		return 0, nil, false, nil
	}
	hdr, err := sc.bytes(sc.pos, frameHeaderSize)
	if err != nil {
		return 0, nil, false, err
	}
	n := binary.LittleEndian.Uint32(hdr)
	if n == 0 || n > maxFrameSize || sc.pos+frameHeaderSize+uint64(n) > sc.limit {
		return 0, nil, false, errors.Wrapf(ErrCorrupt, "frame at %d has length %d", sc.pos, n)
	}
	sum := binary.LittleEndian.Uint32(hdr[4:])
	body, err := sc.bytes(sc.pos+frameHeaderSize, int(n))
	if err != nil {
		return 0, nil, false, err
	}
	if crc32.Checksum(body, castagnoli) != sum {
		return 0, nil, false, errors.Wrapf(ErrCorrupt, "frame at %d: checksum mismatch", sc.pos)
	}
	pos := sc.pos
	sc.pos += frameHeaderSize + uint64(n)
	return pos, body, true, nil
}

// bytes returns n bytes of the log at pos, reading ahead. The slices it
// returns are never overwritten: events may keep them.
func (sc *frameScanner) bytes(pos uint64, n int) ([]byte, error) {
	if pos >= sc.at && pos+uint64(n) <= sc.at+uint64(len(sc.buf)) {
		return sc.buf[pos-sc.at : pos-sc.at+uint64(n)], nil
	}
	sc.read = min(max(sc.read*2, 64<<10), maxScanRead)
	size := uint64(max(n, sc.read))
	size = min(size, sc.limit-pos)
	buf, err := sc.log.readAt(pos, int(size))
	if err != nil {
		return nil, err
	}
	sc.buf, sc.at = buf, pos
	return buf[:n], nil
}

// ReadStream reads up to limit events of stream starting at revision from
// (or at its last event when fromEnd) in direction dir, honouring $tb,
// $maxCount and $maxAge.
func (s *Store) ReadStream(stream string, dir Direction, from uint64, fromEnd bool, limit int) (Page, error) {
	return s.ReadStreamContext(context.Background(), stream, dir, from, fromEnd, ReadLimits{Events: limit})
}

// ReadStreamContext is ReadStream within lim (Examine is ignored: a stream
// read examines only the events it may return). It finds the events'
// frames in the index under the read lock and reads them without it.
func (s *Store) ReadStreamContext(ctx context.Context, stream string, dir Direction, from uint64, fromEnd bool, lim ReadLimits) (Page, error) {
	if err := ctx.Err(); err != nil {
		return Page{}, errors.Wrapf(err, "read stream %q", stream)
	}
	s.mu.RLock()
	page := Page{Changed: s.changed}
	st, err := s.state(stream)
	if err != nil {
		s.mu.RUnlock()
		return page, err
	}
	if st.tombstoned {
		s.mu.RUnlock()
		return page, &StreamDeletedError{Stream: stream}
	}
	if st.last == NoStream || st.softDeleted() {
		page.End = true
		s.mu.RUnlock()
		return page, errors.Wrapf(ErrStreamNotFound, "stream %q", stream)
	}
	first, last := int64(st.firstReadable()), st.lastRevision()
	maxAge := st.meta.maxAge
	s.mu.RUnlock()
	var minCreated int64
	if maxAge > 0 {
		minCreated = s.opts.Now().Add(-maxAge).UnixNano()
	}
	var bytes int
	r := int64(from)
	if dir == Backwards {
		if fromEnd || r > last {
			r = last
		}
	} else {
		if fromEnd {
			r = last + 1
		}
		r = max(r, first)
	}
	for r >= first && r <= last && len(page.Events) < lim.Events {
		// The next revisions the page may need, at most what it lacks.
		n := int64(lim.Events - len(page.Events))
		lo, hi := r, min(r+n-1, last)
		if dir == Backwards {
			lo, hi = max(r-n+1, first), r
		}
		s.mu.RLock()
		found, err := s.entriesOf(stream, uint64(lo), uint64(hi))
		s.mu.RUnlock()
		if err != nil {
			return page, err
		}
		evs, err := s.eventsAt(stream, found)
		if err != nil {
			return page, err
		}
		if int64(len(evs)) != hi-lo+1 && !s.log.skipped.Load() {
			return page, errors.Wrapf(ErrCorrupt, "index of %q lacks some of revisions %d..%d", stream, lo, hi)
		}
		// Revisions missing from evs were removed by scavenge.
		if dir == Backwards {
			slices.Reverse(evs)
		}
		for i := range evs {
			e := &evs[i]
			size := encodedEventSize(&e.ProposedEvent)
			keep := e.Created >= minCreated
			if keep && lim.overBytes(len(page.Events), bytes, uint32(size)) {
				page.End = false
				return page, nil
			}
			page.Examined++
			page.Last = e.Revision
			if keep {
				page.Events = append(page.Events, *e)
				bytes += size
			}
		}
		if dir == Backwards {
			r = lo - 1
		} else {
			r = hi + 1
		}
	}
	page.End = r < first || r > last
	return page, nil
}

// StreamRevision returns the last revision of stream, or NoStream.
func (s *Store) StreamRevision(stream string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, err := s.state(stream)
	if err != nil {
		return NoStream
	}
	return st.current()
}

// HeadPosition returns the position of the last event in $all, or 0.
func (s *Store) HeadPosition() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.mem.hasEvent {
		return 0
	}
	return s.mem.lastEvent
}
