// Package workflowfile reads workflow definitions from files, YAML or JSON
// (docs/workflows.md describes the format), and writes them back as YAML.
//
// Files are kept plain: YAML anchors, aliases, merge keys (<<) and custom
// tags are refused, mapping keys must be strings, and a file may hold at
// most MaxFileBytes. Every problem a file has is reported at once, each with
// the line it is on, in a *domain.DefinitionError whose Source is the file
// name; LoadDir combines the problems of every file of a directory in a
// *DirError.
package workflowfile
