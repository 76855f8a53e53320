package esdbserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// Wire names of persistent subscriptions, as KurrentDB spells them.
const (
	// persistentConfigStream holds every group's settings: each event is
	// the whole list, the last one wins.
	persistentConfigStream = "$persistentSubscriptionConfig"
	persistentConfigType   = "$PersistentConfig"
	// persistentStreamPrefix starts the names of a group's checkpoint and
	// parked streams: $persistentsubscription-<stream>::<group>-checkpoint.
	persistentStreamPrefix = "$persistentsubscription-"
	checkpointEventType    = "$SubscriptionCheckpoint"
	linkEventType          = "$>"
	allStreamName          = "$all"
	persistentServiceName  = "event_store.client.persistent_subscriptions.persistentsubscriptions"

	strategyRoundRobin          = "RoundRobin"
	strategyDispatchToSingle    = "DispatchToSingle"
	strategyPinned              = "Pinned"
	strategyPinnedByCorrelation = "PinnedByCorrelation"
)

// groupConfig is one group's settings as stored in persistentConfigStream.
type groupConfig struct {
	Stream string `json:"stream"`
	Group  string `json:"group"`
	// StartFrom is where a group without a checkpoint starts, in the form
	// the clients parse: "0" (start), "-1" (end) or a revision for a
	// stream; "C:0/P:0", "C:-1/P:-1" or "C:n/P:n" for $all.
	StartFrom          string        `json:"startFrom"`
	ResolveLinks       bool          `json:"resolveLinks"`
	ExtraStatistics    bool          `json:"extraStatistics"`
	MaxRetryCount      int32         `json:"maxRetryCount"`
	MinCheckpointCount int32         `json:"minCheckpointCount"`
	MaxCheckpointCount int32         `json:"maxCheckpointCount"`
	MaxSubscriberCount int32         `json:"maxSubscriberCount"`
	LiveBufferSize     int32         `json:"liveBufferSize"`
	ReadBatchSize      int32         `json:"readBatchSize"`
	HistoryBufferSize  int32         `json:"historyBufferSize"`
	MessageTimeoutMs   int32         `json:"messageTimeoutMs"`
	CheckpointAfterMs  int32         `json:"checkpointAfterMs"`
	ConsumerStrategy   string        `json:"consumerStrategy"`
	Filter             *filterConfig `json:"filter,omitempty"`
	// CheckpointBase and ParkedBase are the last revisions of the
	// checkpoint and parked streams when the group was created: what is at
	// or below them belongs to an earlier group of the same name.
	CheckpointBase int64 `json:"checkpointBase"`
	ParkedBase     int64 `json:"parkedBase"`
}

type filterConfig struct {
	EventType bool     `json:"eventType"`
	Prefixes  []string `json:"prefixes,omitempty"`
	Regex     string   `json:"regex,omitempty"`
}

type persistentConfigDoc struct {
	Entries []groupConfig `json:"entries"`
}

func groupKey(stream, group string) string { return stream + "::" + group }

func (c *groupConfig) key() string { return groupKey(c.Stream, c.Group) }

func (c *groupConfig) checkpointStream() string {
	return persistentStreamPrefix + c.key() + "-checkpoint"
}

func (c *groupConfig) parkedStream() string { return persistentStreamPrefix + c.key() + "-parked" }

func (c *groupConfig) filter() (*eslog.Filter, error) {
	if c.Filter == nil {
		return nil, nil
	}
	f := &eslog.Filter{OnEventType: c.Filter.EventType, Prefixes: c.Filter.Prefixes}
	if c.Filter.Regex != "" {
		re, err := regexp.Compile(c.Filter.Regex)
		if err != nil {
			return nil, invalid("filter regex %q: %v", c.Filter.Regex, err)
		}
		f.Regex = re
	}
	return f, nil
}

// persistentService serves the PersistentSubscriptions gRPC service.
type persistentService struct {
	persistent.UnimplementedPersistentSubscriptionsServer
	store   *eslog.Store
	cfg     *Config
	closing <-chan struct{}
	log     *slog.Logger

	// mu serializes changes to the groups and their stored settings.
	mu     sync.Mutex
	groups map[string]*psGroup
	// configRevision is the last revision of persistentConfigStream.
	configRevision int64
	// consumers counts the connected consumers of every group, bounded by
	// MaxSubscriptions as the catch-up subscriptions are (separately).
	consumers atomic.Int64
}

// newPersistentService loads the groups stored in the store and starts them.
func newPersistentService(store *eslog.Store, cfg *Config, closing <-chan struct{}) (*persistentService, error) {
	s := &persistentService{store: store, cfg: cfg, closing: closing, log: cfg.Logger}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// load reads the stored settings and starts a group for each.
func (s *persistentService) load() error {
	s.groups = map[string]*psGroup{}
	s.configRevision = eslog.NoStream
	page, err := s.store.ReadStream(persistentConfigStream, eslog.Backwards, 0, true, 1)
	if errors.Is(err, eslog.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return errors.Wrap(err, "read persistent subscriptions' settings")
	}
	if len(page.Events) == 0 {
		return nil
	}
	ev := page.Events[0]
	s.configRevision = int64(ev.Revision)
	var doc persistentConfigDoc
	if err := json.Unmarshal(ev.Data, &doc); err != nil {
		return errors.Wrapf(err, "decode persistent subscriptions' settings at revision %d of %s", ev.Revision, persistentConfigStream)
	}
	for _, c := range doc.Entries {
		g, err := s.startGroup(c, false)
		if err != nil {
			s.log.Error("persistent subscription not started", "stream", c.Stream, "group", c.Group, "err", err)
			continue
		}
		s.groups[c.key()] = g
	}
	return nil
}

func (s *persistentService) startGroup(c groupConfig, created bool) (*psGroup, error) {
	g, err := newGroup(s, c, created)
	if err != nil {
		return nil, err
	}
	go g.run()
	return g, nil
}

// saveLocked writes the settings of every group but drop, plus add, as the
// next event of persistentConfigStream. s.mu is held.
func (s *persistentService) saveLocked(ctx context.Context, add *groupConfig, drop string) error {
	doc := persistentConfigDoc{Entries: []groupConfig{}}
	for k, g := range s.groups {
		if k != drop && (add == nil || k != add.key()) {
			doc.Entries = append(doc.Entries, g.cfg)
		}
	}
	if add != nil {
		doc.Entries = append(doc.Entries, *add)
	}
	sort.Slice(doc.Entries, func(i, j int) bool { return doc.Entries[i].key() < doc.Entries[j].key() })
	data, err := json.Marshal(doc)
	if err != nil {
		return errors.Wrap(err, "encode persistent subscriptions' settings")
	}
	expected := eslog.NoStreamExpected
	if s.configRevision != eslog.NoStream {
		expected = eslog.Revision(uint64(s.configRevision))
	}
	res, err := s.store.Append(ctx, persistentConfigStream, expected, []eslog.ProposedEvent{{
		ID: uuid.New(), Type: persistentConfigType, ContentType: "application/json", Data: data,
	}})
	if err != nil {
		return errors.Wrap(err, "store persistent subscriptions' settings")
	}
	s.configRevision = res.Revision
	return nil
}

func (s *persistentService) group(stream, group string) (*psGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupKey(stream, group)]
	if g == nil {
		return nil, notFound(stream, group)
	}
	return g, nil
}

func notFound(stream, group string) error {
	return status.Errorf(codes.NotFound, "subscription group %q on stream %q does not exist", group, stream)
}

// stop stops every group, writing their checkpoints.
func (s *persistentService) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		g.stop(status.Error(codes.Unavailable, "server shutting down"))
	}
}

// settings is what Create and Update requests share.
type settings interface {
	GetResolveLinks() bool
	GetExtraStatistics() bool
	GetMaxRetryCount() int32
	GetMinCheckpointCount() int32
	GetMaxCheckpointCount() int32
	GetMaxSubscriberCount() int32
	GetLiveBufferSize() int32
	GetReadBatchSize() int32
	GetHistoryBufferSize() int32
	GetMessageTimeoutTicks() int64
	GetMessageTimeoutMs() int32
	GetCheckpointAfterTicks() int64
	GetCheckpointAfterMs() int32
}

// ticksPerMs is how many .NET ticks (100 ns) make a millisecond.
const ticksPerMs = 10_000

func applySettings(c *groupConfig, st settings, strategy string) error {
	c.ResolveLinks = st.GetResolveLinks()
	c.ExtraStatistics = st.GetExtraStatistics()
	c.MaxRetryCount = st.GetMaxRetryCount()
	c.MinCheckpointCount = st.GetMinCheckpointCount()
	c.MaxCheckpointCount = st.GetMaxCheckpointCount()
	c.MaxSubscriberCount = st.GetMaxSubscriberCount()
	c.LiveBufferSize = st.GetLiveBufferSize()
	c.ReadBatchSize = st.GetReadBatchSize()
	c.HistoryBufferSize = st.GetHistoryBufferSize()
	c.MessageTimeoutMs = st.GetMessageTimeoutMs()
	if t := st.GetMessageTimeoutTicks(); t > 0 {
		c.MessageTimeoutMs = int32(t / ticksPerMs)
	}
	c.CheckpointAfterMs = st.GetCheckpointAfterMs()
	if t := st.GetCheckpointAfterTicks(); t > 0 {
		c.CheckpointAfterMs = int32(t / ticksPerMs)
	}
	c.ConsumerStrategy = strategy
	switch {
	case c.MaxRetryCount < 0:
		return invalid("max retry count must not be negative, got %d", c.MaxRetryCount)
	case c.MessageTimeoutMs < 0:
		return invalid("message timeout must not be negative, got %d ms", c.MessageTimeoutMs)
	case c.CheckpointAfterMs < 0:
		return invalid("checkpoint after must not be negative, got %d ms", c.CheckpointAfterMs)
	case c.MinCheckpointCount < 0 || c.MaxCheckpointCount < 0:
		return invalid("checkpoint counts must not be negative")
	case c.MaxCheckpointCount > 0 && c.MinCheckpointCount > c.MaxCheckpointCount:
		return invalid("min checkpoint count %d is over max checkpoint count %d", c.MinCheckpointCount, c.MaxCheckpointCount)
	case c.LiveBufferSize < 0 || c.ReadBatchSize < 0 || c.HistoryBufferSize < 0 || c.MaxSubscriberCount < 0:
		return invalid("buffer sizes and max subscriber count must not be negative")
	}
	switch c.ConsumerStrategy {
	case strategyRoundRobin, strategyDispatchToSingle, strategyPinned, strategyPinnedByCorrelation:
	default:
		return invalid("unknown consumer strategy %q: use RoundRobin, DispatchToSingle or Pinned", c.ConsumerStrategy)
	}
	return nil
}

func strategyName(named string, old fmt.Stringer) string {
	if named != "" {
		return named
	}
	switch old.String() {
	case "RoundRobin":
		return strategyRoundRobin
	case "Pinned":
		return strategyPinned
	default:
		return strategyDispatchToSingle
	}
}

func positionString(p uint64) string { return fmt.Sprintf("C:%d/P:%d", p, p) }

// Create creates a group on a stream or $all.
func (s *persistentService) Create(ctx context.Context, req *persistent.CreateReq) (*persistent.CreateResp, error) {
	o := req.GetOptions()
	if o == nil {
		return nil, invalid("create carries no options")
	}
	c := groupConfig{Group: o.GetGroupName()}
	if c.Group == "" {
		return nil, invalid("group name is empty")
	}
	switch so := o.GetStreamOption().(type) {
	case *persistent.CreateReq_Options_Stream:
		name, err := streamName(so.Stream.GetStreamIdentifier())
		if err != nil {
			return nil, err
		}
		c.Stream = name
		switch {
		case so.Stream.GetEnd() != nil:
			c.StartFrom = "-1"
		case so.Stream.GetStart() != nil:
			c.StartFrom = "0"
		default:
			c.StartFrom = strconv.FormatUint(so.Stream.GetRevision(), 10)
		}
	case *persistent.CreateReq_Options_All:
		c.Stream = allStreamName
		a := so.All
		switch {
		case a.GetEnd() != nil:
			c.StartFrom = "C:-1/P:-1"
		case a.GetPosition() != nil:
			c.StartFrom = positionString(a.GetPosition().GetCommitPosition())
		default:
			c.StartFrom = "C:0/P:0"
		}
		if f := a.GetFilter(); f != nil {
			fc := &filterConfig{}
			var expr *persistent.CreateReq_AllOptions_FilterOptions_Expression
			switch v := f.GetFilter().(type) {
			case *persistent.CreateReq_AllOptions_FilterOptions_StreamIdentifier:
				expr = v.StreamIdentifier
			case *persistent.CreateReq_AllOptions_FilterOptions_EventType:
				expr = v.EventType
				fc.EventType = true
			default:
				return nil, invalid("filter names neither stream identifier nor event type")
			}
			fc.Prefixes, fc.Regex = expr.GetPrefix(), expr.GetRegex()
			if n := len(fc.Regex); n > s.cfg.MaxFilterRegex {
				return nil, invalid("filter regex is %d bytes, over the limit of %d (--max-filter-regex)", n, s.cfg.MaxFilterRegex)
			}
			if len(fc.Prefixes) == 0 && fc.Regex == "" {
				return nil, invalid("filter has neither prefixes nor a regex")
			}
			c.Filter = fc
			if _, err := c.filter(); err != nil {
				return nil, err
			}
		}
	default:
		// Clients before 21.10 name the stream in the deprecated field.
		name, err := streamName(o.GetStreamIdentifier())
		if err != nil {
			return nil, err
		}
		c.Stream = name
		c.StartFrom = strconv.FormatUint(o.GetSettings().GetRevision(), 10)
	}
	st := o.GetSettings()
	if st == nil {
		return nil, invalid("create carries no settings")
	}
	if err := s.authorize(ctx, c.Stream); err != nil {
		return nil, err
	}
	if err := applySettings(&c, st, strategyName(st.GetConsumerStrategy(), st.GetNamedConsumerStrategy())); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups[c.key()] != nil {
		return nil, status.Errorf(codes.AlreadyExists, "subscription group %q on stream %q exists", c.Group, c.Stream)
	}
	c.CheckpointBase = s.store.StreamRevision(c.checkpointStream())
	c.ParkedBase = s.store.StreamRevision(c.parkedStream())
	if err := s.saveLocked(ctx, &c, ""); err != nil {
		return nil, toStatus(ctx, err)
	}
	g, err := s.startGroup(c, true)
	if err != nil {
		return nil, err
	}
	s.groups[c.key()] = g
	return &persistent.CreateResp{}, nil
}

// Update changes a group's settings; its consumers are dropped and
// reconnect, as KurrentDB does.
func (s *persistentService) Update(ctx context.Context, req *persistent.UpdateReq) (*persistent.UpdateResp, error) {
	o := req.GetOptions()
	if o == nil {
		return nil, invalid("update carries no options")
	}
	var stream, startFrom string
	switch so := o.GetStreamOption().(type) {
	case *persistent.UpdateReq_Options_Stream:
		name, err := streamName(so.Stream.GetStreamIdentifier())
		if err != nil {
			return nil, err
		}
		stream = name
		switch {
		case so.Stream.GetEnd() != nil:
			startFrom = "-1"
		case so.Stream.GetStart() != nil:
			startFrom = "0"
		default:
			startFrom = strconv.FormatUint(so.Stream.GetRevision(), 10)
		}
	case *persistent.UpdateReq_Options_All:
		stream = allStreamName
		switch a := so.All; {
		case a.GetEnd() != nil:
			startFrom = "C:-1/P:-1"
		case a.GetPosition() != nil:
			startFrom = positionString(a.GetPosition().GetCommitPosition())
		default:
			startFrom = "C:0/P:0"
		}
	default:
		name, err := streamName(o.GetStreamIdentifier())
		if err != nil {
			return nil, err
		}
		stream = name
		startFrom = strconv.FormatUint(o.GetSettings().GetRevision(), 10)
	}
	st := o.GetSettings()
	if st == nil {
		return nil, invalid("update carries no settings")
	}
	if err := s.authorize(ctx, stream); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.groups[groupKey(stream, o.GetGroupName())]
	if old == nil {
		return nil, notFound(stream, o.GetGroupName())
	}
	c := old.cfg
	c.StartFrom = startFrom
	// Update names the strategy only by the deprecated enum, which has no
	// PinnedByCorrelation.
	strategy := strategyName("", st.GetNamedConsumerStrategy())
	if strategy == strategyPinned && c.ConsumerStrategy == strategyPinnedByCorrelation {
		strategy = c.ConsumerStrategy
	}
	if err := applySettings(&c, st, strategy); err != nil {
		return nil, err
	}
	if err := s.saveLocked(ctx, &c, ""); err != nil {
		return nil, toStatus(ctx, err)
	}
	old.stop(status.Error(codes.Aborted, "the subscription group was updated: reconnect"))
	g, err := s.startGroup(c, false)
	if err != nil {
		delete(s.groups, c.key())
		return nil, err
	}
	s.groups[c.key()] = g
	return &persistent.UpdateResp{}, nil
}

// Delete deletes a group and drops its consumers. Its checkpoint and parked
// streams stay; a group created later under the same name ignores them.
func (s *persistentService) Delete(ctx context.Context, req *persistent.DeleteReq) (*persistent.DeleteResp, error) {
	o := req.GetOptions()
	stream, err := streamOrAll(o.GetStreamIdentifier())
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, stream); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := groupKey(stream, o.GetGroupName())
	g := s.groups[key]
	if g == nil {
		return nil, notFound(stream, o.GetGroupName())
	}
	if err := s.saveLocked(ctx, nil, key); err != nil {
		return nil, toStatus(ctx, err)
	}
	delete(s.groups, key)
	g.stop(status.Error(codes.NotFound, "the subscription group was deleted"))
	return &persistent.DeleteResp{}, nil
}

// GetInfo describes one group.
func (s *persistentService) GetInfo(_ context.Context, req *persistent.GetInfoReq) (*persistent.GetInfoResp, error) {
	o := req.GetOptions()
	stream, err := streamOrAll(o.GetStreamIdentifier())
	if err != nil {
		return nil, err
	}
	g, err := s.group(stream, o.GetGroupName())
	if err != nil {
		return nil, err
	}
	return &persistent.GetInfoResp{SubscriptionInfo: g.info()}, nil
}

// List describes every group, or those of one stream or of $all.
func (s *persistentService) List(_ context.Context, req *persistent.ListReq) (*persistent.ListResp, error) {
	var only *string
	if f := req.GetOptions().GetListForStream(); f != nil {
		name := allStreamName
		if id := f.GetStream(); id != nil {
			n, err := streamName(id)
			if err != nil {
				return nil, err
			}
			name = n
		}
		only = &name
	}
	s.mu.Lock()
	groups := make([]*psGroup, 0, len(s.groups))
	for _, g := range s.groups {
		if only == nil || g.cfg.Stream == *only {
			groups = append(groups, g)
		}
	}
	s.mu.Unlock()
	if only != nil && len(groups) == 0 {
		return nil, status.Errorf(codes.NotFound, "no subscription group on stream %q", *only)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].cfg.key() < groups[j].cfg.key() })
	out := &persistent.ListResp{}
	for _, g := range groups {
		out.Subscriptions = append(out.Subscriptions, g.info())
	}
	return out, nil
}

// ReplayParked redelivers a group's parked messages, the oldest first, up
// to stop_at of them.
func (s *persistentService) ReplayParked(ctx context.Context, req *persistent.ReplayParkedReq) (*persistent.ReplayParkedResp, error) {
	o := req.GetOptions()
	stream, err := streamOrAll(o.GetStreamIdentifier())
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, stream); err != nil {
		return nil, err
	}
	g, err := s.group(stream, o.GetGroupName())
	if err != nil {
		return nil, err
	}
	limit := int64(-1)
	if v, ok := o.GetStopAtOption().(*persistent.ReplayParkedReq_Options_StopAt); ok && v.StopAt >= 0 {
		limit = v.StopAt
	}
	g.requestReplay(limit)
	return &persistent.ReplayParkedResp{}, nil
}

// RestartSubsystem stops every group, dropping its consumers, and starts
// them again from their stored settings and checkpoints.
func (s *persistentService) RestartSubsystem(ctx context.Context, _ *shared.Empty) (*shared.Empty, error) {
	if u, ok := ctx.Value(userKey{}).(User); ok && !u.Admin() {
		return nil, denied(u, "restart the persistent subscriptions subsystem")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		g.stop(status.Error(codes.Unavailable, "the persistent subscriptions subsystem restarted: reconnect"))
	}
	if err := s.load(); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &shared.Empty{}, nil
}

// authorize applies a secure server's rules of reading to a group's
// source: $all and system streams are for AdminsGroup only. The caller's
// user is in ctx (the authenticator put it there); an insecure server has
// none and allows everything.
func (s *persistentService) authorize(ctx context.Context, stream string) error {
	u, ok := ctx.Value(userKey{}).(User)
	if !ok || u.Admin() {
		return nil
	}
	if stream == allStreamName {
		return denied(u, "use a persistent subscription to $all")
	}
	if systemStream(stream) {
		return denied(u, "use a persistent subscription to system stream "+stream)
	}
	return nil
}

// persistentMethods are the methods ServerFeatures announces for the
// service; "all" on create tells clients that groups on $all exist.
func persistentMethods() []*serverfeatures.SupportedMethod {
	var out []*serverfeatures.SupportedMethod
	for _, m := range []string{"create", "update", "delete", "read", "getinfo", "replayparked", "list", "restartsubsystem"} {
		sm := &serverfeatures.SupportedMethod{ServiceName: persistentServiceName, MethodName: m}
		if m == "create" || m == "update" || m == "delete" || m == "read" {
			sm.Features = []string{"stream", "all"}
		}
		out = append(out, sm)
	}
	return out
}

// isPersistentBookkeeping reports whether stream is one the service writes
// for itself; groups on $all do not receive their events, which would
// otherwise feed each checkpoint back as a new message.
func isPersistentBookkeeping(stream string) bool {
	return stream == persistentConfigStream || strings.HasPrefix(stream, persistentStreamPrefix) ||
		strings.HasPrefix(stream, "$$"+persistentStreamPrefix)
}

// streamOrAll names the stream a group is on: id's, or $all when the
// request names none.
func streamOrAll(id *shared.StreamIdentifier) (string, error) {
	if id == nil {
		return allStreamName, nil
	}
	return streamName(id)
}
