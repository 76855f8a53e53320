package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

// Embed saga in a Go service: its workflow from a definition, its agents as
// Go functions, on the embedded Kafka and event store.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "saga-example-")
	defer os.RemoveAll(dir)
	signup, err := workflowfile.Parse("signup.yaml", []byte(`
name: signup
steps:
  - name: create-account
    agent: accounts
    compensation: delete-account
  - name: send-welcome
    agent: mailer
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	var deleted []string
	saga, err := engine.Start(engine.Config{
		DataDir: dir, KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Workflows: []*domain.Workflow{signup},
		Agents: map[string]agent.Handler{
			"accounts": func(ctx context.Context, req agent.Request) (any, error) {
				if req.Compensating() {
					var account struct{ ID string }
					_ = req.DecodeUndone(&account)
					deleted = append(deleted, account.ID)
					return nil, nil
				}
				return map[string]string{"id": "acct-" + req.TaskID}, nil
			},
			"mailer": func(ctx context.Context, req agent.Request) (any, error) {
				var order struct{ Email string }
				_ = req.DecodeOrder(&order)
				if order.Email == "" {
					return nil, agent.Permanent(fmt.Errorf("no email address"))
				}
				return nil, nil
			},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer saga.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	callers, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer callers.Close()
	ok, _ := callers.Run(ctx, "u-1", map[string]any{"workflow": "signup", "email": "ada@example.org"})
	fmt.Println("u-1:", ok.Final.Status)
	undone, _ := callers.Run(ctx, "u-2", map[string]any{"workflow": "signup"})
	fmt.Println("u-2:", undone.Final.Status, "deleted", deleted)
	// Output:
	// u-1: processed
	// u-2: compensated deleted [acct-u-2]
}
