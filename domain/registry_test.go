package domain_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// RegisteredEventNames returns the Go type names of the registered task
// events, by decoding each wire name.
func registeredEventNames(t *testing.T) []string {
	var names []string
	for _, wire := range domain.TaskEventTypes() {
		e, err := domain.DecodeEvent(wire, []byte(`{}`))
		require.NoError(t, err, wire)
		assert.Equal(t, wire, e.EventType(), "the wire name %s decodes to an event of another name", wire)
		names = append(names, reflect.TypeOf(e).Name())
	}
	sort.Strings(names)
	return names
}

// typeSwitchCases returns the type names in the case clauses of the type
// switches in a function (or method) of a file.
func typeSwitchCases(t *testing.T, file, function string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	require.NoError(t, err)
	var names []string
	found := false
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != function {
			continue
		}
		found = true
		ast.Inspect(fn, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSwitchStmt)
			if !ok {
				return true
			}
			for _, stmt := range ts.Body.List {
				for _, expr := range stmt.(*ast.CaseClause).List {
					switch x := expr.(type) {
					case *ast.Ident:
						names = append(names, x.Name)
					case *ast.SelectorExpr:
						names = append(names, x.Sel.Name)
					}
				}
			}
			return true
		})
	}
	require.True(t, found, "no function %s in %s", function, file)
	sort.Strings(names)
	return names
}

// TestEveryEventIsFolded fails when an event is registered without its
// case in Task.Apply (domain/protocol checks statuses, projections audits).
func TestEveryEventIsFolded(t *testing.T) {
	assert.Equal(t, registeredEventNames(t), typeSwitchCases(t, "task.go", "Apply"), "Task.Apply must fold every registered event, and only those")
}
