package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// agentsPage is the agents page's data.
type agentsPage struct {
	List  protocol.AgentList
	Error string
}

// agents shows every agent: its instances as their heartbeats tell, the
// totals of the live ones, and the commands queued for it.
func (c *console) agents(w http.ResponseWriter, r *http.Request) {
	var d agentsPage
	if c.cfg.Agents == nil {
		d.Error = "This process has no view of agents."
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		list, err := c.cfg.Agents.Agents(ctx)
		if err != nil {
			d.Error = "The agents cannot be read: " + err.Error()
		}
		d.List = list
	}
	c.render(w, r, "agents.html", "Agents", d)
}

// bands writes counts by priority as high/normal/low, or "-" for none
// (map[domain.Priority]int or int64).
func bands(counts any) string {
	var get func(domain.Priority) (int64, bool)
	switch m := counts.(type) {
	case map[domain.Priority]int:
		if m == nil {
			return "-"
		}
		get = func(p domain.Priority) (int64, bool) { n, ok := m[p]; return int64(n), ok }
	case map[domain.Priority]int64:
		if m == nil {
			return "-"
		}
		get = func(p domain.Priority) (int64, bool) { n, ok := m[p]; return n, ok }
	default:
		return "-"
	}
	parts := make([]string, 0, 3)
	for _, p := range domain.Priorities() {
		n, _ := get(p)
		parts = append(parts, fmt.Sprint(n))
	}
	return strings.Join(parts, "/")
}
