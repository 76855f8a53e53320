package processes

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Workflows gives the processes the registered workflow definitions.
type Workflows interface {
	// Workflow returns a version of the named workflow; version 0 means
	// the newest. An unknown name or version is domain.ErrUnknownWorkflow.
	Workflow(ctx context.Context, name string, version int) (*domain.Workflow, error)
}

// DefaultWorkflowRefresh is how long a registry trusts what it knows of a
// workflow's newest version, and of the list of workflows, before reading
// them again: a version registered by another instance is used for new
// orders within this time.
const DefaultWorkflowRefresh = time.Second

// Registry keeps workflow definitions in the event store: a stream per
// workflow with one event per version (domain.WorkflowStream), and a
// catalog stream naming them. Registered versions never change, so every
// instance caches them; only the newest version is read again, after
// Refresh. It is safe for concurrent use.
type Registry struct {
	Store EventStore
	Clock Clock
	// Refresh defaults to DefaultWorkflowRefresh.
	Refresh time.Duration

	mu        sync.Mutex
	versions  map[string][]*domain.Workflow
	checked   map[string]time.Time
	names     []string
	namesRead time.Time
	// latest is each workflow's newest version as the catalog names it (0
	// when the catalog predates versions there).
	latest map[string]int
}

// NewRegistry returns a registry over the store.
func NewRegistry(store EventStore, clock Clock) *Registry {
	if clock == nil {
		clock = SystemClock
	}
	return &Registry{Store: store, Clock: clock, Refresh: DefaultWorkflowRefresh,
		versions: map[string][]*domain.Workflow{}, checked: map[string]time.Time{}, latest: map[string]int{}}
}

// Apply registers w as the newest version of its workflow, unless it equals
// the newest version already (then that one is returned and changed is
// false). It runs Check first and registers nothing when Check finds a
// problem.
func (r *Registry) Apply(ctx context.Context, w *domain.Workflow, by string) (registered *domain.Workflow, changed bool, err error) {
	w, err = r.Check(ctx, w)
	if err != nil {
		return nil, false, err
	}
	for range DefaultMaxConflicts {
		versions, err := r.read(ctx, w.Name)
		if err != nil {
			return nil, false, err
		}
		if n := len(versions); n > 0 && versions[n-1].Equal(w) {
			return versions[n-1], false, nil
		}
		next := *w
		next.Version = len(versions) + 1
		def, err := next.MarshalDefinition()
		if err != nil {
			return nil, false, err
		}
		event := domain.WorkflowRegistered{Name: w.Name, Version: next.Version, Definition: def, RegisteredBy: by, RegisteredAt: r.Clock.Now().UTC()}
		batch, err := toNewEvents([]domain.Event{event}, domain.EventMetadata{CorrelationID: domain.WorkflowStream(w.Name), Actor: by})
		if err != nil {
			return nil, false, err
		}
		_, err = r.Store.Append(ctx, domain.WorkflowStream(w.Name), domain.ExpectAfter(int64(len(versions))-1), batch...)
		if errors.Is(err, domain.ErrConcurrencyConflict) {
			r.forget(w.Name)
			continue
		}
		if err != nil {
			return nil, false, errors.Wrapf(err, "register workflow %s version %d", w.Name, next.Version)
		}
		if err := r.catalog(ctx, w.Name, next.Version); err != nil {
			return nil, false, err
		}
		r.mu.Lock()
		r.versions[w.Name] = append(slices.Clip(versions), &next)
		r.checked[w.Name] = r.Clock.Now()
		r.mu.Unlock()
		return &next, true, nil
	}
	return nil, false, errors.Newf("workflow %s kept changing while it was registered; try again", w.Name)
}

// catalog records a new version of a workflow in the catalog stream. A
// crash before it leaves the version registered but unannounced: instances
// find it when they next read the workflow's stream (a pinned version, or
// the refresh of a catalog written before versions were recorded there),
// and the next Apply of the workflow announces it.
func (r *Registry) catalog(ctx context.Context, name string, version int) error {
	batch, err := toNewEvents([]domain.Event{domain.WorkflowNamed{Name: name, Version: version}}, domain.EventMetadata{CorrelationID: domain.WorkflowCatalogStream})
	if err != nil {
		return err
	}
	if _, err := r.Store.Append(ctx, domain.WorkflowCatalogStream, domain.ExpectAny(), batch...); err != nil {
		return errors.Wrapf(err, "add workflow %s version %d to the catalog", name, version)
	}
	r.mu.Lock()
	if !slices.Contains(r.names, name) {
		r.names = append(r.names, name)
		sort.Strings(r.names)
	}
	r.latest[name] = max(r.latest[name], version)
	r.mu.Unlock()
	return nil
}

// Check runs every check Apply runs and registers nothing. It returns w
// with its defaults filled in (domain.Workflow.WithDefaults, for a
// workflow built in Go), or a *domain.DefinitionError listing every
// problem at once: those of the definition (Validate), and a trigger that
// overlaps that of another registered workflow (domain.TriggerOverlap).
// POST /api/workflows?dryRun=true and sagactl workflows validate call it.
func (r *Registry) Check(ctx context.Context, w *domain.Workflow) (*domain.Workflow, error) {
	w = w.WithDefaults()
	problems := domain.ProblemsOf(w.Validate())
	others, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		if p, overlaps := domain.TriggerOverlap(w, o, "registered"); overlaps {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return nil, &domain.DefinitionError{Source: "workflow " + w.Name, Problems: problems}
	}
	return w, nil
}

// Workflow implements Workflows.
func (r *Registry) Workflow(ctx context.Context, name string, version int) (*domain.Workflow, error) {
	if version == 0 {
		// The catalog names each workflow's newest version: one read of it
		// per Refresh tells which workflows changed, instead of a read of
		// every workflow's stream.
		if _, err := r.Names(ctx, false); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	versions := r.versions[name]
	fresh := r.Clock.Now().Sub(r.checked[name]) < r.refresh()
	if newest := r.latest[name]; newest > 0 {
		fresh = len(versions) >= newest
	}
	r.mu.Unlock()
	if version > 0 && version <= len(versions) {
		return versions[version-1], nil
	}
	if version > len(versions) || !fresh {
		var err error
		if versions, err = r.read(ctx, name); err != nil {
			return nil, err
		}
	}
	switch {
	case len(versions) == 0:
		return nil, errors.Wrapf(domain.ErrUnknownWorkflow, "%q", name)
	case version == 0:
		return versions[len(versions)-1], nil
	case version > len(versions):
		return nil, errors.Wrapf(domain.ErrUnknownWorkflow, "%q has no version %d (newest is %d)", name, version, len(versions))
	}
	return versions[version-1], nil
}

// Versions returns every version of the named workflow, oldest first.
func (r *Registry) Versions(ctx context.Context, name string) ([]*domain.Workflow, error) {
	versions, err := r.read(ctx, name)
	if err == nil && len(versions) == 0 {
		err = errors.Wrapf(domain.ErrUnknownWorkflow, "%q", name)
	}
	return versions, err
}

// Names lists the registered workflows, sorted; fresh reads the catalog
// again whatever Refresh says.
func (r *Registry) Names(ctx context.Context, fresh bool) ([]string, error) {
	r.mu.Lock()
	if !fresh && r.namesRead.After(time.Time{}) && r.Clock.Now().Sub(r.namesRead) < r.refresh() {
		names := slices.Clone(r.names)
		r.mu.Unlock()
		return names, nil
	}
	r.mu.Unlock()
	recorded, err := r.Store.ReadStream(ctx, domain.WorkflowCatalogStream)
	if err != nil {
		return nil, errors.Wrap(err, "read the workflow catalog")
	}
	var names []string
	latest := map[string]int{}
	for _, e := range recorded {
		var n domain.WorkflowNamed
		if e.Type != domain.WorkflowNamedType || json.Unmarshal(e.Data, &n) != nil || n.Name == "" {
			continue
		}
		if !slices.Contains(names, n.Name) {
			names = append(names, n.Name)
		}
		latest[n.Name] = max(latest[n.Name], n.Version)
	}
	sort.Strings(names)
	r.mu.Lock()
	r.names, r.namesRead, r.latest = names, r.Clock.Now(), latest
	r.mu.Unlock()
	return slices.Clone(names), nil
}

// List returns the newest version of every registered workflow, by name.
func (r *Registry) List(ctx context.Context) ([]*domain.Workflow, error) {
	names, err := r.Names(ctx, false)
	if err != nil {
		return nil, err
	}
	out := make([]*domain.Workflow, 0, len(names))
	for _, name := range names {
		w, err := r.Workflow(ctx, name, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// AllVersions returns every version of every registered workflow, by name
// and then oldest first: tasks of older versions still run, and an await
// step of one waits on what its own version says.
func (r *Registry) AllVersions(ctx context.Context) ([]*domain.Workflow, error) {
	names, err := r.Names(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []*domain.Workflow
	for _, name := range names {
		// The newest version brings the cached ones up to date.
		newest, err := r.Workflow(ctx, name, 0)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		versions := r.versions[name]
		r.mu.Unlock()
		if len(versions) < newest.Version {
			versions = []*domain.Workflow{newest}
		}
		out = append(out, versions[:min(newest.Version, len(versions))]...)
	}
	return out, nil
}

// Select chooses the workflow a message starts: the one a saga-shaped order
// names (in its workflow and workflowVersion fields), else the one whose
// trigger matches the topic and event type. A trigger with a typeField
// reads the type there; an event without that field (a CloudEvent in
// binary mode, whose body is only its data) is read by its ce_type
// header. Nothing matching is domain.ErrUnknownWorkflow, with what was
// read where.
func (r *Registry) Select(ctx context.Context, topic string, doc domain.OrderDocument, ceType string) (*domain.Workflow, error) {
	name, version, err := doc.Requested()
	if err != nil {
		return nil, err
	}
	if name != "" {
		w, err := r.Workflow(ctx, name, version)
		if err != nil {
			return nil, err
		}
		if topic != protocol.OrdersTopic && !slices.Contains(w.Trigger.TopicsOrDefault(), topic) {
			return nil, errors.Wrapf(domain.ErrUnknownWorkflow, "%q does not start on topic %s", name, topic)
		}
		return w, nil
	}
	all, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var specific, generic []*domain.Workflow
	for _, w := range all {
		if !doc.Matches(typeSource(w.Trigger, doc), topic, ceType) {
			continue
		}
		if w.Trigger.Type != "" {
			specific = append(specific, w)
		} else {
			generic = append(generic, w)
		}
	}
	switch {
	case len(specific) == 1:
		return specific[0], nil
	case len(specific) == 0 && len(generic) == 1:
		return generic[0], nil
	}
	for _, w := range generic {
		if w.Name == domain.DefaultWorkflow {
			return w, nil
		}
	}
	if len(specific)+len(generic) == 0 {
		return nil, errors.Wrapf(domain.ErrUnknownWorkflow, "no workflow starts on topic %s%s", topic, typesRead(all, topic, doc, ceType))
	}
	var names []string
	for _, w := range append(specific, generic...) {
		names = append(names, w.Name)
	}
	return nil, errors.Wrapf(domain.ErrUnknownWorkflow, "several workflows start on topic %s (%s): name one in the order's workflow field", topic, strings.Join(names, ", "))
}

// typeSource returns the trigger Select matches a message against: tr,
// or, when tr reads the type at a typeField the message lacks, tr reading
// the ce_type header instead.
func typeSource(tr domain.Trigger, doc domain.OrderDocument) domain.Trigger {
	if tr.TypeField != "" {
		if v, ok := doc.Lookup(tr.TypeField); !ok || v == nil {
			tr.TypeField = ""
		}
	}
	return tr
}

// typesRead says, for a message no workflow starts on, which type it was
// found to have where: at the typeField of each trigger on the topic, or
// in its ce_type header.
func typesRead(all []*domain.Workflow, topic string, doc domain.OrderDocument, ceType string) string {
	var read []string
	note := func(s string) {
		if !slices.Contains(read, s) {
			read = append(read, s)
		}
	}
	header := "no ce_type header"
	if ceType != "" {
		header = "ce_type header " + strconv.Quote(ceType)
	}
	for _, w := range all {
		tr := w.Trigger
		if tr.Type == "" || !slices.Contains(tr.TopicsOrDefault(), topic) {
			continue
		}
		if tr.TypeField == "" || typeSource(tr, doc).TypeField == "" {
			if tr.TypeField != "" {
				note("no " + tr.TypeField + " field")
			}
			note(header)
			continue
		}
		v, _ := doc.Lookup(tr.TypeField)
		switch v := v.(type) {
		case string:
			note(tr.TypeField + " " + strconv.Quote(v))
		case json.Number:
			note(tr.TypeField + " " + string(v))
		default:
			note(tr.TypeField + " is not a string")
		}
	}
	if len(read) == 0 {
		if ceType == "" {
			return ""
		}
		return " and type " + ceType
	}
	return " for this event's type: read " + strings.Join(read, ", ")
}

// Topics lists the topics that start some registered workflow, and the
// orders topic, sorted.
func (r *Registry) Topics(ctx context.Context) ([]string, error) {
	all, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	set := []string{protocol.OrdersTopic}
	for _, w := range all {
		for _, t := range w.Trigger.TopicsOrDefault() {
			if !slices.Contains(set, t) {
				set = append(set, t)
			}
		}
	}
	sort.Strings(set)
	return set, nil
}

// Agents lists the agents the newest versions of the workflows use, sorted.
func (r *Registry) Agents(ctx context.Context) ([]string, error) {
	all, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var agents []string
	for _, w := range all {
		for _, a := range w.Agents() {
			if !slices.Contains(agents, a) {
				agents = append(agents, a)
			}
		}
	}
	sort.Strings(agents)
	return agents, nil
}

// read loads every version of a workflow from its stream.
func (r *Registry) read(ctx context.Context, name string) ([]*domain.Workflow, error) {
	recorded, err := r.Store.ReadStream(ctx, domain.WorkflowStream(name))
	if err != nil {
		return nil, errors.Wrapf(err, "read workflow %s", name)
	}
	versions := make([]*domain.Workflow, 0, len(recorded))
	for _, e := range recorded {
		if e.Type != domain.WorkflowRegisteredType {
			continue
		}
		var reg domain.WorkflowRegistered
		if err := json.Unmarshal(e.Data, &reg); err != nil {
			return nil, errors.Wrapf(err, "workflow %s revision %d", name, e.Revision)
		}
		w, err := parseStored(reg.Definition)
		if err != nil {
			return nil, errors.Wrapf(err, "workflow %s version %d as stored", name, reg.Version)
		}
		w.Version = len(versions) + 1
		versions = append(versions, w)
	}
	r.mu.Lock()
	if len(versions) >= len(r.versions[name]) {
		r.versions[name] = versions
	}
	r.checked[name] = r.Clock.Now()
	r.mu.Unlock()
	return versions, nil
}

// parseStored reads a definition as it was stored. One registered before a
// backoff multiplier below 1 was refused may hold a multiplier of 0, which
// always ran as 1: it reads as 1, so that its tasks go on as they ran.
func parseStored(def json.RawMessage) (*domain.Workflow, error) {
	w, err := domain.ParseDefinition(def)
	if !errors.Is(err, domain.ErrInvalidWorkflow) {
		return w, err
	}
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil {
		return nil, err
	}
	fixed := false
	fix := func(v any) {
		m, _ := v.(map[string]any)
		b, _ := m["backoff"].(map[string]any)
		if n, ok := b["multiplier"].(json.Number); ok && (n == "0" || n == "0.0") {
			b["multiplier"], fixed = 1, true
		}
	}
	steps, _ := doc["steps"].([]any)
	for _, s := range steps {
		fix(s)
		if m, ok := s.(map[string]any); ok {
			fix(m["compensation"])
		}
	}
	if !fixed {
		return nil, err
	}
	upgraded, mErr := json.Marshal(doc)
	if mErr != nil {
		return nil, err
	}
	return domain.ParseDefinition(upgraded)
}

func (r *Registry) forget(name string) {
	r.mu.Lock()
	delete(r.checked, name)
	r.mu.Unlock()
}

func (r *Registry) refresh() time.Duration {
	if r.Refresh <= 0 {
		return DefaultWorkflowRefresh
	}
	return r.Refresh
}
