package topics

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain/protocol"
)

// ErrNoTopic is returned when Kafka does not have the topic to read.
var ErrNoTopic = errors.New("Kafka has no such topic")

// Open connects a Kafka client with these options added to the caller's
// (brokers, security), checking that Kafka answers.
type Open func(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error)

// Read hands fn every record of topic from its oldest (or the first
// written at or after since) up to its end when it is called, partition by
// partition in order, and returns. It reads without a consumer group:
// nothing is committed, and the records stay for others.
func Read(ctx context.Context, open Open, topic string, since time.Time, fn func(*kgo.Record)) error {
	return read(ctx, open, topic, since, 0, fn)
}

// read is Read, from at most tail records before each partition's end when
// tail is positive.
func read(ctx context.Context, open Open, topic string, since time.Time, tail int64, fn func(*kgo.Record)) error {
	admin, err := open(ctx)
	if err != nil {
		return err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return errors.Wrapf(ErrNoTopic, "%s: is this Kafka saga's?", topic)
	}
	if err != nil {
		return errors.Wrapf(err, "read the end of %s", topic)
	}
	var starts kadm.ListedOffsets
	if since.IsZero() {
		starts, err = adm.ListStartOffsets(ctx, topic)
	} else {
		starts, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	}
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return errors.Wrapf(err, "read the start of %s", topic)
	}
	from := map[int32]kgo.Offset{}
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		start, ok := starts.Lookup(topic, o.Partition)
		if ok && tail > 0 {
			start.Offset = max(start.Offset, o.Offset-tail)
		}
		if ok && start.Offset >= 0 && start.Offset < o.Offset {
			from[o.Partition], end[o.Partition] = kgo.NewOffset().At(start.Offset), o.Offset
		}
	})
	if len(end) == 0 {
		return nil
	}
	consumer, err := open(ctx, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		return err
	}
	defer consumer.Close()
	for len(end) > 0 {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return errors.Wrapf(ctx.Err(), "read %s (%d partitions left)", topic, len(end))
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = errors.CombineErrors(fetchErr, err) })
		if fetchErr != nil {
			return errors.Wrapf(fetchErr, "read %s", topic)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			last, reading := end[r.Partition]
			if !reading || r.Offset >= last {
				return // written after the read started
			}
			fn(r)
			if r.Offset == last-1 {
				delete(end, r.Partition)
			}
		})
	}
	return nil
}

// ReadNewestDeadLetters reads the newest limit dead letters, newest first,
// from the last limit records of each partition only: a page that shows
// them must not read the whole topic, which a flood of poison messages can
// make hundreds of megabytes long.
func ReadNewestDeadLetters(ctx context.Context, open Open, limit int) ([]*DeadLetter, error) {
	var letters []*DeadLetter
	err := read(ctx, open, protocol.DeadLetterTopic, time.Time{}, int64(limit), func(r *kgo.Record) {
		letters = append(letters, NewDeadLetter(r))
	})
	slices.SortStableFunc(letters, newestFirst)
	return letters[:min(limit, len(letters))], err
}

// newestFirst orders dead letters by time, then position, newest first.
func newestFirst(a, b *DeadLetter) int {
	if c := b.Time.Compare(a.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Partition, a.Partition); c != 0 {
		return c
	}
	return cmp.Compare(b.Offset, a.Offset)
}

// ReadDeadLetters reads the dead letters keep selects, newest first,
// keeping the newest limit of them (0: all), and the ids of the dead
// letters that were redriven and dead-lettered again.
func ReadDeadLetters(ctx context.Context, open Open, since time.Time, keep func(*DeadLetter) bool, limit int) (letters []*DeadLetter, redriven map[string]bool, err error) {
	redriven = map[string]bool{}
	err = Read(ctx, open, protocol.DeadLetterTopic, since, func(r *kgo.Record) {
		d := NewDeadLetter(r)
		if d.RedriveOf != "" {
			redriven[d.RedriveOf] = true
		}
		if keep != nil && !keep(d) {
			return
		}
		letters = append(letters, d)
		if limit > 0 && len(letters) > 2*limit {
			slices.SortStableFunc(letters, newestFirst)
			letters = letters[:limit]
		}
	})
	slices.SortStableFunc(letters, newestFirst)
	if limit > 0 && len(letters) > limit {
		letters = letters[:limit]
	}
	return letters, redriven, err
}

// DeadLetter is a record of saga.deadletter, as operators see it.
type DeadLetter struct {
	// ID is the dead letter's PARTITION/OFFSET in saga.deadletter.
	ID        string    `json:"id"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Time      time.Time `json:"time"`
	Key       string    `json:"key"`
	Reason    string    `json:"reason"`
	// Source is where the record came from, as its header says:
	// topic/partition/offset, or status/TOPIC for a status its reply topic
	// refused.
	Source          string `json:"source"`
	SourceTopic     string `json:"sourceTopic,omitempty"`
	SourcePartition *int32 `json:"sourcePartition,omitempty"`
	SourceOffset    *int64 `json:"sourceOffset,omitempty"`
	// RedriveOf is the dead letter this one is a redrive of, when a redrive
	// was dead-lettered again.
	RedriveOf string `json:"redriveOf,omitempty"`
	// Size is the size of the original record's value.
	Size int `json:"size"`
	// ByReference says the dead letter keeps only the start of the value
	// (it was too large to copy): the whole is at Source while its topic
	// keeps it.
	ByReference bool `json:"byReference,omitempty"`
	// Value is the payload when it is UTF-8 text, else ValueBase64.
	Value       *string `json:"value,omitempty"`
	ValueBase64 string  `json:"valueBase64,omitempty"`
	// Headers are the record's other headers.
	Headers map[string]string `json:"headers,omitempty"`

	// Record is the record as read.
	Record *kgo.Record `json:"-"`
}

// NewDeadLetter reads a record of saga.deadletter.
func NewDeadLetter(r *kgo.Record) *DeadLetter {
	d := &DeadLetter{ID: DeadLetterID(r.Partition, r.Offset), Partition: r.Partition, Offset: r.Offset, Time: r.Timestamp, Key: string(r.Key),
		Reason: Header(r, protocol.HeaderDeadLetterReason), Source: Header(r, protocol.HeaderDeadLetterSource), Size: len(r.Value), Record: r}
	d.SourceTopic, d.SourcePartition, d.SourceOffset = parseSource(d.Source)
	if size, err := strconv.Atoi(Header(r, protocol.HeaderDeadLetterSize)); err == nil && size >= 0 {
		d.Size, d.ByReference = size, true
	}
	if from := Header(r, protocol.HeaderRedrivenFrom); from != "" {
		d.RedriveOf = strings.TrimPrefix(from, protocol.DeadLetterTopic+"/")
	}
	if utf8.Valid(r.Value) {
		text := string(r.Value)
		d.Value = &text
	} else {
		d.ValueBase64 = base64.StdEncoding.EncodeToString(r.Value)
	}
	for _, h := range r.Headers {
		if !OfDeadLetter(h.Key) {
			if d.Headers == nil {
				d.Headers = map[string]string{}
			}
			d.Headers[h.Key] = string(h.Value)
		}
	}
	return d
}

// OfDeadLetter reports whether a header is the dead letters' own, not the
// original record's.
func OfDeadLetter(key string) bool {
	return key == protocol.HeaderDeadLetterReason || key == protocol.HeaderDeadLetterSource || key == protocol.HeaderDeadLetterSize ||
		key == protocol.HeaderRedrivenFrom
}

// DeadLetterID is a dead letter's PARTITION/OFFSET in saga.deadletter.
func DeadLetterID(partition int32, offset int64) string {
	return strconv.Itoa(int(partition)) + "/" + strconv.FormatInt(offset, 10)
}

// parseSource reads a dead letter's source header: topic/partition/offset,
// or status/TOPIC (a status for the reply topic TOPIC). Topic names hold
// no slash.
func parseSource(s string) (topic string, partition *int32, offset *int64) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2 && parts[0] == "status":
		return parts[1], nil, nil
	case len(parts) != 3:
		return "", nil, nil
	}
	p, perr := strconv.ParseInt(parts[1], 10, 32)
	o, oerr := strconv.ParseInt(parts[2], 10, 64)
	if perr != nil || oerr != nil {
		return "", nil, nil
	}
	p32 := int32(p)
	return parts[0], &p32, &o
}

// ParseDeadLetterID accepts PARTITION/OFFSET, with or without the topic
// before it.
func ParseDeadLetterID(s string) (string, error) {
	rest := strings.TrimPrefix(s, protocol.DeadLetterTopic+"/")
	p, o, ok := strings.Cut(rest, "/")
	pn, perr := strconv.ParseInt(p, 10, 32)
	on, oerr := strconv.ParseInt(o, 10, 64)
	if !ok || perr != nil || oerr != nil || pn < 0 || on < 0 {
		return "", errors.Newf("%q is not a dead letter id: want PARTITION/OFFSET, as sagactl deadletters lists them", s)
	}
	return DeadLetterID(int32(pn), on), nil
}

// Preview shows the start of a payload on one line: printable text as it
// is, anything else escaped (\n, \x00, \u200b), cut at max runes.
func Preview(b []byte, max int) string {
	var out strings.Builder
	for n := 0; len(b) > 0; n++ {
		if n == max {
			out.WriteString("…")
			break
		}
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&out, `\x%02x`, b[0])
		case unicode.IsPrint(r):
			out.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			out.WriteString(q[1 : len(q)-1])
		}
		b = b[size:]
	}
	return out.String()
}

// Header returns the value of a record's header, "" when it has none.
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Dial is an Open for brokers with opts (security) on every client. It
// pings Kafka within five seconds, so that a reader never waits silently
// on brokers that are not there; explain (nil: none) may say more about a
// ping that fails, as kafka.Security.Explain does.
func Dial(brokers []string, explain func(error) error, opts ...kgo.Opt) Open {
	return func(ctx context.Context, more ...kgo.Opt) (*kgo.Client, error) {
		client, err := kafka.NewClient(brokers, append(slices.Clone(opts), more...)...)
		if err != nil {
			return nil, err
		}
		probe, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := client.Ping(probe); err != nil {
			client.Close()
			if explain != nil {
				err = explain(err)
			}
			return nil, errors.Wrapf(err, "no answer from Kafka at %s within 5s; is sagad running", strings.Join(brokers, ","))
		}
		return client, nil
	}
}
