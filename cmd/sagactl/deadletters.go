package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain/protocol"
)

const deadlettersUsage = `usage: sagactl deadletters [list] [flags] [ID...]
       sagactl deadletters redrive [flags] ID... | FILTERS

An ID is PARTITION/OFFSET in saga.deadletter, as the list shows it.
`

// deadLetter is a record of saga.deadletter as deadletters shows it.
type deadLetter = topics.DeadLetter

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
		id, err := topics.ParseDeadLetterID(a)
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
	letters, redriven, err = topics.ReadDeadLetters(ctx, c.opener(), since, f.matches, keep)
	if errors.Is(err, topics.ErrNoTopic) {
		return nil, nil, errors.Newf("Kafka at %s has no topic %s: is it saga's?", c.brokers, protocol.DeadLetterTopic)
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
		size := strconv.Itoa(d.Size)
		if d.ByReference {
			size += " (by reference)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, stamp(d.Time), dash(topics.Preview([]byte(d.Key), 40)), source,
			dash(topics.Preview([]byte(d.Reason), 80)), size, dash(topics.Preview(d.Record.Value, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("\n%d dead letters; the whole of each: -o json; re-publish: sagactl deadletters redrive ID\n", len(letters))
	return nil
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.ID, dash(topics.Preview([]byte(it.Key), 40)), dash(it.Target), dash(topics.Preview([]byte(it.Reason), 80)))
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
	case d.ByReference && value == nil:
		return nil, errors.Newf("it keeps only the first %d of its %d bytes (too large to copy): re-publish the record at %s, or a fixed one with --value-file",
			len(d.Record.Value), d.Size, d.Source)
	}
	if value == nil {
		value = d.Record.Value
	}
	rec := &kgo.Record{Topic: d.SourceTopic, Key: d.Record.Key, Value: value}
	for _, h := range d.Record.Headers {
		if !topics.OfDeadLetter(h.Key) {
			rec.Headers = append(rec.Headers, h)
		}
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: protocol.HeaderRedrivenFrom, Value: []byte(protocol.DeadLetterTopic + "/" + d.ID)})
	return rec, nil
}
