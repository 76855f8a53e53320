// Package taskdb keeps saga's task view (projections.TaskStore) in an
// SQLite database file, through the pure-Go driver modernc.org/sqlite, so
// that the embedded mode stays one binary with no C toolchain.
//
// A row per task holds the task's state as the API shows it (the JSON of a
// protocol.TaskView, passed on as stored) and its summary as a list shows
// it (protocol.TaskView.Summary: without the steps' results), with columns
// for what queries filter and order on; a table of counts by state is kept in step with the
// rows, and the checkpoint (the event-store position the rows are folded up
// to) is written in the same transaction as the rows it covers. The file is
// a disposable read model: deleted, it is rebuilt from the event store.
//
// The file says which format its rows have (SchemaVersion, in SQLite's
// user_version). Open refuses a file of a format this build cannot read
// with ErrSchemaVersion, and the caller builds a fresh one from the store.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package taskdb

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

const schema = `
CREATE TABLE IF NOT EXISTS tasks (
	id           TEXT PRIMARY KEY,
	workflow     TEXT NOT NULL,
	state        TEXT NOT NULL,
	submitted_at INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	summary      BLOB,
	body         BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_submission ON tasks (submitted_at, id);
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, submitted_at, id);
CREATE INDEX IF NOT EXISTS tasks_by_workflow ON tasks (workflow, submitted_at, id);
CREATE TABLE IF NOT EXISTS counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoint (id INTEGER PRIMARY KEY CHECK (id = 0), position INTEGER NOT NULL);
`

// SchemaVersion is the format of the rows this build writes: 2, the JSON
// of protocol.TaskView and of its Summary (1 had no summary: Open adds the
// column, and List summarises a row without one as it reads it). A change to the view that an older row cannot be
// read as (a field renamed, a meaning changed) must raise it, so that files
// of the old format are rebuilt rather than misread.
const SchemaVersion = 2

// readable are the formats this build reads: 0 is a file written before
// the format was recorded, whose rows were domain.Task's JSON, which
// protocol.TaskView kept field for field (protocol's
// TestTaskViewKeepsTheJSONOfBefore); 1 had no summaries. Open stamps both
// with SchemaVersion once it has added the summary column. A build of
// format 1 refuses a file of format 2, so it never writes a body without
// its summary.
var readable = map[int]bool{0: true, 1: true, SchemaVersion: true}

// ErrSchemaVersion is returned by Open for a file whose rows have a format
// this build cannot read (one written by a later or a much older build).
// The file is left as it is; the caller rebuilds the view in a fresh one.
var ErrSchemaVersion = errors.New("task view file has rows of another format")

// DB is a task view in an SQLite file. It is safe for concurrent use: one
// writer (the projection) and any number of readers.
type DB struct {
	path string
	db   *sql.DB
}

var _ projections.TaskStore = (*DB)(nil)

// Open opens or creates the database file at path.
func Open(path string) (*DB, error) {
	// WAL lets the API read while the projection writes; synchronous=NORMAL
	// may lose the last commits in a power loss but never tears one, and the
	// checkpoint goes with its rows, so the view resumes consistently.
	if err := createWithPageSize(path); err != nil {
		return nil, err
	}
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, errors.Wrapf(err, "open task view %s", path)
	}
	if err := checkSchema(db, path); err != nil {
		db.Close()
		return nil, err
	}
	return &DB{path: path, db: db}, nil
}

// pageSize is the page size of a new task view file. A row (about 1 KiB for
// a three-step task) must fit in a page of a WITHOUT ROWID table's B-tree,
// whose cells hold at most about a quarter of a page: with SQLite's default
// 4 KiB pages a row just over 1,000 bytes spilled into an overflow page of
// its own, and the file of a million tasks grew from 1.1 to 4.6 GiB. With
// 16 KiB pages rows of up to about 4 KiB (a dozen steps) stay in the tree.
const pageSize = 16 << 10

// createWithPageSize creates a missing file with pageSize pages. The page
// size can only be set before the first table is written and not at all in
// WAL mode, which the connection string turns on, so a new file is made by
// a plain connection first.
func createWithPageSize(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return nil // an existing file keeps its pages
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return errors.Wrapf(err, "create task view %s", path)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf(`PRAGMA page_size = %d`, pageSize)); err != nil {
		return errors.Wrapf(err, "set the page size of task view %s", path)
	}
	_, err = db.Exec(schema)
	return errors.Wrapf(err, "create the task view's tables in %s", path)
}

// checkSchema creates the tables of a new file, and checks that an
// existing one has rows this build reads.
func checkSchema(db *sql.DB, path string) error {
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		return errors.Wrapf(err, "read the format of task view %s", path)
	}
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tasks'`).Scan(&tables); err != nil {
		return errors.Wrapf(err, "read the tables of task view %s", path)
	}
	if tables > 0 && !readable[version] {
		return errors.Wrapf(ErrSchemaVersion, "%s has format %d; this build reads %d", path, version, SchemaVersion)
	}
	if _, err := db.Exec(schema); err != nil {
		return errors.Wrapf(err, "create the task view's tables in %s", path)
	}
	var summaries int
	if err := db.QueryRow(`SELECT count(*) FROM pragma_table_info('tasks') WHERE name = 'summary'`).Scan(&summaries); err != nil {
		return errors.Wrapf(err, "read the columns of task view %s", path)
	}
	if summaries == 0 {
		if _, err := db.Exec(`ALTER TABLE tasks ADD COLUMN summary BLOB`); err != nil {
			return errors.Wrapf(err, "add summaries to task view %s", path)
		}
	}
	// PRAGMA takes no parameters; SchemaVersion is a constant.
	_, err := db.Exec(`PRAGMA user_version = ` + strconv.Itoa(SchemaVersion))
	return errors.Wrapf(err, "record the format of task view %s", path)
}

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// Checkpoint implements projections.TaskStore.
func (d *DB) Checkpoint(ctx context.Context) (uint64, bool, error) {
	var pos int64
	err := d.db.QueryRowContext(ctx, `SELECT position FROM checkpoint WHERE id = 0`).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, errors.Wrap(err, "read the task view's checkpoint")
	}
	return uint64(pos), true, nil
}

// Load implements projections.TaskStore.
func (d *DB) Load(ctx context.Context, ids []string) (map[string]*protocol.TaskView, error) {
	out := make(map[string]*protocol.TaskView, len(ids))
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := d.db.QueryContext(ctx, `SELECT body FROM tasks WHERE id IN (?`+strings.Repeat(",?", len(chunk)-1)+`)`, args...)
		if err != nil {
			return nil, errors.Wrap(err, "load tasks")
		}
		for rows.Next() {
			t, err := scanTask(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out[t.ID] = t
		}
		if err := rows.Close(); err != nil {
			return nil, errors.Wrap(err, "load tasks")
		}
	}
	return out, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanTask(s scanner) (*protocol.TaskView, error) {
	var body []byte
	if err := s.Scan(&body); err != nil {
		return nil, errors.Wrap(err, "read a task row")
	}
	var t protocol.TaskView
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, errors.Wrap(err, "decode a task row")
	}
	return &t, nil
}

// Commit implements projections.TaskStore.
func (d *DB) Commit(ctx context.Context, tasks []*protocol.TaskView, position uint64) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return errors.Wrap(err, "begin a task view commit")
	}
	defer func() { _ = tx.Rollback() }()
	// Prepared once per commit: through database/sql every Exec of a query
	// string parses and compiles it again, which was about a third of a
	// commit's time.
	readState, err := tx.PrepareContext(ctx, `SELECT state FROM tasks WHERE id = ?`)
	if err != nil {
		return errors.Wrap(err, "prepare the task view's read")
	}
	defer readState.Close()
	upsert, err := tx.PrepareContext(ctx, `INSERT INTO tasks (id, workflow, state, submitted_at, updated_at, summary, body) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET workflow = excluded.workflow, state = excluded.state, submitted_at = excluded.submitted_at,
		updated_at = excluded.updated_at, summary = excluded.summary, body = excluded.body`)
	if err != nil {
		return errors.Wrap(err, "prepare the task view's write")
	}
	defer upsert.Close()
	delta := map[domain.TaskState]int{}
	// One buffer holds each task's body and summary in turn: the driver
	// copies the bytes it binds before ExecContext returns.
	var buf []byte
	for _, t := range tasks {
		var old string
		switch err := readState.QueryRowContext(ctx, t.ID).Scan(&old); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return errors.Wrapf(err, "read task %s", t.ID)
		default:
			delta[domain.TaskState(old)]--
		}
		delta[t.State]++
		if buf, err = protocol.AppendTaskView(buf[:0], t); err != nil {
			return errors.Wrapf(err, "encode task %s", t.ID)
		}
		n := len(buf)
		if buf, err = protocol.AppendTaskSummary(buf, t); err != nil {
			return errors.Wrapf(err, "encode the summary of task %s", t.ID)
		}
		body, summary := buf[:n:n], buf[n:]
		if _, err := upsert.ExecContext(ctx, t.ID, t.Workflow, string(t.State), t.SubmittedAt.UnixNano(), t.UpdatedAt.UnixNano(), summary, body); err != nil {
			return errors.Wrapf(err, "store task %s", t.ID)
		}
	}
	for state, n := range delta {
		if n == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO counts (state, n) VALUES (?, ?) ON CONFLICT (state) DO UPDATE SET n = n + excluded.n`,
			string(state), n); err != nil {
			return errors.Wrap(err, "count tasks by state")
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO checkpoint (id, position) VALUES (0, ?) ON CONFLICT (id) DO UPDATE SET position = excluded.position`,
		int64(position)); err != nil {
		return errors.Wrap(err, "store the task view's checkpoint")
	}
	return errors.Wrap(tx.Commit(), "commit the task view")
}

// Get implements projections.TaskStore.
func (d *DB) Get(ctx context.Context, id string) (*protocol.TaskView, bool, error) {
	t, err := scanTask(d.db.QueryRowContext(ctx, `SELECT body FROM tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return t, true, nil
}

// cursor is where a page ends: the last task's submission time and id.
type cursor struct {
	submitted int64
	id        string
}

func (c cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.submitted, 10) + "|" + c.id))
}

func decodeCursor(s string) (cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, errors.Wrap(projections.ErrBadCursor, "not base64")
	}
	at, id, ok := strings.Cut(string(raw), "|")
	n, convErr := strconv.ParseInt(at, 10, 64)
	if !ok || convErr != nil || id == "" {
		return cursor{}, errors.Wrap(projections.ErrBadCursor, "malformed")
	}
	return cursor{submitted: n, id: id}, nil
}

// List implements projections.TaskStore: newest submission first, ties by
// id, the cursor continuing strictly after the last row of a page. The rows
// are the tasks' summaries, without results, and a page ends early, with a
// cursor, once its rows reach q.MaxBytes.
func (d *DB) List(ctx context.Context, q projections.TaskQuery) (projections.TaskPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = projections.DefaultPageSize
	}
	limit = min(limit, projections.MaxPageSize)
	maxBytes := q.MaxBytes
	if maxBytes <= 0 {
		maxBytes = projections.DefaultPageBytes
	}
	var where []string
	var args []any
	if q.State != "" {
		where, args = append(where, "state = ?"), append(args, string(q.State))
	}
	if q.Workflow != "" {
		where, args = append(where, "workflow = ?"), append(args, q.Workflow)
	}
	if !q.Since.IsZero() {
		where, args = append(where, "submitted_at >= ?"), append(args, q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		where, args = append(where, "submitted_at < ?"), append(args, q.Until.UnixNano())
	}
	// Step and reason are read from the row's summary (its body in a row
	// stored without one): no index, so they cost a scan of the rows the
	// other filters leave. The summary is a BLOB, which SQLite's JSON
	// functions would take for JSONB: it is cast to text.
	if q.Step != "" {
		states := make([]string, len(projections.ActiveStepStates))
		for i, st := range projections.ActiveStepStates {
			states[i] = "'" + string(st) + "'"
		}
		where = append(where, `EXISTS (SELECT 1 FROM json_each(CAST(coalesce(summary, body) AS TEXT), '$.steps') WHERE json_extract(value, '$.name') = ?
			AND json_extract(value, '$.state') IN (`+strings.Join(states, ", ")+`))`)
		args = append(args, q.Step)
	}
	if q.Priority != "" {
		// Rows stored before priorities have none: they are normal.
		where, args = append(where, "coalesce(json_extract(CAST(coalesce(summary, body) AS TEXT), '$.priority'), 'normal') = ?"), append(args, string(q.Priority))
	}
	if q.Reason != "" {
		where, args = append(where, "instr(lower(json_extract(CAST(coalesce(summary, body) AS TEXT), '$.reason')), lower(?)) > 0"), append(args, q.Reason)
	}
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return projections.TaskPage{}, err
		}
		// A row value, not "submitted_at < ? OR (submitted_at = ? AND id
		// < ?)": with the OR, SQLite (3.54) seeks the index on state alone
		// and walks every row before the cursor, so a page cost grew with
		// its depth (200 ms at 100,000 tasks); the row value is a range on
		// the index (3 ms at any depth).
		where, args = append(where, "(submitted_at, id) < (?, ?)"), append(args, c.submitted, c.id)
	}
	// A row stored without a summary (format 1) gives its body, summarised
	// here.
	query := `SELECT id, submitted_at, summary, CASE WHEN summary IS NULL THEN body END FROM tasks`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY submitted_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return projections.TaskPage{}, errors.Wrap(err, "list tasks")
	}
	defer rows.Close()
	var page projections.TaskPage
	var last cursor
	// Raw rows are copied into one buffer, not one allocation each (a page
	// of 1,000 rows is about 1 MB), the caller's when it gives one.
	raw := q.RawBuffer[:0]
	var ends []int
	size := 0
	for n := 0; rows.Next(); n++ {
		var body, full sql.RawBytes
		var row cursor
		if err := rows.Scan(&row.id, &row.submitted, &body, &full); err != nil {
			return projections.TaskPage{}, errors.Wrap(err, "read a task row")
		}
		if body == nil {
			var err error
			if body, err = summarise(full); err != nil {
				return projections.TaskPage{}, errors.Wrapf(err, "summarise task %s", row.id)
			}
		}
		if n == limit || n > 0 && size+len(body) > maxBytes {
			page.NextCursor = last.encode()
			break
		}
		size += len(body)
		last = row
		if q.Raw {
			if raw == nil {
				raw = make([]byte, 0, len(body)*min(limit, 1000)*5/4)
			}
			raw = append(raw, body...)
			ends = append(ends, len(raw))
			continue
		}
		var t protocol.TaskView
		if err := json.Unmarshal(body, &t); err != nil {
			return projections.TaskPage{}, errors.Wrap(err, "decode a task row")
		}
		page.Tasks = append(page.Tasks, &t)
	}
	if err := rows.Err(); err != nil {
		return projections.TaskPage{}, errors.Wrap(err, "list tasks")
	}
	start := 0
	for _, end := range ends {
		page.Raw = append(page.Raw, json.RawMessage(raw[start:end:end]))
		start = end
	}
	page.RawBuffer = raw
	return page, nil
}

// summarise makes the summary of a row stored without one.
func summarise(body []byte) ([]byte, error) {
	var t protocol.TaskView
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, errors.Wrap(err, "decode a task row")
	}
	return protocol.AppendTaskSummary(nil, &t)
}

// Counts implements projections.TaskStore.
func (d *DB) Counts(ctx context.Context) (map[domain.TaskState]int, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT state, n FROM counts WHERE n > 0`)
	if err != nil {
		return nil, errors.Wrap(err, "count tasks")
	}
	defer rows.Close()
	out := map[domain.TaskState]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, errors.Wrap(err, "count tasks")
		}
		out[domain.TaskState(state)] = n
	}
	return out, errors.Wrap(rows.Err(), "count tasks")
}
