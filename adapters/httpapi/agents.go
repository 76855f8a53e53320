package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/sagaengine/saga/domain/protocol"
)

// Agents is the view of agents the API serves: every agent known from its
// instances' heartbeats or named by a registered workflow.
type Agents interface {
	// Agents lists every agent, by name.
	Agents(ctx context.Context) (protocol.AgentList, error)
	// Agent returns one agent; false when neither heartbeats nor
	// workflows name it.
	Agent(ctx context.Context, name string) (protocol.AgentView, bool, error)
}

// AgentsAPI serves the agents' view, to mount with Handler (behind its
// guard, so a viewer's token reads it):
//
//	GET /api/agents         every agent (a protocol.AgentList)
//	GET /api/agents/{name}  one agent (a protocol.AgentView), 404 if unknown
//
// Neither takes a query parameter; any is refused (400).
func AgentsAPI(agents Agents) []Mount {
	return []Mount{
		{Pattern: "GET /api/agents", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !noParams(w, r) {
				return
			}
			list, err := agents.Agents(r.Context())
			if err != nil {
				writeError(w, http.StatusInternalServerError, err.Error())
				return
			}
			writeJSON(w, http.StatusOK, list)
		})},
		{Pattern: "GET /api/agents/{name}", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !noParams(w, r) {
				return
			}
			name := r.PathValue("name")
			v, ok, err := agents.Agent(r.Context(), name)
			switch {
			case err != nil:
				writeError(w, http.StatusInternalServerError, err.Error())
			case !ok:
				writeError(w, http.StatusNotFound, "no agent "+strconv.Quote(name)+": no workflow names it and no instance of it sends heartbeats")
			default:
				writeJSON(w, http.StatusOK, v)
			}
		})},
	}
}

// noParams refuses a request with query parameters where none is taken.
func noParams(w http.ResponseWriter, r *http.Request) bool {
	params := r.URL.Query()
	if len(params) == 0 {
		return true
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, strconv.Quote(name))
	}
	writeError(w, http.StatusBadRequest, "unknown parameter "+strings.Join(names, ", ")+"; this request takes none")
	return false
}
