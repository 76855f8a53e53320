package broker

import (
	"encoding/binary"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/errors"
)

// The embedded broker's append-only state logs, which are written without
// fsync: a power loss can leave a torn last entry.
var brokerStateLogs = []string{"groups.log", "pids.log"}

// trimTornLogs cuts a torn tail off the broker's state logs before the
// broker opens them. kfake reads such a log only up to a torn entry but
// leaves the torn bytes in the file and appends after them, so every
// consumer-group commit made after a power loss would be ignored at every
// later start, and a stale commit could come back and skip records. Cutting
// the tail loses only what the power loss had already lost.
//
// The entry framing is kfake's: little-endian uint32 length (of version and
// data), little-endian CRC-32C of version and data, uint16 version, data.
func trimTornLogs(dir string, logger *slog.Logger) error {
	for _, name := range brokerStateLogs {
		path := filepath.Join(dir, name)
		raw, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return errors.Wrapf(err, "read %s", path)
		}
		valid := validLogPrefix(raw)
		if valid == len(raw) {
			continue
		}
		logger.Warn("kafka broker: cutting a torn tail off a state log, as a power loss left it",
			"file", path, "valid", valid, "cut", len(raw)-valid)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return errors.Wrapf(err, "open %s", path)
		}
		err = f.Truncate(int64(valid))
		if err == nil {
			err = f.Sync()
		}
		if closeErr := f.Close(); err == nil {
			err = closeErr
		}
		if err != nil {
			return errors.Wrapf(err, "cut the torn tail of %s", path)
		}
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// validLogPrefix is the length of the complete, intact entries at the start
// of a state log.
func validLogPrefix(raw []byte) int {
	const header = 10 // length, CRC, version
	pos := 0
	for pos+header <= len(raw) {
		length := int(binary.LittleEndian.Uint32(raw[pos:]))
		if length < 2 || pos+8+length > len(raw) {
			break
		}
		if crc32.Checksum(raw[pos+8:pos+8+length], castagnoli) != binary.LittleEndian.Uint32(raw[pos+4:]) {
			break
		}
		pos += 8 + length
	}
	return pos
}
