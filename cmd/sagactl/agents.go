package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// agents lists the agents with their instances, or one agent, from GET
// /api/agents.
func agents(ctx context.Context, args []string) error {
	fs, c := flags("agents")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return errors.New("usage: sagactl agents [flags] [NAME]")
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	if fs.NArg() == 1 {
		var v protocol.AgentView
		if err := call(ctx, http.MethodGet, c.api+"/api/agents/"+url.PathEscape(fs.Arg(0)), nil, &v); err != nil {
			return err
		}
		if *c.output == outputJSON {
			return printJSON(v)
		}
		return printAgents([]protocol.AgentView{v})
	}
	var list protocol.AgentList
	if err := call(ctx, http.MethodGet, c.api+"/api/agents", nil, &list); err != nil {
		return err
	}
	if *c.output == outputJSON {
		return printJSON(list)
	}
	return printAgents(list.Agents)
}

// printAgents prints a row per agent (its totals, instance "*") and a row
// per instance. What instances report is shown escaped: it comes from
// whatever wrote to saga.agents.
func printAgents(views []protocol.AgentView) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tINSTANCE\tHEALTH\tIN FLIGHT/CAP\tHELD H/N/L\tWAITING H/N/L\tQUEUED H/N/L\tREASON")
	for _, v := range views {
		name := topics.Preview([]byte(v.Name), 60)
		queued := bandsOf(v.Queued)
		if v.QueueError != "" {
			queued = "?"
		}
		t := v.Totals
		note := ""
		switch {
		case t.Live == 0 && len(v.Instances) == 0:
			note = "no instance sends heartbeats"
		case t.Live == 0:
			note = "every instance is gone"
		}
		if !v.Registered {
			note = strings.TrimPrefix(note+"; no registered workflow names it", "; ")
		}
		if v.QueueError != "" {
			note = strings.TrimPrefix(note+"; queued unknown: "+topics.Preview([]byte(v.QueueError), 80), "; ")
		}
		limits := ""
		if t.GlobalLimit > 0 {
			limits = fmt.Sprintf(" (limit %d)", t.GlobalLimit)
		}
		fmt.Fprintf(tw, "%s\t*\t%d/%d healthy\t%d/%d%s\t%s\t%s\t%s\t%s\n", name, t.Healthy, t.Live, t.InFlight, t.Capacity, limits,
			bandsOf(intsToInt64(v.Held)), bandsOf(intsToInt64(t.Waiting)), queued, dash(note))
		for _, in := range v.Instances {
			health := topics.Preview([]byte(in.Health), 20)
			if in.Gone {
				health = "gone (" + health + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t-\t%s\t-\t%s\n", name, topics.Preview([]byte(in.Instance), 60), health, in.InFlight, in.Capacity,
				bandsOf(intsToInt64(in.Waiting)), dash(topics.Preview([]byte(in.Reason), 80)))
		}
	}
	return tw.Flush()
}

// bandsOf writes counts by priority as high/normal/low.
func bandsOf(counts map[domain.Priority]int64) string {
	parts := make([]string, 0, 3)
	for _, p := range domain.Priorities() {
		parts = append(parts, fmt.Sprint(counts[p]))
	}
	return strings.Join(parts, "/")
}

func intsToInt64(m map[domain.Priority]int) map[domain.Priority]int64 {
	out := make(map[domain.Priority]int64, len(m))
	for p, n := range m {
		out[p] = int64(n)
	}
	return out
}
