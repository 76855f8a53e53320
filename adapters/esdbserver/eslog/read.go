package eslog

import (
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

// ReadAll reads up to limit events of $all that match filter, examining at
// most maxExamine index entries (0 means no bound beyond limit).
func (s *Store) ReadAll(dir Direction, from AllFrom, limit, maxExamine int, filter *Filter) (Page, error) {
	s.mu.RLock()
	var picked []entry
	page := Page{Changed: s.changed}
	n := s.entries.n
	step, i := 1, 0
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
	for ; i >= 0 && i < n && len(picked) < limit; i += step {
		if maxExamine > 0 && page.Examined >= maxExamine {
			break
		}
		e := s.entries.at(i)
		page.Examined++
		page.Last = e.pos
		if filter.match(e) {
			picked = append(picked, *e)
		}
	}
	page.End = i < 0 || i >= n
	s.mu.RUnlock()
	events, err := s.load(picked)
	page.Events = events
	return page, err
}

// ReadStream reads up to limit events of stream starting at revision from
// (or at its last event when fromEnd) in direction dir, honouring $tb,
// $maxCount and $maxAge.
func (s *Store) ReadStream(stream string, dir Direction, from uint64, fromEnd bool, limit int) (Page, error) {
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
	for ; r >= first && r <= last && len(picked) < limit; r += step {
		e := s.entries.at(st.revs[r])
		page.Examined++
		page.Last = uint64(r)
		if e.created >= minCreated {
			picked = append(picked, *e)
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
