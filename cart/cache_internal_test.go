package cart

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listeningCache is a cache as it is while it is subscribed to the notices (no database, no
// broker: the tests below drive the interleavings of readers, writers and notices by hand).
func listeningCache(t *testing.T, opts CacheOptions) *Cache {
	t.Helper()
	if opts.Entries == 0 {
		opts.Entries = 100
	}
	opts.Heartbeat = time.Hour // the lease does not run out during a test
	c := NewCache(opts)
	require.NotNil(t, c)
	c.up(time.Now())
	return c
}

func entry(id string, version int64, skus ...int64) Entry {
	e := Entry{Snapshot: Snapshot{ID: id, Version: version}, Exists: version > 0}
	for _, s := range skus {
		e.Doc.Items = append(e.Doc.Items, Item{SKUID: s, Quantity: 1, PriceAtAdd: "1.00"})
	}
	return e
}

func held(c *Cache, id string) (int64, bool) {
	e, ok := c.get(id)
	return e.Version, ok
}

func TestCache_FillBegunBeforeAnAnnouncedChange_CannotStoreTheOlderVersion(t *testing.T) {
	c := listeningCache(t, CacheOptions{})
	token := c.reserve("u:1") // a reader misses and reads version 3 ...
	c.apply("u:1 4")          // ... while version 4 commits elsewhere and is announced
	c.fill("u:1", token, entry("u:1", 3))
	_, ok := held(c, "u:1")
	assert.False(t, ok, "version 3 was read before 4 was announced")

	c.fill("u:1", token, entry("u:1", 4)) // a reader that read after the commit may fill
	v, ok := held(c, "u:1")
	assert.True(t, ok)
	assert.EqualValues(t, 4, v)
	c.apply("u:1 4") // its own announcement, late: the entry is that version already
	v, ok = held(c, "u:1")
	assert.True(t, ok)
	assert.EqualValues(t, 4, v)
	c.fill("u:1", token, entry("u:1", 3))
	v, _ = held(c, "u:1")
	assert.EqualValues(t, 4, v, "never back to an older version")
	c.apply("u:1 5")
	_, ok = held(c, "u:1")
	assert.False(t, ok, "an announced newer version drops the entry")
}

func TestCache_DeletedCartOrClear_VoidsEveryFillBegunBefore(t *testing.T) {
	c := listeningCache(t, CacheOptions{})
	token := c.reserve("u:1")
	c.apply("u:1") // deleted (or changed without a new version)
	c.fill("u:1", token, entry("u:1", 7))
	_, ok := held(c, "u:1")
	assert.False(t, ok)

	token = c.reserve("u:1")
	c.clear() // the subscription was lost
	c.fill("u:1", token, entry("u:1", 7))
	_, ok = held(c, "u:1")
	assert.False(t, ok)

	token = c.reserve("u:1")
	c.forget("u:1") // a write of this process with an unknown result
	c.fill("u:1", token, entry("u:1", 7))
	_, ok = held(c, "u:1")
	assert.False(t, ok)
}

func TestCache_NotListening_ServesAndStoresNothing_UntilListeningAgain(t *testing.T) {
	c := listeningCache(t, CacheOptions{})
	c.fill("u:1", c.reserve("u:1"), entry("u:1", 1))
	before := c.reserve("u:2")
	_, ok := held(c, "u:1")
	require.True(t, ok)

	c.lose()
	assert.Zero(t, c.Stats().Entries, "losing the connection clears the cache")
	_, ok = held(c, "u:1")
	assert.False(t, ok)
	assert.Zero(t, c.reserve("u:1"), "no slot while not listening")
	c.fill("u:2", before, entry("u:2", 1))
	c.wrote("u:1", 0, entry("u:1", 2))
	assert.Zero(t, c.Stats().Entries)

	c.up(time.Now())
	c.fill("u:2", before, entry("u:2", 1))
	_, ok = held(c, "u:2")
	assert.False(t, ok, "a fill begun before the connection was lost stays void")
	c.fill("u:2", c.reserve("u:2"), entry("u:2", 1))
	_, ok = held(c, "u:2")
	assert.True(t, ok)

	c.leaseUntil.Store(time.Now().Add(-time.Second).UnixNano()) // the listener went quiet
	_, ok = held(c, "u:2")
	assert.False(t, ok, "no proof of life, no serving")
	assert.Zero(t, c.reserve("u:3"))
}

func TestCache_OwnWrite_ReplacesOlderAndBlocksOlderFills(t *testing.T) {
	c := listeningCache(t, CacheOptions{})
	c.fill("u:1", c.reserve("u:1"), entry("u:1", 1))

	// A reader misses after the entry is dropped, and reads version 1 while a write of this
	// process commits version 2.
	c.forget("u:1")
	readerToken := c.reserve("u:1")
	c.wrote("u:1", readerToken-1, entry("u:1", 2)) // the writer's own slot is gone
	c.fill("u:1", readerToken, entry("u:1", 1))
	_, ok := held(c, "u:1")
	assert.False(t, ok, "the reader's version 1 is older than the acknowledged write")

	writerToken := c.reserve("u:1")
	c.wrote("u:1", writerToken, entry("u:1", 3, 71))
	e, ok := c.get("u:1")
	require.True(t, ok)
	assert.EqualValues(t, 3, e.Version)
	assert.Len(t, e.Doc.Items, 1)

	c.wrote("u:1", writerToken, entry("u:1", 2)) // an older write of this process settling late
	_, ok = held(c, "u:1")
	assert.False(t, ok, "only a fresh read can tell which is current")
}

func TestCache_Bounds_EntriesAndMemory(t *testing.T) {
	c := listeningCache(t, CacheOptions{Entries: 3})
	for i := range 10 {
		id := "u:" + string(rune('a'+i))
		c.fill(id, c.reserve(id), entry(id, 1, 71))
		st := c.Stats()
		assert.LessOrEqual(t, st.Entries, 3)
		_, ok := held(c, id)
		assert.True(t, ok, "the newest entry stays")
	}
	assert.Positive(t, c.Stats().Capacity)

	big := entry("u:big", 1)
	for range 50 {
		big.Doc.Items = append(big.Doc.Items, Item{SKUID: 1, PriceAtAdd: "1.00"})
	}
	limit := entrySize(big) * 2
	c = listeningCache(t, CacheOptions{Entries: 100, MaxBytes: limit})
	for i := range 10 {
		id := "u:" + string(rune('a'+i))
		e := big
		e.ID = id
		c.fill(id, c.reserve(id), e)
		assert.LessOrEqual(t, c.Stats().Bytes, limit)
	}
}

func TestCache_Apply_ParsesPayloads(t *testing.T) {
	c := listeningCache(t, CacheOptions{})
	id := GuestID("some-guest-token-of-enough-length")
	c.fill(id, c.reserve(id), entry(id, 5))
	c.apply(id + " 5")
	_, ok := held(c, id)
	assert.True(t, ok)
	c.apply(id + " 6")
	_, ok = held(c, id)
	assert.False(t, ok)
	assert.EqualValues(t, 2, c.Stats().Notifications)
}

func TestNilCache_IsSwitchedOff(t *testing.T) {
	var c *Cache
	assert.Nil(t, NewCache(CacheOptions{Entries: 0}))
	assert.Zero(t, c.reserve("u:1"))
	c.wrote("u:1", 0, entry("u:1", 1))
	c.forget("u:1")
	assert.False(t, c.Listening())
	assert.Zero(t, c.Stats())
	assert.NoError(t, c.Run(t.Context()))
}

// A change no notice announced (the janitor's deletion, a fix by hand, a writer that died between
// its commit and its notice) is served at most MaxAge after the entry was stored.
func TestCache_MaxAge_AnOlderEntryIsReadAgain(t *testing.T) {
	c := listeningCache(t, CacheOptions{MaxAge: 50 * time.Millisecond})
	c.fill("u:1", c.reserve("u:1"), entry("u:1", 3))
	_, ok := c.get("u:1")
	require.True(t, ok, "served while young")
	time.Sleep(60 * time.Millisecond)
	_, ok = c.get("u:1")
	assert.False(t, ok, "too old: a miss, read from the database")
	c.fill("u:1", c.reserve("u:1"), entry("u:1", 3))
	_, ok = c.get("u:1")
	assert.True(t, ok, "the fresh read of the same version is served again")
}
