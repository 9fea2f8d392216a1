package worker

// Options are the worker's SDK options, for the drills that run a worker of test workflows with them.
var Options = options
