package integration_test

import (
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// unsyncedBrokerFiles maps the files of the embedded broker in dataDir that
// are written without fsync to their sizes: the groups' offsets log, the
// producer IDs log, and the segment and index files of every topic but the
// synced ones (broker.DefaultSyncTopics, which the chaos child keeps), whose
// produces are fsynced before they are acknowledged. These files are what a
// power loss can shorten. (Status and reply topics are among them: their
// records are fsynced by the status publisher's sync barriers, not before
// each acknowledgement, so a cut here can take more of them than a power
// loss could; TestStatusesSurviveAPowerLoss cuts them exactly.)
func unsyncedBrokerFiles(dataDir string) (map[string]int64, error) {
	dir := filepath.Join(dataDir, "kafka")
	sizes := map[string]int64{}
	for _, name := range []string{"groups.log", "pids.log"} {
		if info, err := os.Stat(filepath.Join(dir, name)); err == nil {
			sizes[filepath.Join(dir, name)] = info.Size()
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, "partitions"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".dat" && ext != ".idx" {
			return nil
		}
		partition := filepath.Base(filepath.Dir(path)) // url-escaped topic, "-", partition
		topic, err := url.PathUnescape(partition[:strings.LastIndexByte(partition, '-')])
		if err != nil || broker.SyncTopicMatch(broker.DefaultSyncTopics, topic) {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sizes[path] = info.Size()
		return nil
	})
	if os.IsNotExist(err) {
		err = nil
	}
	return sizes, err
}

// cutPowerLoss does to the broker's unsynced files what a power loss can do
// once the broker is dead: each keeps a prefix, since the writes it loses
// are its last ones, those the kernel had not written back yet. Each file
// independently loses either everything written since the broker last
// started (sizes at start, from unsyncedBrokerFiles; a new file loses all),
// with probability ¼, or a random tail of up to 64 KiB, cut anywhere, so
// often inside a record. It returns what it cut, for the log.
func cutPowerLoss(dataDir string, atStart map[string]int64) (string, error) {
	now, err := unsyncedBrokerFiles(dataDir)
	if err != nil {
		return "", err
	}
	var cuts []string
	var total int64
	for _, path := range slices.Sorted(maps.Keys(now)) {
		size := now[path]
		keep, rule := size-rand.Int64N(min(64<<10, size)+1), ""
		if rand.IntN(4) == 0 {
			keep, rule = min(atStart[path], size), " (all since start)"
		}
		if keep == size {
			continue
		}
		if err := os.Truncate(path, keep); err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(filepath.Join(dataDir, "kafka"), path)
		cuts = append(cuts, fmt.Sprintf("%s %d→%d%s", strings.TrimPrefix(rel, "partitions"+string(filepath.Separator)), size, keep, rule))
		total += size - keep
	}
	return fmt.Sprintf("%d bytes from %d files: %s", total, len(cuts), strings.Join(cuts, ", ")), nil
}
