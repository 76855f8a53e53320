package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Output formats of --output.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// commandHelp is each command's usage line and examples, for --help.
var commandHelp = map[string]struct{ usage, examples string }{
	"submit": {"sagactl submit [flags] ORDER_ID [JSON]", `  sagactl submit o-1 '{"items":[{"sku":"book","qty":1}]}'
  sagactl submit u-1 '{"amount":12}' --workflow signup --wait
  sagactl submit o-2 --reply-to reply.shop -o json`},
	"get":   {"sagactl get [flags] TASK_ID", "  sagactl get o-1\n  sagactl get o-1 -o json | jq .steps"},
	"tasks": {"sagactl tasks [flags]", "  sagactl tasks --state Error\n  sagactl tasks --workflow signup --since 2026-11-22T00:00:00Z -o json\n  sagactl tasks --cursor CURSOR_FROM_THE_LAST_PAGE"},
	"retry": {"sagactl retry [flags] TASK_ID [STEP]\n       sagactl retry [flags] --state Error [--workflow W] [--step S] [--reason-contains R] [--older-than D]",
		`  sagactl retry o-1
  sagactl retry o-1 charge-payment
  sagactl retry --state Error --step charge-payment --dry-run
  sagactl retry --state Error --reason-contains 'gateway answered 503' --older-than 10m --yes`},
	"cancel": {"sagactl cancel [flags] TASK_ID\n       sagactl cancel [flags] [--state S] [--workflow W] [--step S] [--reason-contains R] [--older-than D]",
		`  sagactl cancel o-1 --reason 'customer asked'
  sagactl cancel --workflow signup --step charge-card --older-than 1h --dry-run
  sagactl cancel --state Error --reason-contains 'card expired' --reason 'card expired' --yes -o json`},
	"alerts": {"sagactl alerts [flags]", "  sagactl alerts\n  sagactl alerts --open\n  sagactl alerts --since 24h -o json"},
	"deadletters": {"sagactl deadletters [list] [flags] [ID...]\n       sagactl deadletters redrive [flags] ID... | FILTERS",
		`  sagactl deadletters
  sagactl deadletters --source-topic orders --since 1h -o json
  sagactl deadletters redrive 0/17 --dry-run
  sagactl deadletters redrive 0/17 --value-file fixed-order.json
  sagactl deadletters redrive --reason-contains 'unknown workflow signup' --yes`},
	"agents":    {"sagactl agents [flags] [NAME]", "  sagactl agents\n  sagactl agents payment\n  sagactl agents -o json | jq '.agents[].totals'"},
	"overdue":   {"sagactl overdue [flags]", "  sagactl overdue\n  sagactl overdue --workflow order --at-least 30s -o json"},
	"watch":     {"sagactl watch [flags] ORDER_ID | --topic TOPIC", "  sagactl watch o-1 --timeout 30s\n  sagactl watch --topic saga.status -o json"},
	"audit":     {"sagactl audit [flags] TASK_ID", "  sagactl audit o-1\n  sagactl audit o-1 --at 4\n  sagactl audit o-1 -o json"},
	"replay":    {"sagactl replay [flags]", "  sagactl replay"},
	"workflows": {"sagactl workflows COMMAND [flags] [args]", "  sagactl workflows apply my-saga/\n  sagactl workflows diff my-saga/signup.yaml\n  sagactl workflows get signup --version 1"},
}

// output registers --output (-o) on a command's flags.
func output(fs *flag.FlagSet) *string {
	o := new(string)
	fs.StringVar(o, "output", outputTable, "output format: table or json")
	fs.StringVar(o, "o", outputTable, "short for --output")
	return o
}

func checkOutput(o string) error {
	if o != outputTable && o != outputJSON {
		return errors.Newf("--output must be table or json, not %q", o)
	}
	return nil
}

// setUsage gives a command's flags a usage text with examples.
func setUsage(fs *flag.FlagSet, name string) {
	help, ok := commandHelp[strings.Fields(name)[0]]
	if !ok {
		return
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\nexamples:\n%s\n\nflags:\n", help.usage, help.examples)
		fs.PrintDefaults()
	}
}

// printJSON prints v as indented JSON.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTask prints a task's state as a table.
func printTask(t *protocol.TaskView) error {
	fmt.Printf("Task %s  workflow %s v%d  state %s", clean(t.ID), clean(t.Workflow), t.WorkflowVersion, t.State)
	if p := t.Priority.OrNormal(); p != domain.PriorityNormal {
		fmt.Printf("  priority %s", p)
	}
	fmt.Println()
	fmt.Printf("submitted %s  updated %s\n", stamp(t.SubmittedAt), stamp(t.UpdatedAt))
	if t.Reason != "" {
		fmt.Println("reason:", clean(t.Reason))
	}
	if t.FailedStep != "" {
		fmt.Println("failed step:", clean(t.FailedStep))
	}
	if t.CancelledBy != "" {
		fmt.Println("cancelled by:", clean(t.CancelledBy))
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tAGENT\tSTATE\tATTEMPT\tFAILURES\tLOCKED BY\tCOMPLETE BY\tCOMPENSATION\tRESULT")
	for _, s := range t.Steps {
		completeBy := "-"
		if s.CompleteBy != nil {
			completeBy = stamp(*s.CompleteBy)
		}
		comp := "-"
		if s.Compensation != nil {
			comp = fmt.Sprintf("%s (attempt %d)", s.Compensation.State, s.Compensation.Attempt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", clean(s.Name), dash(clean(s.Agent)), s.State, s.Attempt, s.FailureCount,
			dash(clean(s.LockedBy)), completeBy, comp, dash(truncate(compact(s.Result))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range t.Steps {
		if a := s.Awaiting; a != nil && s.State == domain.StepStateAwaiting {
			fmt.Printf("%s awaits an event on %s for %s until %s\n", clean(s.Name), clean(a.Topic), clean(a.Value), stamp(a.Until))
		}
		if s.State == domain.StepStateDelayed && s.DelayedUntil != nil {
			fmt.Printf("%s: waiting until %s\n", clean(s.Name), stamp(*s.DelayedUntil))
		}
	}
	return nil
}

// printTaskList prints a page of tasks as a table.
func printTaskList(list protocol.TaskList) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tWORKFLOW\tSTATE\tSUBMITTED\tUPDATED\tREASON")
	for _, t := range list.Tasks {
		fmt.Fprintf(tw, "%s\t%s v%d\t%s\t%s\t%s\t%s\n", clean(t.ID), clean(t.Workflow), t.WorkflowVersion, t.State, stamp(t.SubmittedAt),
			stamp(t.UpdatedAt), dash(truncate(t.Reason)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	states := make([]string, 0, len(list.Counts))
	for s, n := range list.Counts {
		states = append(states, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(states)
	fmt.Printf("\n%d on this page; all tasks: %s\n", len(list.Tasks), strings.Join(states, ", "))
	if list.NextCursor != "" {
		fmt.Printf("more: --cursor %s\n", list.NextCursor)
	}
	return nil
}

// compact writes a JSON value on one line.
func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// clean escapes what in text from outside (an id, a reason, a result, an
// error a service answered) could drive the terminal, as deadletters does
// (topics.Preview), without cutting it.
func clean(s string) string { return topics.Preview([]byte(s), len(s)) }

// cleanLines is clean for text of several lines: it keeps the line breaks.
func cleanLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = clean(l)
	}
	return strings.Join(lines, "\n")
}

// truncate escapes s as clean does and cuts it to 120 characters.
func truncate(s string) string { return topics.Preview([]byte(s), 120) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// completion prints a bash completion script: commands, and each command's
// flags as its own flag set declares them, so the two cannot drift.
func completion(_ context.Context, args []string) error {
	if len(args) != 1 || args[0] != "bash" {
		return errors.New("usage: sagactl completion bash   (then: source <(sagactl completion bash))")
	}
	commands := make([]string, 0, len(commandHelp))
	for name := range commandHelp {
		commands = append(commands, name)
	}
	sort.Strings(commands)
	flagsOf := map[string][]string{}
	for _, name := range commands {
		flagsOf[name] = commandFlags(name)
	}
	var b strings.Builder
	b.WriteString("# bash completion for sagactl: source <(sagactl completion bash)\n_sagactl() {\n")
	b.WriteString("  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd=\"${COMP_WORDS[1]}\"\n")
	b.WriteString("  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W \"" + strings.Join(append(commands, "completion", "help", "version"), " ") + "\" -- \"$cur\")); return; fi\n")
	b.WriteString("  case \"$cmd\" in\n")
	for _, name := range commands {
		words := slices.Concat(subcommands[name], flagsOf[name])
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", name, strings.Join(words, " "))
	}
	b.WriteString("  esac\n}\ncomplete -o default -F _sagactl sagactl\n")
	fmt.Print(b.String())
	return nil
}

// subcommands are the words that follow the commands that have them.
var subcommands = map[string][]string{
	"workflows":   {"apply", "validate", "list", "get", "diff"},
	"deadletters": {"list", "redrive"},
}

// collecting, when set, makes flags() hand each command's flag set to it
// and stop the command before it does anything.
var collecting func(*flag.FlagSet)

// errCollected stops a command whose flags were collected.
var errCollected = errors.New("flags collected")

// commandFlags lists a command's flags by running it with its flag set
// captured.
func commandFlags(name string) []string {
	var names []string
	collecting = func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) {
			if len(f.Name) == 1 {
				names = append(names, "-"+f.Name)
			} else {
				names = append(names, "--"+f.Name)
			}
		})
	}
	defer func() { collecting = nil }()
	run := commands[name]
	switch name {
	case "workflows":
		run = workflowsList
	case "deadletters":
		run = deadlettersRedrive // its flags are list's and more
	}
	if run != nil {
		_ = run(context.Background(), nil)
	}
	sort.Strings(names)
	return names
}
