package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// An agent is a program of its own: here it serves the "greeter" steps of a
// saga that runs in the same program only to keep the example whole.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "saga-example-")
	defer os.RemoveAll(dir)
	hello := &domain.Workflow{Name: "hello", Steps: []domain.StepDefinition{
		{Name: "greet", Agent: "greeter", Budget: 5 * time.Second, MaxAttempts: 3},
	}}
	saga, err := engine.Start(engine.Config{DataDir: dir, KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0",
		HTTPListen: "127.0.0.1:0", Workflows: []*domain.Workflow{hello}, Logger: quiet()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer saga.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	stopped := make(chan error, 1)
	go func() {
		stopped <- agent.Run(agentCtx, agent.Config{Brokers: saga.KafkaBrokers, Logger: quiet()}, "greeter",
			func(ctx context.Context, req agent.Request) (any, error) {
				var order struct{ Name string }
				if err := req.DecodeOrder(&order); err != nil {
					return nil, agent.Permanent(err)
				}
				return map[string]string{"greeting": "hello, " + order.Name}, nil
			})
	}()

	callers, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer callers.Close()
	outcome, err := callers.Run(ctx, "hello-1", map[string]any{"workflow": "hello", "name": "Ada"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range outcome.Statuses {
		if st.Status == protocol.StatusStepSucceeded {
			fmt.Println(st.Step, string(st.Result))
		}
	}
	fmt.Println(outcome.Final.Status)
	stopAgent()
	fmt.Println("agent stopped:", <-stopped)
	// Output:
	// greet {"greeting":"hello, Ada"}
	// processed
	// agent stopped: <nil>
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
