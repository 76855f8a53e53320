package eslog

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/cockroachdb/errors"
)

// A table is an immutable file of index entries sorted by (stream hash,
// revision, position), in the spirit of EventStoreDB's PTables:
//
//	entries  count × 24 bytes: hash, revision, frame position (little-endian uint64s)
//	fence    one (hash, revision) of 16 bytes per block of blockEntries entries: the block's first key
//	bloom    a Bloom filter of the table's stream hashes, 10 bits per stream
//	footer   count, bloom bits (uint64s), CRC-32C of entries, fence and bloom, padding, magic
//
// Open reads the footer, checks the fence and the bloom filter (16 bytes per
// 170 entries, 10 bits per stream) and maps them (where there is no mmap
// they are read into memory): they grow with history, so they stay out of
// Go's heap, in the page cache. A lookup of a stream the table does not hold almost
// always ends at the filter, and one it holds is a binary search of the
// fence and one read of a 4 KiB block, which the page cache keeps if it is
// hot.
const (
	entrySize    = 24
	fenceSize    = 16
	footerSize   = 40
	bloomProbes  = 7
	blockEntries = 170
	tableMagic   = 0x31305844494c5345 // "ESLIDX01"
	tablePrefix  = "table-"
	tableSuffix  = ".idx"
)

type table struct {
	seq   uint64
	path  string
	file  *os.File
	count int
	size  int64
	// fence and bloom are the table's fence and filter as the file holds
	// them (little-endian), mapped by mapRegion; unmap releases them.
	fence, bloom []byte
	unmap        func() error
	// closed is set when the table is closed, under the store's write
	// lock or once no reader can reach it: a reader (under the read lock)
	// that still holds it gets errTableClosed instead of touching unmapped
	// memory.
	closed bool
}

// errTableClosed is what a closed table answers.
var errTableClosed = errors.New("index table closed")

// blocks is the number of keys in the fence.
func (t *table) blocks() int { return len(t.fence) / fenceSize }

// fenceAt is the fence's i-th key: the first key of block i.
func (t *table) fenceAt(i int) fenceKey {
	b := t.fence[i*fenceSize:]
	return fenceKey{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
}

// bloomBits returns the bit positions of hash h in a filter of m bits.
func bloomBit(h uint64, i, m uint64) uint64 {
	h2 := (h >> 29) | (h << 35) | 1
	return (h + i*h2) % m
}

// mayContain reports whether the filter may hold h. A closed table says
// yes, so that the read that follows reports it closed.
func (t *table) mayContain(h uint64) bool {
	if t.closed {
		return true
	}
	// The filter is little-endian uint64s: bit b of the filter is bit b%8
	// of byte b/8.
	m := uint64(len(t.bloom)) * 8
	for i := range uint64(bloomProbes) {
		b := bloomBit(h, i, m)
		if t.bloom[b/8]&(1<<(b%8)) == 0 {
			return false
		}
	}
	return true
}

func buildBloom(hashes []uint64) []uint64 {
	words := max(1, (len(hashes)*10+63)/64)
	bloom := make([]uint64, words)
	m := uint64(words) * 64
	for _, h := range hashes {
		for i := range uint64(bloomProbes) {
			b := bloomBit(h, i, m)
			bloom[b/64] |= 1 << (b % 64)
		}
	}
	return bloom
}

type fenceKey struct{ h, rev uint64 }

func (k fenceKey) less(e ientry) bool { return k.h < e.h || (k.h == e.h && k.rev < e.rev) }

func tableName(seq uint64) string { return fmt.Sprintf("%s%016d%s", tablePrefix, seq, tableSuffix) }

// writeTable writes the entries next gives, already in index order, to a new
// table file and syncs it. The caller syncs the directory (the checkpoint
// that names the table does).
func writeTable(dir string, seq uint64, next func() (ientry, bool, error)) (*table, error) {
	path := filepath.Join(dir, tableName(seq))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, errors.Wrapf(err, "create index table %s", path)
	}
	t, err := fillTable(f, next)
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, errors.Wrapf(err, "write index table %s", path)
	}
	t.seq, t.path = seq, path
	return t, nil
}

func fillTable(f *os.File, next func() (ientry, bool, error)) (*table, error) {
	w := bufio.NewWriterSize(f, 1<<20)
	t := &table{file: f}
	entriesCRC := crc32.New(castagnoli)
	var b [entrySize]byte
	var hashes []uint64
	var fence []fenceKey
	for {
		e, ok, err := next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if len(hashes) == 0 || hashes[len(hashes)-1] != e.h {
			hashes = append(hashes, e.h)
		}
		if t.count%blockEntries == 0 {
			fence = append(fence, fenceKey{e.h, e.rev})
		}
		binary.LittleEndian.PutUint64(b[0:], e.h)
		binary.LittleEndian.PutUint64(b[8:], e.rev)
		binary.LittleEndian.PutUint64(b[16:], e.pos)
		_, _ = entriesCRC.Write(b[:])
		if _, err := w.Write(b[:]); err != nil {
			return nil, err
		}
		t.count++
	}
	fenceCRC := crc32.New(castagnoli)
	for _, k := range fence {
		binary.LittleEndian.PutUint64(b[0:], k.h)
		binary.LittleEndian.PutUint64(b[8:], k.rev)
		_, _ = fenceCRC.Write(b[:fenceSize])
		if _, err := w.Write(b[:fenceSize]); err != nil {
			return nil, err
		}
	}
	words := buildBloom(hashes)
	bloom := make([]byte, 0, 8*len(words))
	for _, w := range words {
		bloom = binary.LittleEndian.AppendUint64(bloom, w)
	}
	if _, err := w.Write(bloom); err != nil {
		return nil, err
	}
	var footer [footerSize]byte
	binary.LittleEndian.PutUint64(footer[0:], uint64(t.count))
	binary.LittleEndian.PutUint64(footer[8:], uint64(len(words))*64)
	binary.LittleEndian.PutUint32(footer[16:], entriesCRC.Sum32())
	binary.LittleEndian.PutUint32(footer[20:], fenceCRC.Sum32())
	binary.LittleEndian.PutUint32(footer[24:], crc32.Checksum(bloom, castagnoli))
	binary.LittleEndian.PutUint64(footer[32:], tableMagic)
	if _, err := w.Write(footer[:]); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if err := fdatasync(f); err != nil {
		return nil, errors.Wrap(err, "sync")
	}
	t.size = int64(t.count)*entrySize + int64(len(fence))*fenceSize + int64(len(bloom)) + footerSize
	if err := t.mapMeta(len(fence)*fenceSize, len(bloom)); err != nil {
		return nil, err
	}
	return t, nil
}

// mapMeta maps the fence (fenceBytes long) and the filter (bloomBytes),
// which end where the footer begins.
func (t *table) mapMeta(fenceBytes, bloomBytes int) error {
	meta, unmap, err := mapRegion(t.file, t.size-footerSize-int64(fenceBytes+bloomBytes), fenceBytes+bloomBytes)
	if err != nil {
		return err
	}
	t.fence, t.bloom, t.unmap = meta[:fenceBytes:fenceBytes], meta[fenceBytes:], unmap
	return nil
}

// openTable opens the table file of seq and checks it against what the
// checkpoint says of it.
func openTable(dir string, seq uint64, count int) (*table, error) {
	path := filepath.Join(dir, tableName(seq))
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Wrapf(err, "open index table %s", path)
	}
	t, err := loadTable(f, count)
	if err != nil {
		_ = f.Close()
		return nil, errors.Wrapf(err, "index table %s", path)
	}
	t.seq, t.path = seq, path
	return t, nil
}

func loadTable(f *os.File, count int) (*table, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, errors.Wrap(err, "stat")
	}
	if info.Size() < footerSize {
		return nil, errors.Newf("is %d bytes, too short", info.Size())
	}
	footer := make([]byte, footerSize)
	if _, err := f.ReadAt(footer, info.Size()-footerSize); err != nil {
		return nil, errors.Wrap(err, "read footer")
	}
	if binary.LittleEndian.Uint64(footer[32:]) != tableMagic || binary.LittleEndian.Uint64(footer[0:]) != uint64(count) {
		return nil, errors.New("bad footer")
	}
	bloomBytes := int64(binary.LittleEndian.Uint64(footer[8:]) / 8)
	blocks := (count + blockEntries - 1) / blockEntries
	size := int64(count)*entrySize + int64(blocks)*fenceSize + bloomBytes + footerSize
	if info.Size() != size || bloomBytes%8 != 0 || bloomBytes == 0 {
		return nil, errors.Newf("is %d bytes, expected %d for %d entries", info.Size(), size, count)
	}
	// Checked through reads, not the mapping: a disk that fails to read
	// them then fails the open (and the index is rebuilt from the log)
	// rather than stopping the process with SIGBUS. The reads go through
	// one small buffer, so that a large table costs no heap at open, and
	// leave the bytes in the page cache for the mapping.
	fenceAt := int64(count) * entrySize
	buf := make([]byte, 1<<20)
	fenceSum, err := checksumAt(f, fenceAt, int64(blocks*fenceSize), buf)
	if err != nil {
		return nil, errors.Wrap(err, "read fence")
	}
	bloomSum, err := checksumAt(f, fenceAt+int64(blocks*fenceSize), bloomBytes, buf)
	if err != nil {
		return nil, errors.Wrap(err, "read filter")
	}
	if fenceSum != binary.LittleEndian.Uint32(footer[20:]) || bloomSum != binary.LittleEndian.Uint32(footer[24:]) {
		return nil, errors.New("fence or filter checksum mismatch")
	}
	t := &table{file: f, count: count, size: size}
	if err := t.mapMeta(blocks*fenceSize, int(bloomBytes)); err != nil {
		return nil, err
	}
	return t, nil
}

// checksumAt is the CRC-32C of n bytes of f from off, read through buf.
func checksumAt(f *os.File, off, n int64, buf []byte) (uint32, error) {
	sum := crc32.New(castagnoli)
	if _, err := io.CopyBuffer(sum, io.NewSectionReader(f, off, n), buf); err != nil {
		return 0, err
	}
	return sum.Sum32(), nil
}

// close unmaps the fence and filter and closes the file. The caller makes
// sure no reader can reach the table (it holds the store's write lock, or
// the table was never published).
func (t *table) close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	var err error
	if t.unmap != nil {
		err = t.unmap()
	}
	return errors.CombineErrors(err, t.file.Close())
}

// read returns up to n entries from index i on.
func (t *table) read(i, n int) ([]ientry, error) {
	if t.closed {
		return nil, errors.Wrapf(errTableClosed, "read index table %s", t.path)
	}
	n = min(n, t.count-i)
	if n <= 0 {
		return nil, nil
	}
	buf := make([]byte, n*entrySize)
	if _, err := t.file.ReadAt(buf, int64(i)*entrySize); err != nil {
		return nil, errors.Wrapf(err, "read index table %s", t.path)
	}
	out := make([]ientry, n)
	for k := range out {
		b := buf[k*entrySize:]
		out[k] = ientry{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
	}
	return out, nil
}

// seek returns the index of the first entry whose (hash, revision) is at or
// after key's, and that block's entries from it on.
func (t *table) seek(key ientry) (int, []ientry, error) {
	// The first block whose first key is not below key; the entry sought is
	// in the block before it, or is its first.
	if t.closed {
		return 0, nil, errors.Wrapf(errTableClosed, "read index table %s", t.path)
	}
	b := sort.Search(t.blocks(), func(i int) bool { return !t.fenceAt(i).less(key) }) - 1
	if b < 0 {
		block, err := t.read(0, blockEntries)
		return 0, block, err
	}
	block, err := t.read(b*blockEntries, blockEntries)
	if err != nil {
		return 0, nil, err
	}
	k := sort.Search(len(block), func(i int) bool { return !(fenceKey{block[i].h, block[i].rev}).less(key) })
	if k == len(block) {
		i := b*blockEntries + len(block)
		next, err := t.read(i, blockEntries)
		return i, next, err
	}
	return b*blockEntries + k, block[k:], nil
}

// scan calls fn for the entries of hash h with revisions lo..hi, in order,
// until fn returns false.
func (t *table) scan(h, lo, hi uint64, fn func(ientry) bool) error {
	i, block, err := t.seek(ientry{h: h, rev: lo})
	for err == nil && len(block) > 0 {
		for _, e := range block {
			if e.h != h || e.rev > hi {
				return nil
			}
			if !fn(e) {
				return nil
			}
		}
		i += len(block)
		block, err = t.read(i, blockEntries)
	}
	return err
}

// top returns the entry of hash h with the highest revision below
// tombstoneRev, and whether there is one, and the tombstone entries of h.
func (t *table) top(h uint64) (ientry, bool, []ientry, error) {
	i, block, err := t.seek(ientry{h: h, rev: tombstoneRev})
	if err != nil {
		return ientry{}, false, nil, err
	}
	var tombs []ientry
	for j := i; len(block) > 0; {
		for _, e := range block {
			if e.h != h {
				block = nil
				break
			}
			tombs = append(tombs, e)
		}
		if block == nil {
			break
		}
		j += len(block)
		if block, err = t.read(j, blockEntries); err != nil {
			return ientry{}, false, nil, err
		}
	}
	if i == 0 {
		return ientry{}, false, tombs, nil
	}
	prev, err := t.read(i-1, 1)
	if err != nil || len(prev) == 0 || prev[0].h != h {
		return ientry{}, false, tombs, err
	}
	return prev[0], true, tombs, nil
}

// iterator returns a function that yields every entry in order, reading
// the file in large chunks and checking the entries' checksum at the end.
func (t *table) iterator() func() (ientry, bool, error) {
	const chunk = 1 << 14
	var buf []ientry
	var i int
	sum := crc32.New(castagnoli)
	var b [entrySize]byte
	return func() (ientry, bool, error) {
		if len(buf) == 0 {
			if i >= t.count {
				footer := make([]byte, footerSize)
				if _, err := t.file.ReadAt(footer, t.size-footerSize); err != nil && err != io.EOF {
					return ientry{}, false, errors.Wrapf(err, "read index table %s", t.path)
				}
				if sum.Sum32() != binary.LittleEndian.Uint32(footer[16:]) {
					return ientry{}, false, errors.Wrapf(ErrCorrupt, "index table %s: entries checksum mismatch", t.path)
				}
				return ientry{}, false, nil
			}
			var err error
			if buf, err = t.read(i, chunk); err != nil {
				return ientry{}, false, err
			}
			i += len(buf)
		}
		e := buf[0]
		buf = buf[1:]
		binary.LittleEndian.PutUint64(b[0:], e.h)
		binary.LittleEndian.PutUint64(b[8:], e.rev)
		binary.LittleEndian.PutUint64(b[16:], e.pos)
		_, _ = sum.Write(b[:])
		return e, true, nil
	}
}

// mergeIterators yields the entries of a and b in index order.
func mergeIterators(a, b func() (ientry, bool, error)) func() (ientry, bool, error) {
	ea, oka, erra := a()
	eb, okb, errb := b()
	return func() (ientry, bool, error) {
		if erra != nil {
			return ientry{}, false, erra
		}
		if errb != nil {
			return ientry{}, false, errb
		}
		switch {
		case oka && (!okb || compareEntries(ea, eb) <= 0):
			e := ea
			ea, oka, erra = a()
			return e, true, nil
		case okb:
			e := eb
			eb, okb, errb = b()
			return e, true, nil
		default:
			return ientry{}, false, nil
		}
	}
}

// sliceIterator yields the entries of s.
func sliceIterator(s []ientry) func() (ientry, bool, error) {
	return func() (ientry, bool, error) {
		if len(s) == 0 {
			return ientry{}, false, nil
		}
		e := s[0]
		s = s[1:]
		return e, true, nil
	}
}
