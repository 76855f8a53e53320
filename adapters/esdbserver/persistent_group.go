package esdbserver

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// psMessage is an event a group has read and not yet finished with: it is
// acked, skipped or parked, or it is redelivered.
type psMessage struct {
	ev eslog.RecordedEvent
	// seq is the event's revision in a group on a stream, its position in
	// a group on $all: what checkpoints count.
	seq      uint64
	retries  int32
	consumer *psConsumer
	deadline time.Time
	reason   string
	// replayed marks a parked message being replayed: it is outside the
	// checkpointed sequence, which already passed it.
	replayed bool
}

// psConsumer is one connection of a group's Read.
type psConsumer struct {
	slots    int
	inFlight int
	total    int64
	from     string
	// queue holds the messages to send, taken by the Read handler.
	queue   []*psMessage
	notify  chan struct{}
	dropped chan struct{}
	dropErr error
	once    sync.Once
}

func (c *psConsumer) drop(err error) {
	c.once.Do(func() {
		c.dropErr = err
		close(c.dropped)
	})
}

// psGroup is a running subscription group: it reads its source into a
// buffer while it has consumers, hands messages out by its strategy,
// retries, parks and checkpoints. One goroutine (run) reads and writes the
// store; acks, nacks and consumers change its state under mu and wake it.
type psGroup struct {
	svc        *persistentService
	cfg        groupConfig
	all        bool
	filter     *eslog.Filter
	ckStream   string
	parkStream string
	ctx        context.Context
	cancel     context.CancelFunc

	mu          sync.Mutex
	consumers   []*psConsumer
	rr          int
	next        uint64 // next revision or position to read
	live        bool   // the last read reached the end
	changed     <-chan struct{}
	buffer      []*psMessage
	retry       []*psMessage
	inflight    map[[16]byte]*psMessage
	outstanding map[uint64]*psMessage
	ckNext      uint64 // where the last checkpoint resumes
	hasCk       bool
	processed   int
	lastCkAt    time.Time
	toPark      []*psMessage
	parkNext    uint64 // the oldest parked message not being replayed
	parkedLast  int64
	replayReq   bool
	replayLimit int64
	replaying   int
	replayTB    uint64
	truncate    bool
	totalItems  int64
	stopped     bool

	wake     chan struct{}
	stopc    chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newGroup(svc *persistentService, c groupConfig, created bool) (*psGroup, error) {
	filter, err := c.filter()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &psGroup{
		svc: svc, cfg: c, all: c.Stream == allStreamName, filter: filter,
		ckStream: c.checkpointStream(), parkStream: c.parkedStream(), ctx: ctx, cancel: cancel,
		inflight: map[[16]byte]*psMessage{}, outstanding: map[uint64]*psMessage{},
		wake: make(chan struct{}, 1), stopc: make(chan struct{}), done: make(chan struct{}),
		lastCkAt: time.Now(),
	}
	store := svc.store
	page, err := store.ReadStream(g.ckStream, eslog.Backwards, 0, true, 1)
	switch {
	case err != nil && !errors.Is(err, eslog.ErrStreamNotFound):
		cancel()
		return nil, errors.Wrapf(err, "read checkpoint of %s", c.key())
	case len(page.Events) == 1 && int64(page.Events[0].Revision) > c.CheckpointBase:
		at, err := g.parseCheckpoint(page.Events[0].Data)
		if err != nil {
			cancel()
			return nil, err
		}
		g.ckNext, g.hasCk, g.next = at+1, true, at+1
	default:
		g.next = g.startFrom()
		if created && g.next > 0 {
			// A group created at the end keeps that end across a restart.
			g.processed = 1
			g.maybeCheckpoint(true)
		}
	}
	g.parkedLast = store.StreamRevision(g.parkStream)
	g.parkNext = uint64(max(c.ParkedBase+1, 0))
	if first, err := store.ReadStream(g.parkStream, eslog.Forwards, g.parkNext, false, 1); err == nil && len(first.Events) == 1 {
		g.parkNext = first.Events[0].Revision
	} else {
		g.parkNext = uint64(max(g.parkedLast+1, int64(g.parkNext)))
	}
	return g, nil
}

func (g *psGroup) startFrom() uint64 {
	s := g.cfg.StartFrom
	if g.all {
		if s == "C:-1/P:-1" {
			if h := g.svc.store.HeadPosition(); h > 0 {
				return h + 1
			}
			return 0
		}
		c, _, _ := strings.Cut(strings.TrimPrefix(s, "C:"), "/")
		v, _ := strconv.ParseUint(c, 10, 64)
		return v
	}
	if s == "-1" {
		return uint64(g.svc.store.StreamRevision(g.cfg.Stream) + 1)
	}
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// parseCheckpoint reads a checkpoint event: a revision as a JSON number, or
// a position as the JSON string "C:n/P:n".
func (g *psGroup) parseCheckpoint(data []byte) (uint64, error) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, errors.Wrapf(err, "decode checkpoint of %s", g.cfg.key())
	}
	switch x := v.(type) {
	case float64:
		return uint64(x), nil
	case string:
		c, _, _ := strings.Cut(strings.TrimPrefix(x, "C:"), "/")
		n, err := strconv.ParseUint(c, 10, 64)
		if err != nil {
			return 0, errors.Wrapf(err, "decode checkpoint %q of %s", x, g.cfg.key())
		}
		return n, nil
	default:
		return 0, errors.Newf("checkpoint of %s is neither a revision nor a position: %s", g.cfg.key(), data)
	}
}

func (g *psGroup) formatSeq(seq uint64) string {
	if g.all {
		return positionString(seq)
	}
	return strconv.FormatUint(seq, 10)
}

func (g *psGroup) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func (g *psGroup) bufferCap() int {
	return max(int(g.cfg.HistoryBufferSize), int(g.cfg.LiveBufferSize), int(g.cfg.ReadBatchSize), 1)
}

// tickEvery is how often the group looks for timed-out messages and due
// checkpoints.
func (g *psGroup) tickEvery() time.Duration {
	d := time.Second
	if t := time.Duration(g.cfg.MessageTimeoutMs) * time.Millisecond / 4; t > 0 {
		d = min(d, t)
	}
	if t := time.Duration(g.cfg.CheckpointAfterMs) * time.Millisecond; t > 0 {
		d = min(d, t)
	}
	return max(d, 10*time.Millisecond)
}

func (g *psGroup) run() {
	defer close(g.done)
	tick := time.NewTicker(g.tickEvery())
	defer tick.Stop()
	for {
		g.pump()
		g.mu.Lock()
		var changed <-chan struct{}
		if g.live && len(g.consumers) > 0 {
			changed = g.changed
		}
		g.mu.Unlock()
		select {
		case <-g.wake:
		case <-changed:
		case <-tick.C:
			g.expire(time.Now())
		case <-g.stopc:
			g.flushParks()
			g.maybeCheckpoint(true)
			return
		}
	}
}

func (g *psGroup) pump() {
	g.flushParks()
	g.replayParked()
	g.truncateParked()
	g.fill()
	g.mu.Lock()
	g.dispatchLocked(time.Now())
	g.mu.Unlock()
	g.maybeCheckpoint(false)
}

func (g *psGroup) read(next uint64, n int) (eslog.Page, error) {
	lim := eslog.ReadLimits{Events: n, Bytes: g.svc.cfg.MaxReadBytes}
	if g.all {
		if g.filter != nil {
			lim.Examine = g.svc.cfg.MaxSearchWindow
		}
		return g.svc.store.ReadAllContext(g.ctx, eslog.Forwards, eslog.AllFrom{Position: next}, lim, g.filter)
	}
	page, err := g.svc.store.ReadStreamContext(g.ctx, g.cfg.Stream, eslog.Forwards, next, false, lim)
	var deleted *eslog.StreamDeletedError
	if errors.Is(err, eslog.ErrStreamNotFound) || errors.As(err, &deleted) {
		page.End = true
		return page, nil
	}
	return page, err
}

func cloneEvent(e *eslog.RecordedEvent) eslog.RecordedEvent {
	out := *e
	out.Data = bytes.Clone(e.Data)
	out.Metadata = bytes.Clone(e.Metadata)
	return out
}

// fill reads the source into the buffer while the group has consumers and
// room, until it reaches the end; then it reads again after the next
// commit.
func (g *psGroup) fill() {
	for {
		g.mu.Lock()
		want := g.bufferCap() - len(g.buffer)
		if len(g.consumers) == 0 || want <= 0 {
			g.mu.Unlock()
			return
		}
		if g.live {
			select {
			case <-g.changed:
				g.live = false
			default:
				g.mu.Unlock()
				return
			}
		}
		next := g.next
		g.mu.Unlock()
		page, err := g.read(next, min(want, max(int(g.cfg.ReadBatchSize), 1)))
		if err != nil {
			if g.ctx.Err() == nil {
				g.svc.log.Error("persistent subscription cannot read its source", "group", g.cfg.key(), "err", err)
			}
			g.mu.Lock()
			retry := make(chan struct{})
			time.AfterFunc(time.Second, func() { close(retry) })
			g.live, g.changed = true, retry
			g.mu.Unlock()
			return
		}
		g.mu.Lock()
		for i := range page.Events {
			e := &page.Events[i]
			if g.all && isPersistentBookkeeping(e.Stream) {
				continue
			}
			m := &psMessage{ev: cloneEvent(e), seq: e.Revision}
			if g.all {
				m.seq = e.Position
			}
			g.buffer = append(g.buffer, m)
			g.outstanding[m.seq] = m
		}
		if page.Examined > 0 {
			g.next = page.Last + 1
		}
		if page.End {
			g.live, g.changed = true, page.Changed
		}
		g.mu.Unlock()
		if page.End {
			return
		}
	}
}

// dispatchLocked hands out retries first, then the buffer, while consumers
// have free slots.
func (g *psGroup) dispatchLocked(now time.Time) {
	g.retry = g.dispatchQueue(g.retry, now)
	g.buffer = g.dispatchQueue(g.buffer, now)
}

func (g *psGroup) freeSlots() int {
	n := 0
	for _, c := range g.consumers {
		n += max(c.slots-c.inFlight, 0)
	}
	return n
}

func (g *psGroup) dispatchQueue(q []*psMessage, now time.Time) []*psMessage {
	out := q[:0]
	for i, m := range q {
		if g.freeSlots() == 0 {
			out = append(out, q[i:]...)
			break
		}
		if _, busy := g.inflight[m.ev.ID]; busy {
			out = append(out, m)
			continue
		}
		c := g.pick(m)
		if c == nil {
			out = append(out, m)
			continue
		}
		g.send(c, m, now)
	}
	clear(q[len(out):])
	return out
}

// pick chooses the consumer for m by the group's strategy, or nil when it
// must wait.
func (g *psGroup) pick(m *psMessage) *psConsumer {
	n := len(g.consumers)
	free := func(c *psConsumer) bool { return c.inFlight < c.slots }
	switch g.cfg.ConsumerStrategy {
	case strategyDispatchToSingle:
		for _, c := range g.consumers {
			if free(c) {
				return c
			}
		}
	case strategyPinned, strategyPinnedByCorrelation:
		h := fnv.New32a()
		_, _ = h.Write([]byte(m.ev.Stream))
		if c := g.consumers[int(h.Sum32()%uint32(n))]; free(c) {
			return c
		}
	default:
		for i := range n {
			c := g.consumers[(g.rr+i)%n]
			if free(c) {
				g.rr = (g.rr + i + 1) % n
				return c
			}
		}
	}
	return nil
}

func (g *psGroup) send(c *psConsumer, m *psMessage, now time.Time) {
	m.consumer = c
	m.deadline = time.Time{}
	if g.cfg.MessageTimeoutMs > 0 {
		m.deadline = now.Add(time.Duration(g.cfg.MessageTimeoutMs) * time.Millisecond)
	}
	c.inFlight++
	c.total++
	g.inflight[m.ev.ID] = m
	c.queue = append(c.queue, m)
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// take returns the messages to send to c, with their retry counts.
func (g *psGroup) take(c *psConsumer) ([]eslog.RecordedEvent, []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var evs []eslog.RecordedEvent
	var retries []int32
	for i, m := range c.queue {
		// A message that timed out before it was sent went elsewhere, or
		// came back to c and is queued again later.
		if m.consumer == c && !slices.Contains(c.queue[i+1:], m) {
			evs = append(evs, m.ev)
			retries = append(retries, m.retries)
		}
	}
	c.queue = c.queue[:0]
	return evs, retries
}

func (g *psGroup) release(m *psMessage) {
	delete(g.inflight, m.ev.ID)
	if m.consumer != nil {
		m.consumer.inFlight--
		m.consumer = nil
	}
}

func (g *psGroup) finishLocked(m *psMessage) {
	g.totalItems++
	if m.replayed {
		if g.replaying--; g.replaying == 0 {
			g.truncate = true
		}
		return
	}
	delete(g.outstanding, m.seq)
	g.processed++
}

// retryLocked redelivers m, or parks it once it was retried
// max_retry_count times.
func (g *psGroup) retryLocked(m *psMessage, reason string) {
	m.retries++
	if m.retries > g.cfg.MaxRetryCount {
		m.reason = reason
		g.toPark = append(g.toPark, m)
		return
	}
	g.retry = append(g.retry, m)
}

func (g *psGroup) inflightOf(c *psConsumer, id [16]byte) *psMessage {
	m := g.inflight[id]
	if m == nil || m.consumer != c {
		return nil
	}
	return m
}

func (g *psGroup) ack(c *psConsumer, ids [][16]byte) {
	g.mu.Lock()
	for _, id := range ids {
		if m := g.inflightOf(c, id); m != nil {
			g.release(m)
			g.finishLocked(m)
		}
	}
	g.mu.Unlock()
	g.poke()
}

func (g *psGroup) nack(c *psConsumer, ids [][16]byte, action persistent.ReadReq_Nack_Action, reason string) {
	g.mu.Lock()
	stop := false
	for _, id := range ids {
		m := g.inflightOf(c, id)
		if m == nil {
			continue
		}
		g.release(m)
		switch action {
		case persistent.ReadReq_Nack_Park:
			m.reason = reason
			g.toPark = append(g.toPark, m)
		case persistent.ReadReq_Nack_Skip:
			g.finishLocked(m)
		case persistent.ReadReq_Nack_Stop:
			g.retry = append(g.retry, m)
			stop = true
		default:
			g.retryLocked(m, reason)
		}
	}
	var drop []*psConsumer
	if stop {
		drop = append(drop, g.consumers...)
	}
	g.mu.Unlock()
	for _, d := range drop {
		d.drop(status.Error(codes.Aborted, "a consumer nacked a message with stop: the subscription stopped"))
	}
	g.poke()
}

// expire retries the messages whose timeout passed.
func (g *psGroup) expire(now time.Time) {
	g.mu.Lock()
	for _, m := range g.inflight {
		if !m.deadline.IsZero() && now.After(m.deadline) {
			g.release(m)
			g.retryLocked(m, "message timeout")
		}
	}
	g.mu.Unlock()
}

func (g *psGroup) join(c *psConsumer) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return status.Error(codes.Unavailable, "the subscription group is restarting: retry")
	}
	if m := int(g.cfg.MaxSubscriberCount); m > 0 && len(g.consumers) >= m {
		return status.Errorf(codes.FailedPrecondition, "subscription group %q has its maximum of %d subscribers", g.cfg.Group, m)
	}
	g.consumers = append(g.consumers, c)
	g.poke()
	return nil
}

// leave removes c; its messages in flight go back to the front of the
// retry queue, their retry counts unchanged.
func (g *psGroup) leave(c *psConsumer) {
	g.mu.Lock()
	for i, x := range g.consumers {
		if x == c {
			g.consumers = append(g.consumers[:i], g.consumers[i+1:]...)
			break
		}
	}
	var back []*psMessage
	for _, m := range g.inflight {
		if m.consumer == c {
			g.release(m)
			back = append(back, m)
		}
	}
	g.retry = append(back, g.retry...)
	g.mu.Unlock()
	g.poke()
}

// stop drops the consumers with err, then writes parked messages and the
// checkpoint and ends the group's goroutine.
func (g *psGroup) stop(err error) {
	g.stopOnce.Do(func() {
		g.mu.Lock()
		g.stopped = true
		cs := g.consumers
		g.consumers = nil
		g.mu.Unlock()
		for _, c := range cs {
			c.drop(err)
		}
		close(g.stopc)
		<-g.done
		g.cancel()
	})
}

// flushParks writes the messages to park to the parked stream as links;
// they are finished once written.
func (g *psGroup) flushParks() {
	g.mu.Lock()
	ms := g.toPark
	g.toPark = nil
	g.mu.Unlock()
	if len(ms) == 0 {
		return
	}
	events := make([]eslog.ProposedEvent, len(ms))
	for i, m := range ms {
		meta, _ := json.Marshal(map[string]any{"$reason": m.reason, "$retries": m.retries})
		events[i] = eslog.ProposedEvent{
			ID: uuid.New(), Type: linkEventType, ContentType: "application/octet-stream", Metadata: meta,
			Data: []byte(strconv.FormatUint(m.ev.Revision, 10) + "@" + m.ev.Stream),
		}
	}
	res, err := g.svc.store.Append(context.Background(), g.parkStream, eslog.Any, events)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.svc.log.Error("persistent subscription cannot park messages; retrying", "group", g.cfg.key(), "err", err)
		g.toPark = append(ms, g.toPark...)
		return
	}
	// With nothing parked, the new links are the first to count: a parked
	// stream truncated past all its links reads as having none, so its
	// last revision was not known when the group started.
	if first := uint64(res.Revision) + 1 - uint64(len(ms)); int64(g.parkNext) > g.parkedLast {
		g.parkNext = max(g.parkNext, first)
	}
	g.parkedLast = res.Revision
	for _, m := range ms {
		g.finishLocked(m)
	}
}

func (g *psGroup) requestReplay(limit int64) {
	g.mu.Lock()
	g.replayReq, g.replayLimit = true, limit
	g.mu.Unlock()
	g.poke()
}

// replayParked queues the parked messages for redelivery, each resolved to
// the event its link names.
func (g *psGroup) replayParked() {
	g.mu.Lock()
	if !g.replayReq {
		g.mu.Unlock()
		return
	}
	g.replayReq = false
	from, last, limit := g.parkNext, g.parkedLast, g.replayLimit
	g.mu.Unlock()
	if int64(from) > last {
		return
	}
	n := int64(last) - int64(from) + 1
	if limit >= 0 {
		n = min(n, limit)
	}
	var msgs []*psMessage
	next := from
	for n > 0 {
		page, err := g.svc.store.ReadStream(g.parkStream, eslog.Forwards, next, false, int(min(n, pageSize)))
		if err != nil || page.Examined == 0 {
			break
		}
		for i := range page.Events {
			link := &page.Events[i]
			revText, stream, ok := strings.Cut(string(link.Data), "@")
			rev, err := strconv.ParseUint(revText, 10, 64)
			if !ok || err != nil {
				continue
			}
			orig, err := g.svc.store.ReadStream(stream, eslog.Forwards, rev, false, 1)
			if err != nil || len(orig.Events) != 1 || orig.Events[0].Revision != rev {
				continue
			}
			msgs = append(msgs, &psMessage{ev: cloneEvent(&orig.Events[0]), seq: orig.Events[0].Position, replayed: true})
		}
		n -= int64(page.Examined)
		next = page.Last + 1
		if page.End {
			break
		}
	}
	g.mu.Lock()
	g.retry = append(g.retry, msgs...)
	g.replaying += len(msgs)
	g.parkNext, g.replayTB = next, next
	if g.replaying == 0 {
		g.truncate = true
	}
	g.mu.Unlock()
}

// truncateParked hides the replayed parked messages once every one of them
// is finished: until then a crash leaves them parked.
func (g *psGroup) truncateParked() {
	g.mu.Lock()
	if !g.truncate {
		g.mu.Unlock()
		return
	}
	g.truncate = false
	tb := g.replayTB
	g.mu.Unlock()
	meta, _ := json.Marshal(map[string]any{"$tb": tb})
	_, err := g.svc.store.Append(context.Background(), eslog.MetadataStreamOf(g.parkStream), eslog.Any, []eslog.ProposedEvent{{
		ID: uuid.New(), Type: "$metadata", ContentType: "application/json", Data: meta,
	}})
	if err != nil {
		g.svc.log.Error("persistent subscription cannot truncate its parked stream", "group", g.cfg.key(), "err", err)
	}
}

// maybeCheckpoint writes where the group would resume, the oldest
// unfinished message or else the next to read, when it moved and is due:
// max_checkpoint_count finished messages, or min_checkpoint_count and
// checkpoint_after, or always when forced.
func (g *psGroup) maybeCheckpoint(force bool) {
	g.mu.Lock()
	at := g.next
	for seq := range g.outstanding {
		at = min(at, seq)
	}
	moved := at != g.ckNext || !g.hasCk
	due := force && g.processed > 0
	if !force {
		after := time.Duration(g.cfg.CheckpointAfterMs) * time.Millisecond
		due = (g.cfg.MaxCheckpointCount > 0 && g.processed >= int(g.cfg.MaxCheckpointCount)) ||
			(g.processed >= max(int(g.cfg.MinCheckpointCount), 1) && time.Since(g.lastCkAt) >= after)
	}
	g.mu.Unlock()
	if !moved || !due || at == 0 {
		return
	}
	if err := g.writeCheckpoint(at - 1); err != nil {
		if g.ctx.Err() == nil {
			g.svc.log.Error("persistent subscription cannot write its checkpoint", "group", g.cfg.key(), "err", err)
		}
		return
	}
	g.mu.Lock()
	g.ckNext, g.hasCk, g.processed, g.lastCkAt = at, true, 0, time.Now()
	g.mu.Unlock()
}

func (g *psGroup) writeCheckpoint(last uint64) error {
	store := g.svc.store
	if store.StreamRevision(g.ckStream) == eslog.NoStream {
		// Only the last checkpoint matters.
		if _, err := store.Append(context.Background(), eslog.MetadataStreamOf(g.ckStream), eslog.Any, []eslog.ProposedEvent{{
			ID: uuid.New(), Type: "$metadata", ContentType: "application/json", Data: []byte(`{"$maxCount":1}`),
		}}); err != nil {
			return err
		}
	}
	var data []byte
	if g.all {
		data, _ = json.Marshal(positionString(last))
	} else {
		data = strconv.AppendUint(nil, last, 10)
	}
	_, err := store.Append(context.Background(), g.ckStream, eslog.Any, []eslog.ProposedEvent{{
		ID: uuid.New(), Type: checkpointEventType, ContentType: "application/json", Data: data,
	}})
	return err
}

// info describes the group as GetInfo and List answer.
func (g *psGroup) info() *persistent.SubscriptionInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &g.cfg
	state := "Live"
	if !g.live {
		state = "Behind"
	}
	out := &persistent.SubscriptionInfo{
		EventSource: c.Stream, GroupName: c.Group, Status: state,
		TotalItems: g.totalItems, ResolveLinkTos: c.ResolveLinks, StartFrom: c.StartFrom,
		MessageTimeoutMilliseconds: c.MessageTimeoutMs, ExtraStatistics: c.ExtraStatistics,
		MaxRetryCount: c.MaxRetryCount, LiveBufferSize: c.LiveBufferSize, BufferSize: c.HistoryBufferSize,
		ReadBatchSize: c.ReadBatchSize, CheckPointAfterMilliseconds: c.CheckpointAfterMs,
		MinCheckPointCount: c.MinCheckpointCount, MaxCheckPointCount: c.MaxCheckpointCount,
		ReadBufferCount: int32(len(g.buffer)), RetryBufferCount: int32(len(g.retry)),
		TotalInFlightMessages: int32(len(g.inflight)), OutstandingMessagesCount: int32(len(g.inflight)),
		NamedConsumerStrategy: c.ConsumerStrategy, MaxSubscriberCount: c.MaxSubscriberCount,
		ParkedMessageCount: max(g.parkedLast+1-int64(g.parkNext), 0),
	}
	if g.hasCk && g.ckNext > 0 {
		out.LastCheckpointedEventPosition = g.formatSeq(g.ckNext - 1)
	}
	if g.next > 0 {
		out.LastKnownEventPosition = g.formatSeq(g.next - 1)
	}
	for _, cs := range g.consumers {
		out.Connections = append(out.Connections, &persistent.SubscriptionInfo_ConnectionInfo{
			From: cs.from, TotalItems: cs.total, AvailableSlots: int32(max(cs.slots-cs.inFlight, 0)),
			InFlightMessages: int32(cs.inFlight),
		})
	}
	return out
}
