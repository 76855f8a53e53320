package main

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

// logStopped logs why sagad stopped. The problems of workflow definitions
// (a refused --workflows directory) are logged one record each, with the
// file, line, path and problem as attributes; the last record says that
// sagad stopped, in one line. A log line never holds a literal \n.
func logStopped(logger *slog.Logger, err error) {
	found := false
	walkErrors(err, func(e error) bool {
		switch e := e.(type) {
		case *workflowfile.DirError:
			for _, fileErr := range e.Errs {
				var def *domain.DefinitionError
				if !errors.As(fileErr, &def) {
					logger.Error("workflow definition file unreadable", "err", fileErr)
					found = true
				}
			}
		case *domain.DefinitionError:
			for _, p := range e.Problems {
				var attrs []any
				if e.Source != "" {
					attrs = append(attrs, "source", e.Source)
				}
				if p.Line > 0 {
					attrs = append(attrs, "line", p.Line)
				}
				if p.Path != "" {
					attrs = append(attrs, "path", p.Path)
				}
				logger.Error("workflow definition problem", append(attrs, "problem", p.Message)...)
				found = true
			}
			return false
		}
		return true
	})
	msg := err.Error()
	if found {
		// The lines after the first are the problems logged above.
		msg, _, _ = strings.Cut(msg, "\n")
		msg += " (each problem is logged above)"
	}
	logger.Error("sagad stopped", "err", strings.ReplaceAll(msg, "\n", "; "))
}

// walkErrors calls visit on err and, while visit says so, on every error
// it wraps, depth first.
func walkErrors(err error, visit func(error) bool) {
	if err == nil || !visit(err) {
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, visit)
		}
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), visit)
	}
}
