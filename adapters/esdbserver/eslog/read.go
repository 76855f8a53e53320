package eslog

import (
	"context"
	"regexp"
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

func (f *Filter) match(e *entry) bool {
	if f == nil || (len(f.Prefixes) == 0 && f.Regex == nil) {
		return true
	}
	subject := e.stream.name
	if f.OnEventType {
		subject = e.typ
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

// scanChunk is how many $all index entries a read copies under the read
// lock at a time. Filters run on the copy with the lock released, so a slow
// filter never holds up the writer.
const scanChunk = 1024

// ReadAll reads up to limit events of $all that match filter, examining at
// most maxExamine index entries (0 means no bound beyond limit).
func (s *Store) ReadAll(dir Direction, from AllFrom, limit, maxExamine int, filter *Filter) (Page, error) {
	return s.ReadAllContext(context.Background(), dir, from, ReadLimits{Events: limit, Examine: maxExamine}, filter)
}

// ReadAllContext reads the events of $all that match filter, within lim. It
// takes the read lock only to copy the index a chunk at a time and matches
// the filter with the lock released; it stops with ctx's error when ctx is
// done.
func (s *Store) ReadAllContext(ctx context.Context, dir Direction, from AllFrom, lim ReadLimits, filter *Filter) (Page, error) {
	var page Page
	var picked []entry
	var bytes int
	step := 1
	s.mu.RLock()
	n := s.entries.n
	var i int
	if dir == Backwards {
		step = -1
		i = n - 1
		if !from.FromEnd {
			i = s.entries.search(from.Position) - 1
		}
	} else if from.FromEnd {
		i = n
	} else {
		i = s.entries.search(from.Position)
	}
	s.mu.RUnlock()
	unfiltered := filter == nil || (len(filter.Prefixes) == 0 && filter.Regex == nil)
	var chunk []entry
	for {
		if err := ctx.Err(); err != nil {
			return page, errors.Wrap(err, "read $all")
		}
		size := scanChunk
		if unfiltered {
			size = min(size, lim.Events-len(picked))
		}
		if lim.Examine > 0 {
			size = min(size, lim.Examine-page.Examined)
		}
		chunk = chunk[:0]
		s.mu.RLock()
		n = s.entries.n
		page.Changed = s.changed
		for j := i; j >= 0 && j < n && len(chunk) < size; j += step {
			chunk = append(chunk, *s.entries.at(j))
		}
		s.mu.RUnlock()
		stop := len(chunk) == 0
		for k := range chunk {
			e := &chunk[k]
			if len(picked) >= lim.Events {
				stop = true
				break
			}
			match := filter.match(e)
			if match && lim.overBytes(len(picked), bytes, e.length) {
				stop = true
				break
			}
			page.Examined++
			page.Last = e.pos
			i += step
			if match {
				picked = append(picked, *e)
				bytes += int(e.length)
			}
		}
		if stop || len(picked) >= lim.Events || (lim.Examine > 0 && page.Examined >= lim.Examine) {
			break
		}
	}
	page.End = i < 0 || i >= n
	events, err := s.load(picked)
	page.Events = events
	return page, err
}

// ReadStream reads up to limit events of stream starting at revision from
// (or at its last event when fromEnd) in direction dir, honouring $tb,
// $maxCount and $maxAge.
func (s *Store) ReadStream(stream string, dir Direction, from uint64, fromEnd bool, limit int) (Page, error) {
	return s.ReadStreamContext(context.Background(), stream, dir, from, fromEnd, ReadLimits{Events: limit})
}

// ReadStreamContext is ReadStream within lim (Examine is ignored: a stream
// read examines only the events it may return).
func (s *Store) ReadStreamContext(ctx context.Context, stream string, dir Direction, from uint64, fromEnd bool, lim ReadLimits) (Page, error) {
	if err := ctx.Err(); err != nil {
		return Page{}, errors.Wrapf(err, "read stream %q", stream)
	}
	s.mu.RLock()
	page := Page{Changed: s.changed}
	st := s.streams[stream]
	if st != nil && st.tombstoned {
		s.mu.RUnlock()
		return page, &StreamDeletedError{Stream: stream}
	}
	if st == nil || len(st.revs) == 0 || st.softDeleted() {
		page.End = true
		s.mu.RUnlock()
		return page, errors.Wrapf(ErrStreamNotFound, "stream %q", stream)
	}
	first, last := int64(st.firstReadable()), st.lastRevision()
	var minCreated int64
	if st.meta.maxAge > 0 {
		minCreated = s.opts.Now().Add(-st.meta.maxAge).UnixNano()
	}
	var picked []entry
	var bytes int
	r, step := int64(from), int64(1)
	if dir == Backwards {
		step = -1
		if fromEnd || r > last {
			r = last
		}
	} else {
		if fromEnd {
			r = last + 1
		}
		r = max(r, first)
	}
	for ; r >= first && r <= last && len(picked) < lim.Events; r += step {
		e := s.entries.at(st.revs[r])
		keep := e.created >= minCreated
		if keep && lim.overBytes(len(picked), bytes, e.length) {
			break
		}
		page.Examined++
		page.Last = uint64(r)
		if keep {
			picked = append(picked, *e)
			bytes += int(e.length)
		}
	}
	page.End = r < first || r > last
	s.mu.RUnlock()
	events, err := s.load(picked)
	page.Events = events
	return page, err
}

// StreamRevision returns the last revision of stream, or NoStream.
func (s *Store) StreamRevision(stream string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.streams[stream].current()
}

// HeadPosition returns the position of the last event in $all, or 0.
func (s *Store) HeadPosition() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.entries.n == 0 {
		return 0
	}
	return s.entries.at(s.entries.n - 1).pos
}

// maxCoalesce bounds how many bytes one disk read may fetch for several
// neighbouring events.
const maxCoalesce = 1 << 20

// load reads the bodies of entries from disk, fetching neighbours together.
func (s *Store) load(entries []entry) ([]RecordedEvent, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make([]RecordedEvent, 0, len(entries))
	for i := 0; i < len(entries); {
		lo, hi := entries[i].pos, entries[i].pos+uint64(entries[i].length)
		j := i + 1
		for ; j < len(entries); j++ {
			e := &entries[j]
			nlo, nhi := min(lo, e.pos), max(hi, e.pos+uint64(e.length))
			if nhi-nlo > maxCoalesce {
				break
			}
			lo, hi = nlo, nhi
		}
		buf, err := s.log.readAt(lo, int(hi-lo))
		if err != nil {
			return nil, err
		}
		for _, e := range entries[i:j] {
			off := e.pos - lo
			ev, err := decodeEvent(buf[off : off+uint64(e.length)])
			if err != nil {
				return nil, errors.Wrapf(ErrCorrupt, "event at %d: %v", e.pos, err)
			}
			out = append(out, RecordedEvent{
				ProposedEvent: ev,
				Stream:        e.stream.name,
				Revision:      e.rev,
				Position:      e.pos,
				Created:       e.created,
			})
		}
		i = j
	}
	return out, nil
}
