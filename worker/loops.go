package worker

import "context"

// Loop is a long-running part of the worker process that is not a Temporal activity: it runs
// until ctx ends and returns nil then.
type Loop struct {
	Name string
	Run  func(ctx context.Context) error
}

// Loops lists the worker's long-running loops.
func Loops(d Deps) []Loop {
	return nil
}
