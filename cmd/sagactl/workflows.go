package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

const workflowsUsage = `usage: sagactl workflows COMMAND [flags] [args]

commands:
  apply FILE|DIR...      register the definitions (a new version for each that changed)
  validate FILE|DIR...   check the definitions and list every problem, as apply would; registers
                         nothing. The files are checked alone and as a set without sagad, then
                         against the registered workflows if the API answers (--offline: not)
  list                   the newest version of every workflow
  get NAME [--version N] a workflow's definition, as YAML (--json for JSON)
  diff FILE...           what applying the files would change, against the newest versions
`

// workflowsCmd runs the workflows subcommands.
func workflowsCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, workflowsUsage)
		return exitCode{exitError, "a workflows command is required"}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "apply":
		return workflowsApply(ctx, rest, false)
	case "validate":
		return workflowsApply(ctx, rest, true)
	case "list":
		return workflowsList(ctx, rest)
	case "get":
		return workflowsGet(ctx, rest)
	case "diff":
		return workflowsDiff(ctx, rest)
	case "help", "-h", "--help":
		fmt.Print(workflowsUsage)
		return nil
	default:
		return errors.Newf("unknown workflows command %q\n\n%s", cmd, workflowsUsage)
	}
}

// workflowsApply applies the definition files, or with dryRun only
// validates them. Both first check the files alone and as a set
// (workflowfile.Load), then, through the API, every file against the
// registered workflows (the checks apply runs); apply registers nothing
// unless every file passes. validate needs no server for the first part:
// with --offline, or when the API cannot be reached, it checks the files
// alone and says so.
func workflowsApply(ctx context.Context, args []string, dryRun bool) error {
	name := "apply"
	if dryRun {
		name = "validate"
	}
	fs, c := flags("workflows " + name)
	offline := new(bool)
	if dryRun {
		offline = fs.Bool("offline", false, "check the files alone and as a set, without asking sagad about the registered workflows")
	}
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.Newf("usage: sagactl workflows %s [flags] FILE|DIR...", name)
	}
	files, err := workflowfile.Load(fs.Args()...)
	if err != nil {
		return exitCode{exitError, err.Error()}
	}
	if !*offline {
		err = checkAgainstServer(ctx, c, files)
		var down unreachableError
		if dryRun && errors.As(err, &down) {
			fmt.Fprintf(os.Stderr, "sagactl: %v\nsagactl: the files were checked alone and as a set, not against the registered workflows\n", err)
			*offline = true
		} else if err != nil {
			return err
		}
	}
	for _, f := range files {
		w := f.Workflow
		if dryRun {
			how := ""
			if *offline {
				how = " (checked offline)"
			}
			fmt.Printf("workflow %s is valid%s: %s\n", w.Name, how, f.Path)
			continue
		}
		doc, err := w.MarshalDefinition()
		if err != nil {
			return err
		}
		var answer struct {
			Name    string
			Version int
			Changed bool
		}
		if err := call(ctx, http.MethodPost, c.api+"/api/workflows", doc, &answer); err != nil {
			return located(f, err)
		}
		if answer.Changed {
			fmt.Printf("workflow %s registered as version %d\n", answer.Name, answer.Version)
		} else {
			fmt.Printf("workflow %s unchanged (version %d)\n", answer.Name, answer.Version)
		}
	}
	return nil
}

// checkAgainstServer runs, through the API's dry run, every check apply
// runs on each file, and reports every refusal at once, each with its
// file and lines. An API that cannot be reached is an unreachableError.
func checkAgainstServer(ctx context.Context, c *common, files []*workflowfile.File) error {
	var refused []string
	for _, f := range files {
		doc, err := f.Workflow.MarshalDefinition()
		if err != nil {
			return err
		}
		err = call(ctx, http.MethodPost, c.api+"/api/workflows?dryRun=true", doc, nil)
		var status apiError
		switch {
		case errors.As(err, &status) && len(status.problems) > 0:
			refused = append(refused, located(f, err).Error())
		case err != nil:
			return errors.Wrapf(err, "check %s", f.Path)
		}
	}
	if len(refused) > 0 {
		return exitCode{exitError, strings.Join(refused, "\n")}
	}
	return nil
}

// located gives the problems of a refusal from the API the file and
// lines they are found at.
func located(f *workflowfile.File, err error) error {
	var status apiError
	if !errors.As(err, &status) || len(status.problems) == 0 {
		return errors.Wrapf(err, "workflow %s (%s)", f.Workflow.Name, f.Path)
	}
	return f.Locate(status.problems)
}

type workflowView struct {
	Name       string          `json:"name"`
	Version    int             `json:"version"`
	Definition json.RawMessage `json:"definition"`
}

func workflowsList(ctx context.Context, args []string) error {
	fs, c := flags("workflows list")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	var answer struct {
		Workflows []workflowView `json:"workflows"`
	}
	if err := call(ctx, http.MethodGet, c.api+"/api/workflows", nil, &answer); err != nil {
		return err
	}
	if *asJSON || *c.output == outputJSON {
		return printJSON(answer)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tSTEPS\tTRIGGER")
	for _, v := range answer.Workflows {
		w, err := domain.ParseDefinition(v.Definition)
		if err != nil {
			return errors.Wrapf(err, "workflow %s as the API shows it", v.Name)
		}
		trigger := strings.Join(w.Trigger.TopicsOrDefault(), ",")
		if w.Trigger.Type != "" {
			trigger += " type " + w.Trigger.Type
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.Name, v.Version, strings.Join(w.StepNames(), ", "), trigger)
	}
	return tw.Flush()
}

func workflowsGet(ctx context.Context, args []string) error {
	fs, c := flags("workflows get")
	version := fs.Int("version", 0, "the version to show (default the newest)")
	asJSON := fs.Bool("json", false, "print the definition as JSON")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sagactl workflows get [flags] NAME")
	}
	w, err := fetchWorkflow(ctx, c, fs.Arg(0), *version)
	if err != nil {
		return err
	}
	if *asJSON || *c.output == outputJSON {
		doc, err := w.MarshalDefinition()
		if err != nil {
			return err
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, doc, "", "  ")
		fmt.Println(pretty.String())
		return nil
	}
	out, err := workflowfile.Format(w)
	if err != nil {
		return err
	}
	fmt.Printf("# workflow %s version %d\n%s", w.Name, w.Version, out)
	return nil
}

// fetchWorkflow reads a registered workflow from the API; nil, nil if
// there is none of that name.
func fetchWorkflow(ctx context.Context, c *common, name string, version int) (*domain.Workflow, error) {
	u := c.api + "/api/workflows/" + url.PathEscape(name)
	if version > 0 {
		u += "?version=" + strconv.Itoa(version)
	}
	var v workflowView
	if err := call(ctx, http.MethodGet, u, nil, &v); err != nil {
		return nil, err
	}
	w, err := domain.ParseDefinition(v.Definition)
	if err != nil {
		return nil, errors.Wrapf(err, "workflow %s as the API shows it", name)
	}
	w.Version = v.Version
	return w, nil
}

func workflowsDiff(ctx context.Context, args []string) error {
	fs, c := flags("workflows diff")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: sagactl workflows diff [flags] FILE|DIR...")
	}
	files, err := workflowfile.Load(fs.Args()...)
	if err != nil {
		return exitCode{exitError, err.Error()}
	}
	// A file apply would refuse is no change apply would make.
	if err := checkAgainstServer(ctx, c, files); err != nil {
		return err
	}
	changed := false
	for _, f := range files {
		w := f.Workflow
		current, err := fetchWorkflow(ctx, c, w.Name, 0)
		var statusErr apiError
		switch {
		case errors.As(err, &statusErr) && statusErr.status == http.StatusNotFound:
			fmt.Printf("workflow %s: new\n", w.Name)
			changed = true
			continue
		case err != nil:
			return err
		}
		lines := diffLines(current, w)
		if len(lines) == 0 {
			fmt.Printf("workflow %s: unchanged (version %d)\n", w.Name, current.Version)
			continue
		}
		changed = true
		fmt.Printf("workflow %s: version %d -> %d\n", w.Name, current.Version, current.Version+1)
		for _, l := range lines {
			fmt.Println("  " + l)
		}
	}
	if changed {
		// Like diff(1): 1 when there are differences.
		return exitCode{1, "applying would change workflows"}
	}
	return nil
}

// diffLines compares two definitions field by field, in their YAML form.
func diffLines(old, new *domain.Workflow) []string {
	a, errA := workflowfile.Format(old)
	b, errB := workflowfile.Format(new)
	if errA != nil || errB != nil {
		return []string{"(cannot be compared)"}
	}
	oldLines, newLines := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	var out []string
	for _, l := range lcsDiff(oldLines, newLines) {
		out = append(out, l)
	}
	return out
}

// lcsDiff is a line diff: "- " lines only in a, "+ " lines only in b.
func lcsDiff(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, "- "+a[i])
	}
	for ; j < m; j++ {
		out = append(out, "+ "+b[j])
	}
	return out
}

// apiError is an answer of the API that is not a success.
type apiError struct {
	status int
	msg    string
	// problems are those of a refused workflow definition.
	problems []domain.Problem
}

func (e apiError) Error() string { return e.msg }

// unreachableError is a request that reached no API.
type unreachableError struct{ err error }

func (e unreachableError) Error() string { return e.err.Error() }
func (e unreachableError) Unwrap() error { return e.err }

// call sends a request to the API and decodes its JSON answer into out; an
// error answer becomes an apiError with the API's message and problems.
func call(ctx context.Context, method, u string, payload []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := doAPI(req)
	var transport *url.Error
	if errors.As(err, &transport) {
		return unreachableError{errors.Wrap(err, "is sagad running? "+method+" "+u)}
	}
	if err != nil {
		return errors.Wrap(err, method+" "+u)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error    string
			Problems []domain.Problem
		}
		_ = json.Unmarshal(body, &e)
		msg := resp.Status + ": " + strings.TrimSpace(e.Error)
		if len(e.Problems) > 0 {
			msg = resp.Status + ": " + (&domain.DefinitionError{Problems: e.Problems}).Error()
		}
		return apiError{status: resp.StatusCode, msg: msg, problems: e.Problems}
	}
	if out == nil {
		return nil
	}
	return errors.Wrap(json.Unmarshal(body, out), "decode the API's answer")
}
