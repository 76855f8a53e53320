package workflowfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"gopkg.in/yaml.v3"

	"github.com/sagaengine/saga/domain"
)

// MaxFileBytes bounds a definition file.
const MaxFileBytes = 1 << 20

// ErrUnsupportedFile is returned by Parse for a file name that does not end
// in .yaml, .yml or .json.
var ErrUnsupportedFile = errors.New("not a workflow definition file: want .yaml, .yml or .json")

// IsDefinitionFile reports whether a file name is one Parse and LoadDir
// read: it ends in .yaml, .yml or .json (in any case).
func IsDefinitionFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Parse reads the definition in data, named name (a file name: its
// extension says whether it is YAML or JSON). Problems are reported in a
// *domain.DefinitionError whose Source is name, each with its line.
func Parse(name string, data []byte) (*domain.Workflow, error) {
	w, _, err := parse(name, data)
	return w, err
}

// parse is Parse that also returns the YAML node tree (nil when the file
// could not be read as YAML), for LoadDir to find lines of its own.
func parse(name string, data []byte) (*domain.Workflow, *yaml.Node, error) {
	if !IsDefinitionFile(name) {
		return nil, nil, errors.Wrapf(ErrUnsupportedFile, "%s", name)
	}
	fail := func(problems ...domain.Problem) error {
		return &domain.DefinitionError{Source: name, Problems: problems}
	}
	if len(data) > MaxFileBytes {
		return nil, nil, fail(domain.Problem{Message: fmt.Sprintf("the file is %d bytes, over the limit of %d", len(data), MaxFileBytes)})
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, fail(domain.Problem{Message: "the file is empty"})
	}
	var doc []byte
	var root *yaml.Node
	if strings.EqualFold(filepath.Ext(name), ".json") {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			p := domain.Problem{Message: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
			var se *json.SyntaxError
			if errors.As(err, &se) {
				p.Line = 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			}
			return nil, nil, fail(p)
		}
		doc = data
		// JSON is YAML too: its node tree gives the lines of problems. A
		// file YAML reads differently only goes without lines.
		root, _ = decodeYAML(data)
	} else {
		var err error
		if root, err = decodeYAML(data); err != nil {
			return nil, nil, fail(yamlProblem(err))
		}
		c := &converter{}
		tree := c.value("", root)
		if len(c.problems) > 0 {
			return nil, root, fail(c.problems...)
		}
		if doc, err = json.Marshal(tree); err != nil {
			return nil, root, fail(domain.Problem{Message: "cannot be converted to JSON: " + err.Error()})
		}
	}
	w, err := domain.ParseDefinition(doc)
	var de *domain.DefinitionError
	if errors.As(err, &de) {
		de.Source = name
		if root != nil {
			for i := range de.Problems {
				if de.Problems[i].Line == 0 {
					de.Problems[i].Line = problemLine(root, de.Problems[i])
				}
			}
		}
		return nil, root, de
	}
	return w, root, errors.Wrapf(err, "%s", name)
}

// decodeYAML reads the one YAML document of data and returns its root
// node (not the document node).
func decodeYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("yaml: the file holds no document, only comments")
		}
		return nil, err
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, errors.Newf("yaml: line %d: a file holds one workflow; this is a second document", second.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("yaml: the file holds no document")
	}
	return doc.Content[0], nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlProblem(err error) domain.Problem {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return domain.Problem{Line: line, Message: "not valid YAML: " + m[2]}
	}
	return domain.Problem{Message: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// converter turns a YAML node tree into the JSON document form, noting
// every construct that a plain definition file does not use.
type converter struct{ problems []domain.Problem }

func (c *converter) add(path string, n *yaml.Node, format string, args ...any) {
	c.problems = append(c.problems, domain.Problem{Path: path, Line: n.Line, Message: fmt.Sprintf(format, args...)})
}

func (c *converter) value(path string, n *yaml.Node) any {
	if n.Anchor != "" {
		c.add(path, n, "YAML anchors (&%s) are not supported: write the value out", n.Anchor)
	}
	if tag := n.Tag; tag != "" && !strings.HasPrefix(tag, "!!") && tag != "!" {
		c.add(path, n, "YAML tags such as %s are not supported", tag)
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		c.add(path, n, "YAML aliases (*%s) are not supported: write the value out", n.Value)
		return nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				c.add(path, k, "YAML merge keys (<<) are not supported: write the fields out")
				continue
			}
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				c.add(path, k, "mapping keys must be strings: quote %q", k.Value)
				continue
			}
			kpath := joinKey(path, k.Value)
			if line, dup := first[k.Value]; dup {
				c.add(kpath, k, "%q is given twice (first on line %d)", k.Value, line)
				continue
			}
			first[k.Value] = k.Line
			out[k.Value] = c.value(kpath, v)
		}
		return out
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, item := range n.Content {
			out[i] = c.value(fmt.Sprintf("%s[%d]", path, i), item)
		}
		return out
	case yaml.ScalarNode:
		return c.scalar(path, n)
	}
	c.add(path, n, "unexpected YAML node")
	return nil
}

func (c *converter) scalar(path string, n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.add(path, n, "%q is not a boolean", n.Value)
		}
		return b
	case "!!int":
		if json.Valid([]byte(n.Value)) {
			return json.Number(n.Value)
		}
		var i int64
		if err := n.Decode(&i); err != nil {
			c.add(path, n, "%q is not a whole number JSON can hold", n.Value)
			return nil
		}
		return json.Number(strconv.FormatInt(i, 10))
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			c.add(path, n, "%q is not a finite number", n.Value)
			return nil
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	}
	// Strings, and timestamps and binary kept as the text they are written as.
	return n.Value
}

// joinKey extends a problem path the way domain paths read.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// placeholderProblem matches the problems of templates, which name the
// placeholder first: {{results.charge.id}}: no step "charge" runs before
// this one.
var placeholderProblem = regexp.MustCompile(`^\{\{([^{}\s]+)\}\}: `)

// problemLine finds the line of a problem: that of the field its path
// names, or, for a template problem in a request body, that of the string
// holding the placeholder.
func problemLine(root *yaml.Node, p domain.Problem) int {
	line := lineOf(root, p.Path)
	m := placeholderProblem.FindStringSubmatch(p.Message)
	if m == nil || !strings.HasSuffix(p.Path, ".body") {
		return line
	}
	if body := nodeAt(root, p.Path); body != nil {
		if found := findPlaceholder(body, m[1]); found > 0 {
			return found
		}
	}
	return line
}

// findPlaceholder returns the line of the first string under n that holds
// the placeholder {{path}} (spaces inside the braces ignored), or 0.
func findPlaceholder(n *yaml.Node, path string) int {
	if n.Kind == yaml.ScalarNode {
		if strings.Contains(strings.Join(strings.Fields(n.Value), ""), "{{"+path+"}}") {
			return n.Line
		}
		return 0
	}
	for _, c := range n.Content {
		if line := findPlaceholder(c, path); line > 0 {
			return line
		}
	}
	return 0
}

// lineOf finds the line of the field a problem path (steps[2].http.url)
// names: the line of its key, or of the list item; when the path leads
// nowhere (a missing field), the line of the last node it reached.
func lineOf(root *yaml.Node, path string) int {
	_, line := walk(root, path)
	return line
}

// nodeAt returns the node a path names, or nil.
func nodeAt(root *yaml.Node, path string) *yaml.Node {
	n, _ := walk(root, path)
	return n
}

// walk follows a problem path from root. It returns the node the path
// names (nil if it leads nowhere) and the line of the last key or item it
// reached.
func walk(root *yaml.Node, path string) (*yaml.Node, int) {
	node, line := root, root.Line
	rest := path
	for rest != "" {
		switch node.Kind {
		case yaml.MappingNode:
			best := -1
			for i := 0; i+1 < len(node.Content); i += 2 {
				k := node.Content[i].Value
				if (rest == k || strings.HasPrefix(rest, k+".") || strings.HasPrefix(rest, k+"[")) &&
					(best < 0 || len(k) > len(node.Content[best].Value)) {
					best = i
				}
			}
			if best < 0 {
				return nil, line
			}
			key := node.Content[best]
			rest = strings.TrimPrefix(rest[len(key.Value):], ".")
			node, line = node.Content[best+1], key.Line
		case yaml.SequenceNode:
			end := strings.IndexByte(rest, ']')
			if !strings.HasPrefix(rest, "[") || end < 0 {
				return nil, line
			}
			i, err := strconv.Atoi(rest[1:end])
			if err != nil || i < 0 || i >= len(node.Content) {
				return nil, line
			}
			rest = strings.TrimPrefix(rest[end+1:], ".")
			node = node.Content[i]
			line = node.Line
		default:
			return nil, line
		}
	}
	return node, line
}

// DirError lists what is wrong with a set of definition files (those of
// a directory, or those Load was given): a *domain.DefinitionError for
// each file with problems (its Source names the file), or the error
// reading a file.
type DirError struct {
	// Dir names the directory, or the paths Load was given.
	Dir  string
	Errs []error
}

func (e *DirError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workflow definitions in %s: %d file(s) with problems", e.Dir, len(e.Errs))
	for _, err := range e.Errs {
		b.WriteString("\n" + err.Error())
	}
	return b.String()
}

// Unwrap returns the errors of the files, so that errors.As finds each
// *domain.DefinitionError and errors.Is(err, domain.ErrInvalidWorkflow)
// holds.
func (e *DirError) Unwrap() []error { return e.Errs }

// Problems lists the problems of every file, each with its file in Source.
func (e *DirError) Problems() []*domain.DefinitionError {
	var out []*domain.DefinitionError
	for _, err := range e.Errs {
		var de *domain.DefinitionError
		if errors.As(err, &de) {
			out = append(out, de)
		}
	}
	return out
}

// File is a definition file Load read.
type File struct {
	// Path is the file's path, as Load was given it or found it.
	Path     string
	Workflow *domain.Workflow
	// root is the file's YAML node tree (JSON is YAML too), for Locate.
	root *yaml.Node
}

// Locate returns problems found in the file's definition elsewhere, such
// as those the API answers, as a *domain.DefinitionError naming the file,
// each problem with the line its path names in the file.
func (f *File) Locate(problems []domain.Problem) *domain.DefinitionError {
	de := &domain.DefinitionError{Source: f.Path, Problems: slices.Clone(problems)}
	if f.root != nil {
		for i := range de.Problems {
			if de.Problems[i].Line == 0 {
				de.Problems[i].Line = problemLine(f.root, de.Problems[i])
			}
		}
	}
	return de
}

// LoadDir reads every definition file (*.yaml, *.yml, *.json; not in
// subdirectories, and not hidden files) of dir, in order of name, and
// checks them as a set as Load does. If any file has problems, LoadDir
// returns a *DirError listing those of every file, and no workflows.
func LoadDir(dir string) ([]*domain.Workflow, error) {
	files, err := load(dir, []string{dir})
	if err != nil {
		return nil, err
	}
	workflows := make([]*domain.Workflow, len(files))
	for i, f := range files {
		workflows[i] = f.Workflow
	}
	return workflows, nil
}

// Load reads every file named and every definition file of every
// directory named (as LoadDir reads one), and checks them as a set: two
// files may not define one workflow name, and no two triggers may overlap
// (domain.TriggerOverlap), each a problem of the later file naming the
// earlier. It needs nothing but the files: what it accepts, the engine
// refuses only for what is registered already. If any file has problems,
// Load returns a *DirError listing those of every file, and no files.
func Load(paths ...string) ([]*File, error) {
	return load(strings.Join(paths, ", "), paths)
}

func load(name string, paths []string) ([]*File, error) {
	var files []*File
	var errs []error
	// Each file's problems are listed in the order of the files: those of
	// the file itself, or those it has with the files before it.
	add := func(path string) {
		f, err := readFile(path)
		if err == nil {
			err = checkSet(f, files)
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		files = append(files, f)
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			errs = append(errs, errors.Wrap(err, "read workflow definitions"))
			continue
		}
		if !info.IsDir() {
			add(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, errors.Wrapf(err, "read workflow directory %s", p))
			continue
		}
		var names []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || !IsDefinitionFile(e.Name()) || e.IsDir() {
				continue
			}
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			add(filepath.Join(p, n))
		}
	}
	if len(errs) > 0 {
		return nil, &DirError{Dir: name, Errs: errs}
	}
	return files, nil
}

// readFile reads and parses one definition file.
func readFile(path string) (*File, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	w, root, err := parse(path, data)
	if err != nil {
		return nil, err
	}
	return &File{Path: path, Workflow: w, root: root}, nil
}

// checkSet finds the problems of f taken together with the files read
// before it: a workflow name defined twice, and triggers that overlap.
func checkSet(f *File, earlier []*File) error {
	var problems []domain.Problem
	for _, e := range earlier {
		if e.Workflow.Name == f.Workflow.Name {
			problems = append(problems, domain.Problem{Path: "name",
				Message: fmt.Sprintf("workflow %q is already defined in %s", f.Workflow.Name, e.Path)})
			continue
		}
		if p, overlaps := domain.TriggerOverlap(f.Workflow, e.Workflow, "in "+e.Path); overlaps {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return f.Locate(problems)
	}
	return nil
}

// readLimited reads a file of at most MaxFileBytes; a larger one is a
// definition problem.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "open %s", path)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, errors.Wrapf(err, "read %s", path)
	}
	return data, nil // parse reports a file over the limit
}

// fieldOrder is the order fields are written in by Format; other keys
// follow, sorted.
var fieldOrder = []string{
	"name", "description", "trigger", "defaults", "steps",
	"topics", "type", "typeField", "idField", "replyToField",
	"agent", "action", "http", "method", "url", "headers", "body", "transientStatus", "permanentStatus",
	"budget", "attempts", "backoff", "initial", "multiplier", "max", "jitter", "onExhausted", "compensation",
}

// Format writes a definition as YAML, every default spelled out (from
// Workflow.MarshalDefinition), fields in a reading order. Parse reads it
// back to an equal definition.
func Format(w *domain.Workflow) ([]byte, error) {
	doc, err := w.MarshalDefinition()
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, errors.Wrapf(err, "decode workflow %s", w.Name)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(toNode(tree, true)); err != nil {
		return nil, errors.Wrapf(err, "encode workflow %s as YAML", w.Name)
	}
	if err := enc.Close(); err != nil {
		return nil, errors.Wrapf(err, "encode workflow %s as YAML", w.Name)
	}
	return out.Bytes(), nil
}

// toNode builds the YAML node of a decoded JSON value; ordered says
// whether keys take fieldOrder (not inside request bodies and headers).
func toNode(v any, ordered bool) *yaml.Node {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		rank := func(k string) int {
			for i, f := range fieldOrder {
				if f == k {
					return i
				}
			}
			return len(fieldOrder)
		}
		sort.Slice(keys, func(i, j int) bool {
			if ordered {
				if ri, rj := rank(keys[i]), rank(keys[j]); ri != rj {
					return ri < rj
				}
			}
			return keys[i] < keys[j]
		})
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range keys {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k},
				toNode(v[k], ordered && k != "body" && k != "headers"))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, item := range v {
			c := toNode(item, ordered)
			if c.Kind != yaml.ScalarNode {
				n.Style = 0 // lists of scalars only are written [a, b]
			}
			n.Content = append(n.Content, c)
		}
		return n
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(v), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(v)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}
