package domain

import (
	"fmt"
	"slices"
)

// TriggerOverlap returns a problem of w's trigger when it overlaps that of
// other, a different workflow (same name: none), described by where
// ("registered", "in flows/b.yaml"; may be empty): when one event could
// start both. On a topic other than DefaultTriggerTopic two workflows
// overlap when they share the topic and one of them gives no type or
// both give the same; from then on such an event starts only one of them
// or, dead-lettered, neither, so one team's workflow would silently stop
// another's. On DefaultTriggerTopic, whose saga-shaped orders name their
// workflow, only the same type overlaps.
func TriggerOverlap(w, other *Workflow, where string) (Problem, bool) {
	if w.Name == other.Name {
		return Problem{}, false
	}
	a, b := w.Trigger, other.Trigger
	for i, topic := range a.TopicsOrDefault() {
		if !slices.Contains(b.TopicsOrDefault(), topic) {
			continue
		}
		var what string
		switch {
		case a.Type != "" && a.Type == b.Type:
			what = fmt.Sprintf("both start on topic %s for type %s", topic, a.Type)
		case topic == DefaultTriggerTopic:
			continue
		case a.Type == "" && b.Type == "":
			what = fmt.Sprintf("both start on topic %s for every event", topic)
		case a.Type == "":
			what = fmt.Sprintf("both start on topic %s: %q for every event, %q for type %s", topic, w.Name, other.Name, b.Type)
		case b.Type == "":
			what = fmt.Sprintf("both start on topic %s: %q for every event, %q for type %s", topic, other.Name, w.Name, a.Type)
		default:
			continue // different types
		}
		path := "trigger"
		if len(a.Topics) > 0 {
			path = fmt.Sprintf("trigger.topics[%d]", i)
		}
		otherName := fmt.Sprintf("%q", other.Name)
		if where != "" {
			otherName += " (" + where + ")"
		}
		return Problem{Path: path, Message: fmt.Sprintf("workflows %q and %s %s, so one event would be claimed by both; "+
			"give each a type or a topic of its own", w.Name, otherName, what)}, true
	}
	return Problem{}, false
}
