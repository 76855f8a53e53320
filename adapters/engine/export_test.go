package engine

// FailStartAfter makes Start fail with err once the step named (one of
// StartSteps) has started its part.
func FailStartAfter(cfg *Config, step string, err error) {
	cfg.startFault = func(done string) error {
		if done == step {
			return err
		}
		return nil
	}
}

// StartSteps names the steps of start-up, in order.
func StartSteps() []string {
	var names []string
	for _, step := range (&App{}).startSteps() {
		names = append(names, step.name)
	}
	return names
}
