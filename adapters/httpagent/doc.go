// Package httpagent is saga's built-in HTTP agent: the step handler that
// carries out steps (and compensations) by calling an HTTP service, so that
// a workflow can reach a service without anyone writing an agent for it.
//
// A step that declares an http call (domain.HTTPCall) has its method, URL,
// headers and body rendered from the task's data for every attempt (see
// domain.Renderer, bounded by Config.MaxRenderedBytes: a larger rendering
// fails the step for good). A step without one is sent, in
// base-URL mode, as a POST of the default body to {BaseURL}/{action}: that
// is what the demo agents do.
//
// Every request carries the command's idempotency key in the
// Idempotency-Key header, which stays the same across attempts: the service
// must make a repeated key have no second effect. The call ends when the
// context does; agentruntime.Agent sets its deadline from the command's
// CompleteBy. Answers are classified by Classify: 2xx succeed, 408, 429, 5xx
// and network errors are transient, other answers permanent. A Handler keeps
// a circuit breaker per host and is safe for concurrent use; with
// Config.HealthByTarget it also judges each host's hangs, so that one host
// that hangs holds no other.
//
// Redirects are followed only for a call that sets FollowRedirects, and
// only on its own host. Every connection of the default client passes an
// Egress policy (NewClient), checked against the address connected to.
// Header values and bodies may name secrets, {{secret.NAME}}, which
// Secrets resolves in the agent's process at call time; their values are
// taken out of the results and errors the Handler returns.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package httpagent
