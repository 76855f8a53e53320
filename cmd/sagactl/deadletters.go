package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
)

const deadlettersUsage = `usage: sagactl deadletters [list] [flags] [ID...]
       sagactl deadletters redrive [flags] ID... | FILTERS

An ID is PARTITION/OFFSET in saga.deadletter, as the list shows it.
`

// deadLetter is a record of saga.deadletter as deadletters shows it.
type deadLetter struct {
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
	Size      int    `json:"size"`
	// Value is the payload when it is UTF-8 text, else ValueBase64.
	Value       *string `json:"value,omitempty"`
	ValueBase64 string  `json:"valueBase64,omitempty"`
	// Headers are the record's other headers.
	Headers map[string]string `json:"headers,omitempty"`

	record *kgo.Record
}

func newDeadLetter(r *kgo.Record) *deadLetter {
	d := &deadLetter{ID: deadLetterID(r.Partition, r.Offset), Partition: r.Partition, Offset: r.Offset, Time: r.Timestamp, Key: string(r.Key),
		Reason: header(r, protocol.HeaderDeadLetterReason), Source: header(r, protocol.HeaderDeadLetterSource), Size: len(r.Value), record: r}
	d.SourceTopic, d.SourcePartition, d.SourceOffset = parseSource(d.Source)
	if from := header(r, protocol.HeaderRedrivenFrom); from != "" {
		d.RedriveOf = strings.TrimPrefix(from, protocol.DeadLetterTopic+"/")
	}
	if utf8.Valid(r.Value) {
		text := string(r.Value)
		d.Value = &text
	} else {
		d.ValueBase64 = base64.StdEncoding.EncodeToString(r.Value)
	}
	for _, h := range r.Headers {
		if !ofDeadLetter(h.Key) {
			if d.Headers == nil {
				d.Headers = map[string]string{}
			}
			d.Headers[h.Key] = string(h.Value)
		}
	}
	return d
}

// ofDeadLetter reports whether a header is the dead letters' own, not the
// original record's.
func ofDeadLetter(key string) bool {
	return key == protocol.HeaderDeadLetterReason || key == protocol.HeaderDeadLetterSource || key == protocol.HeaderRedrivenFrom
}

func deadLetterID(partition int32, offset int64) string {
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

// parseDeadLetterID accepts PARTITION/OFFSET, with or without the topic
// before it.
func parseDeadLetterID(s string) (string, error) {
	rest := strings.TrimPrefix(s, protocol.DeadLetterTopic+"/")
	p, o, ok := strings.Cut(rest, "/")
	pn, perr := strconv.ParseInt(p, 10, 32)
	on, oerr := strconv.ParseInt(o, 10, 64)
	if !ok || perr != nil || oerr != nil || pn < 0 || on < 0 {
		return "", errors.Newf("%q is not a dead letter id: want PARTITION/OFFSET, as sagactl deadletters lists them", s)
	}
	return deadLetterID(int32(pn), on), nil
}

// letterFilter selects dead letters.
type letterFilter struct {
	reason, sourceTopic, key, since string
	timeout                         time.Duration
	ids                             map[string]bool
}

func letterFlags(fs *flag.FlagSet) *letterFilter {
	f := &letterFilter{}
	fs.StringVar(&f.reason, "reason-contains", "", "only dead letters whose reason contains this (ignoring case)")
	fs.StringVar(&f.sourceTopic, "source-topic", "", "only dead letters that came from this topic")
	fs.StringVar(&f.key, "key", "", "only dead letters with this key (the order or task id)")
	fs.StringVar(&f.since, "since", "", "only dead letters written since this RFC 3339 time, or this long ago (e.g. 24h)")
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long reading the dead letters may take")
	return f
}

// given reports whether a filter other than ids was set.
func (f *letterFilter) given() bool {
	return f.reason != "" || f.sourceTopic != "" || f.key != "" || f.since != ""
}

// setIDs takes the ids among a command's arguments.
func (f *letterFilter) setIDs(args []string) error {
	for _, a := range args {
		id, err := parseDeadLetterID(a)
		if err != nil {
			return err
		}
		if f.ids == nil {
			f.ids = map[string]bool{}
		}
		f.ids[id] = true
	}
	return nil
}

func (f *letterFilter) matches(d *deadLetter) bool {
	return (f.ids == nil || f.ids[d.ID]) &&
		(f.reason == "" || strings.Contains(strings.ToLower(d.Reason), strings.ToLower(f.reason))) &&
		(f.sourceTopic == "" || d.SourceTopic == f.sourceTopic) && (f.key == "" || d.Key == f.key)
}

// read reads the dead letters the filter selects, newest first, keeping
// the newest keep of them (0: all), and the ids of the dead letters that
// were redriven and dead-lettered again.
func (f *letterFilter) read(ctx context.Context, c *common, keep int) (letters []*deadLetter, redriven map[string]bool, err error) {
	since, err := parseSince(f.since)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	newestFirst := func(a, b *deadLetter) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Partition, a.Partition); c != 0 {
			return c
		}
		return cmp.Compare(b.Offset, a.Offset)
	}
	redriven = map[string]bool{}
	err = readTopic(ctx, c, protocol.DeadLetterTopic, since, func(r *kgo.Record) {
		d := newDeadLetter(r)
		if d.RedriveOf != "" {
			redriven[d.RedriveOf] = true
		}
		if !f.matches(d) {
			return
		}
		letters = append(letters, d)
		if keep > 0 && len(letters) > 2*keep {
			slices.SortStableFunc(letters, newestFirst)
			letters = letters[:keep]
		}
	})
	slices.SortStableFunc(letters, newestFirst)
	if keep > 0 && len(letters) > keep {
		letters = letters[:keep]
	}
	return letters, redriven, err
}

// deadletters runs the deadletters subcommands: list (the default) and
// redrive.
func deadletters(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return deadlettersList(ctx, args[1:])
		case "redrive":
			return deadlettersRedrive(ctx, args[1:])
		case "help":
			fmt.Print(deadlettersUsage)
			return nil
		}
	}
	return deadlettersList(ctx, args)
}

// deadlettersList lists dead letters, newest first.
func deadlettersList(ctx context.Context, args []string) error {
	fs, c := flags("deadletters")
	f := letterFlags(fs)
	limit := fs.Int("limit", 100, "show the newest this many (0: all)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	if err := f.setIDs(fs.Args()); err != nil {
		return err
	}
	letters, _, err := f.read(ctx, c, *limit)
	if err != nil {
		return err
	}
	if *c.output == outputJSON {
		if letters == nil {
			letters = []*deadLetter{}
		}
		return printJSON(letters)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tKEY\tSOURCE\tREASON\tSIZE\tPAYLOAD")
	for _, d := range letters {
		source := dash(d.Source)
		if d.RedriveOf != "" {
			source += " (redrive of " + d.RedriveOf + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.ID, stamp(d.Time), dash(preview([]byte(d.Key), 40)), source,
			dash(preview([]byte(d.Reason), 80)), d.Size, dash(preview(d.record.Value, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("\n%d dead letters; the whole of each: -o json; re-publish: sagactl deadletters redrive ID\n", len(letters))
	return nil
}

// preview shows the start of a payload on one line: printable text as it
// is, anything else escaped (\n, \x00, \u200b), cut at max runes.
func preview(b []byte, max int) string {
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

// redriveItem is a dead letter a redrive selected, with -o json.
type redriveItem struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
	Target string `json:"target"`
}

// deadlettersRedrive re-publishes dead letters to the topic they came
// from, once the operator fixed what made them fail.
func deadlettersRedrive(ctx context.Context, args []string) error {
	fs, c := flags("deadletters redrive")
	f := letterFlags(fs)
	dryRun := fs.Bool("dry-run", false, "list what would be re-published, and do nothing")
	yes := fs.Bool("yes", false, fmt.Sprintf("re-publish more than %d without asking", handful))
	valueFile := fs.String("value-file", "", "re-publish this file's contents instead of the payload (one dead letter only): the fixed order")
	most := fs.Int("max", 1000, "refuse to re-publish more than this many at once")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	if fs.NArg() == 0 && !f.given() {
		return errors.New("usage: sagactl deadletters redrive [flags] ID... | --reason-contains R | --source-topic T | --key K | --since T")
	}
	if err := f.setIDs(fs.Args()); err != nil {
		return err
	}
	var value []byte
	if *valueFile != "" {
		var err error
		if value, err = os.ReadFile(*valueFile); err != nil {
			return errors.Wrap(err, "read --value-file")
		}
	}
	letters, redriven, err := f.read(ctx, c, 0)
	if err != nil {
		return err
	}
	if f.ids != nil && len(letters) < len(f.ids) {
		for _, d := range letters {
			delete(f.ids, d.ID)
		}
		missing := make([]string, 0, len(f.ids))
		for id := range f.ids {
			missing = append(missing, id)
		}
		slices.Sort(missing)
		return errors.Newf("no dead letter %s (or not matching the filters); nothing was re-published", strings.Join(missing, ", "))
	}
	if fs.NArg() == 0 {
		// By filter: a dead letter whose redrive was dead-lettered again is
		// that newer one's business, not to be sent twice.
		before := len(letters)
		letters = slices.DeleteFunc(letters, func(d *deadLetter) bool { return redriven[d.ID] })
		if n := before - len(letters); n > 0 {
			fmt.Fprintf(os.Stderr, "sagactl: passed over %d dead letters redriven before and dead-lettered again; their newer copies are selected\n", n)
		}
	}
	switch {
	case value != nil && len(letters) != 1:
		return errors.Newf("--value-file replaces the payload of one dead letter; %d are selected", len(letters))
	case len(letters) > *most:
		return errors.Newf("%d dead letters match, more than --max %d; narrow the filters", len(letters), *most)
	}
	items := make([]redriveItem, len(letters))
	ids := make([]string, len(letters))
	for i, d := range letters {
		items[i], ids[i] = redriveItem{ID: d.ID, Key: d.Key, Reason: d.Reason, Target: d.SourceTopic}, d.ID
	}
	report := bulkReport{Action: "redrive", DryRun: *dryRun, Matched: len(letters), Items: items}
	if *dryRun {
		if *c.output == outputJSON {
			return printJSON(report)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "would re-publish %d dead letters (dry run):\nID\tKEY\tTO\tREASON\n", len(letters))
		for _, it := range items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.ID, dash(preview([]byte(it.Key), 40)), dash(it.Target), dash(preview([]byte(it.Reason), 80)))
		}
		return tw.Flush()
	}
	if len(letters) == 0 {
		fmt.Fprintln(os.Stderr, "sagactl: no dead letter matches; nothing to re-publish")
		return nil
	}
	if err := confirm(*yes, len(letters), "redrive"); err != nil {
		return err
	}
	producer, err := openKafka(ctx, c)
	if err != nil {
		return err
	}
	defer producer.Close()
	return runBulk(ctx, c, report, ids, func(i int) error {
		rec, err := redriveRecord(letters[i], value)
		if err != nil {
			return err
		}
		return errors.Wrapf(producer.ProduceSync(ctx, rec).FirstErr(), "produce to %s", rec.Topic)
	})
}

// redriveRecord is a dead letter as it is re-published: to its source
// topic, with its key, payload (or value, when given) and headers, less
// the dead letter's own and with where it was redriven from.
func redriveRecord(d *deadLetter, value []byte) (*kgo.Record, error) {
	switch {
	case d.SourceTopic == "":
		return nil, errors.Newf("its source %q names no topic to re-publish to", d.Source)
	case d.SourceTopic == protocol.DeadLetterTopic:
		return nil, errors.New("its source is the dead letters themselves")
	}
	if value == nil {
		value = d.record.Value
	}
	rec := &kgo.Record{Topic: d.SourceTopic, Key: d.record.Key, Value: value}
	for _, h := range d.record.Headers {
		if !ofDeadLetter(h.Key) {
			rec.Headers = append(rec.Headers, h)
		}
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: protocol.HeaderRedrivenFrom, Value: []byte(protocol.DeadLetterTopic + "/" + d.ID)})
	return rec, nil
}
