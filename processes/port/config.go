package port

import (
	"strings"

	"github.com/cockroachdb/errors"
)

// ErrInvalidConfig marks a process configured so that it cannot run.
var ErrInvalidConfig = errors.New("invalid configuration")

// ConfigError lists every problem of one process's configuration.
type ConfigError struct {
	// Process names the process: "scheduler", "supervisor", ...
	Process  string
	Problems []string
}

func (e *ConfigError) Error() string {
	return e.Process + ": " + ErrInvalidConfig.Error() + ": " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Problems collects a configuration's problems; Err reports them at once.
type Problems struct {
	// Process names the process the configuration is of.
	Process string
	List    []string
}

// Require notes name as missing unless set.
func (p *Problems) Require(set bool, name string) {
	if !set {
		p.List = append(p.List, name+" is not set")
	}
}

// NotNegative notes a negative duration or count; zero means the default.
func (p *Problems) NotNegative(v int64, name string) {
	if v < 0 {
		p.List = append(p.List, name+" must not be negative")
	}
}

// Add notes a problem in words of its own.
func (p *Problems) Add(problem string) { p.List = append(p.List, problem) }

// Err is a *ConfigError listing every problem noted, or nil when there is
// none.
func (p *Problems) Err() error {
	if len(p.List) == 0 {
		return nil
	}
	return &ConfigError{Process: p.Process, Problems: p.List}
}
