// Package console serves saga's web console for operators at /ui/: the
// task list (filtered, paged with the task view's cursor, kept current by
// polling the API), one task's timeline drawn from its event history with
// its raw events and the retry and cancel actions, and the login that
// gives a browser its token as a cookie.
//
// The pages are rendered on the server from embedded templates; one small
// script, embedded too, keeps the list current and sends the actions to
// the API. Nothing is fetched from another origin. The console is mounted
// behind the API's guard (httpapi.Mount), so that the same tokens and the
// same anti-forgery rules apply.
//
// This package is internal to saga: its API may change in any release.
package console
