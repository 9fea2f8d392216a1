package cart

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/marketplace/checkout/cart/internal/cartstore"
	"github.com/marketplace/checkout/db"
)

// Cache is an in-process cache of cart documents in front of the carts table: one per API
// process, keyed by cart id, holding the decoded document, its version and its merged mark. The
// cart page reads it; a miss reads the row and fills it.
//
// Coherence: every write of a cart through an API process announces itself, once committed, on the
// event broker's core subject <prefix>.cart.changed (Notices). Run subscribes and applies each
// announcement: an entry older than the announced version, or any entry of a deleted cart, goes.
// While the cache is not subscribed (before the first subscription is in place, after the
// connection to the broker is lost, while it reconnects, after a notice was dropped for a slow
// subscriber) it holds nothing and serves nothing: losing the subscription clears it, so an
// announcement missed meanwhile can never leave a stale cart behind. A liveness lease does the
// same for a connection that goes silent without breaking: the cache serves only while the
// subscription has proved itself alive (a round trip to the broker, which delivers what it holds
// for the subscriber before it answers) within the last three heartbeats. What no API process
// announces — a change made outside them (the janitor's deletions of carts idle for months, a fix
// by hand), a process that died between its commit and its notice — is bounded by MaxAge: no entry
// is served older than that.
//
// A write in this process updates its own entry at once (Store), so a shopper reads their own
// write whichever announcement is still on its way; a reader that filled the cache with what it
// read before such a write cannot put the older version back (see fill and wrote).
//
// Entries are bounded in number and in estimated memory; past a bound, random entries go.
// A nil *Cache is a cache that is switched off: every read goes to the database.
type Cache struct {
	opts CacheOptions
	log  *slog.Logger

	seed          maphash.Seed
	shards        []cacheShard
	shardEntries  int
	shardBytes    int64
	tokens        atomic.Uint64 // source of slot tokens; 0 is never a valid token
	listening     atomic.Bool
	leaseUntil    atomic.Int64 // unix nanoseconds until which the listener counts as alive
	hits, misses  atomic.Uint64
	notifications atomic.Uint64
	evicted       atomic.Uint64 // entries dropped on an announcement or a write elsewhere
	capacity      atomic.Uint64 // entries dropped to stay within the bounds
	resets        atomic.Uint64 // whole-cache clears (connection lost, truncate)
	reconnects    atomic.Uint64
	heartbeats    atomic.Uint64

	stateMu   sync.Mutex
	published bool          // listening, as Listening and WaitListening report it
	stateCh   chan struct{} // closed and replaced whenever published changes
}

// CacheOptions size and connect a Cache.
type CacheOptions struct {
	// Entries bounds how many carts are held; 0 or less switches the cache off (NewCache is nil).
	Entries int
	// MaxBytes bounds the estimated memory of the held documents; 0 means DefaultCacheBytes.
	MaxBytes int64
	// Heartbeat is how often the listener proves its connection alive; 0 means DefaultHeartbeat.
	// The cache serves only while the last proof is younger than three heartbeats.
	Heartbeat time.Duration
	// Conn is the process's connection to the event broker and Subject the notices' subject
	// (events.CartSubject); without a connection the cache never serves.
	Conn    *nats.Conn
	Subject string
	// MaxAge bounds how long an entry is served after it was read or written here (0 means
	// DefaultCacheMaxAge): the bound on a change no notice announced.
	MaxAge time.Duration
	Log    *slog.Logger
}

// Defaults of CacheOptions.
const (
	DefaultCacheEntries = 100_000
	DefaultCacheBytes   = 64 << 20
	DefaultHeartbeat    = time.Second
	DefaultCacheMaxAge  = 5 * time.Minute
)

// Entry is a cart as the cache holds it: the document with its version, the merged mark of a
// merged guest cart, and whether a row exists at all (a missing cart is an empty one at version
// 0). Entries are shared between readers and never modified.
type Entry struct {
	Snapshot
	MergedAt *time.Time
	Exists   bool
}

// slot is a cache entry, or a placeholder for one being read. token names the slot: a reader or
// writer that began while the slot existed may fill it only if the slot is still the same one, so
// dropping a slot (an announcement of a deleted cart, a clear) voids every fill begun before.
// floor is the highest version announced since the slot was made: nothing older may fill it.
type slot struct {
	token uint64
	floor int64
	has   bool
	entry Entry
	size  int64
	at    int64 // unix nanoseconds when entry was stored
}

type cacheShard struct {
	mu    sync.RWMutex
	slots map[string]*slot
	bytes int64
}

// NewCache returns a cache of cart documents, switched off (serving nothing) until Run has
// subscribed to the notices; nil when opts.Entries is 0 or less.
func NewCache(opts CacheOptions) *Cache {
	if opts.Entries <= 0 {
		return nil
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultCacheBytes
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultCacheMaxAge
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	n := 1
	if opts.Entries >= 4096 {
		n = 64
	}
	c := &Cache{opts: opts, log: opts.Log, seed: maphash.MakeSeed(), shards: make([]cacheShard, n),
		shardEntries: (opts.Entries + n - 1) / n, shardBytes: (opts.MaxBytes + int64(n) - 1) / int64(n),
		stateCh: make(chan struct{})}
	for i := range c.shards {
		c.shards[i].slots = map[string]*slot{}
	}
	return c
}

func (c *Cache) shard(id string) *cacheShard {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[maphash.String(c.seed, id)%uint64(len(c.shards))]
}

// serving: listening, and the listener proved itself alive recently.
func (c *Cache) serving() bool {
	return c.listening.Load() && time.Now().UnixNano() < c.leaseUntil.Load()
}

// Read returns the cart id: from the cache when it holds it, else from the database (filling
// the cache). A nil cache always reads the database.
func (c *Cache) Read(ctx context.Context, conn db.DBTX, id string) (Entry, error) {
	if c == nil {
		return readEntry(ctx, conn, id)
	}
	if e, ok := c.get(id); ok {
		return e, nil
	}
	token := c.reserve(id)
	e, err := readEntry(ctx, conn, id)
	if err != nil {
		return Entry{}, err
	}
	c.fill(id, token, e)
	return e, nil
}

func readEntry(ctx context.Context, conn db.DBTX, id string) (Entry, error) {
	row, err := cartstore.New(conn).CartDoc(ctx, id)
	if db.NotFound(err) {
		return Entry{Snapshot: Snapshot{ID: id}}, nil
	}
	if err != nil {
		return Entry{}, err
	}
	snap, err := snapshotOf(id, row.Version, []byte(row.Doc))
	if err != nil {
		return Entry{}, err
	}
	return Entry{Snapshot: snap, MergedAt: row.MergedAt, Exists: true}, nil
}

// get is a hit when the cache is serving and holds the cart.
func (c *Cache) get(id string) (Entry, bool) {
	if c.serving() {
		sh := c.shard(id)
		sh.mu.RLock()
		s := sh.slots[id]
		if s != nil && s.has && c.fresh(s) {
			e := s.entry
			sh.mu.RUnlock()
			c.hits.Add(1)
			return e, true
		}
		sh.mu.RUnlock()
	}
	c.misses.Add(1)
	return Entry{}, false
}

// reserve names the slot a read or write that starts now may fill when it is done: the cart's
// slot, made (empty) if there is none. 0, which fills nothing, while the cache is not serving.
func (c *Cache) reserve(id string) uint64 {
	if c == nil || !c.serving() {
		return 0
	}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !c.listening.Load() { // checked under the lock: a clear after this point finds the slot
		return 0
	}
	if s := sh.slots[id]; s != nil {
		return s.token
	}
	s := &slot{token: c.tokens.Add(1)}
	sh.slots[id] = s
	c.bound(sh, s)
	return s.token
}

// fill stores what a reader read, if its slot is still the one it reserved, nothing announced
// since is newer, and nothing newer is there already.
func (c *Cache) fill(id string, token uint64, e Entry) {
	if token == 0 {
		return
	}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.slots[id]
	if s == nil || s.token != token || !c.listening.Load() || e.Version < s.floor ||
		(s.has && s.entry.Version >= e.Version && c.fresh(s)) {
		return
	}
	c.set(sh, s, e)
}

// wrote records a write of this process that committed e (or found the cart already so): the
// cart's slot takes e if it is the slot the writer reserved; in any case nothing older than e
// stays, and nothing older than e can fill the slot later, so the writer's shopper reads this
// write or a newer one from now on.
func (c *Cache) wrote(id string, token uint64, e Entry) {
	if c == nil {
		return
	}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.slots[id]
	switch {
	case s == nil:
		// Any slot made from now on is filled by reads that start after the write.
	case s.has && s.entry.Version > e.Version:
		// Newer, or a cart deleted and made again whose deletion is still being announced:
		// only a fresh read can tell.
		c.drop(sh, id, s)
		c.evicted.Add(1)
	case s.has && s.entry.Version == e.Version:
	case s.token == token && token != 0 && e.Version >= s.floor && c.listening.Load():
		c.set(sh, s, e)
	default:
		c.demote(sh, s, e.Version)
	}
}

// forget drops the cart's slot: after a write whose result is not known exactly (a merged guest
// cart, an error after a write may have committed). Every fill begun before is void.
func (c *Cache) forget(id string) {
	if c == nil {
		return
	}
	sh := c.shard(id)
	sh.mu.Lock()
	if s := sh.slots[id]; s != nil {
		c.drop(sh, id, s)
	}
	sh.mu.Unlock()
}

// announced applies a notification: version < 0 means the cart was deleted (or changed without a
// new version), so whatever is held goes; otherwise what is older than version goes, and nothing
// older may fill the slot from now on.
func (c *Cache) announced(id string, version int64) {
	c.notifications.Add(1)
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.slots[id]
	switch {
	case s == nil:
	case version < 0:
		if s.has {
			c.evicted.Add(1)
		}
		c.drop(sh, id, s)
	case s.has && s.entry.Version >= version:
	default:
		if s.has {
			c.evicted.Add(1)
		}
		c.demote(sh, s, version)
	}
}

// clear drops everything; fills begun before are void (their slots are gone).
func (c *Cache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.slots = map[string]*slot{}
		sh.bytes = 0
		sh.mu.Unlock()
	}
	c.resets.Add(1)
}

// fresh: the slot's entry was stored less than MaxAge ago.
func (c *Cache) fresh(s *slot) bool { return time.Now().UnixNano()-s.at < int64(c.opts.MaxAge) }

func (c *Cache) set(sh *cacheShard, s *slot, e Entry) {
	sh.bytes -= s.size
	s.has, s.entry, s.size, s.at = true, e, entrySize(e), time.Now().UnixNano()
	sh.bytes += s.size
	c.bound(sh, s)
}

func (c *Cache) demote(sh *cacheShard, s *slot, floor int64) {
	sh.bytes -= s.size
	s.has, s.entry, s.size = false, Entry{}, 0
	s.floor = max(s.floor, floor)
}

func (c *Cache) drop(sh *cacheShard, id string, s *slot) {
	sh.bytes -= s.size
	delete(sh.slots, id)
}

// bound drops random slots other than keep until the shard is within its bounds.
func (c *Cache) bound(sh *cacheShard, keep *slot) {
	for len(sh.slots) > c.shardEntries || sh.bytes > c.shardBytes {
		dropped := false
		for id, s := range sh.slots { // map order is random enough for random eviction
			if s != keep {
				c.drop(sh, id, s)
				c.capacity.Add(1)
				dropped = true
				break
			}
		}
		if !dropped {
			return
		}
	}
}

// entrySize estimates the memory an entry holds: the map entry and slot, the id, and each line.
func entrySize(e Entry) int64 {
	n := int64(160 + 2*len(e.ID))
	for _, it := range e.Doc.Items {
		n += 72 + int64(len(it.PriceAtAdd))
	}
	return n
}

// CacheStats are a cache's counters and state.
type CacheStats struct {
	Hits, Misses  uint64
	Notifications uint64 // notices applied
	Evicted       uint64 // entries dropped because their cart changed elsewhere
	Capacity      uint64 // entries dropped to stay within the bounds
	Resets        uint64 // whole-cache clears: the subscription lost
	Reconnects    uint64 // subscriptions made after the first
	Heartbeats    uint64 // round trips that proved the subscription alive
	Entries       int
	Bytes         int64
	Listening     bool
}

// Stats reads the counters and sizes.
func (c *Cache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	st := CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Notifications: c.notifications.Load(),
		Evicted: c.evicted.Load(), Capacity: c.capacity.Load(), Resets: c.resets.Load(),
		Reconnects: c.reconnects.Load(), Heartbeats: c.heartbeats.Load(), Listening: c.Listening()}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		for _, s := range sh.slots {
			if s.has {
				st.Entries++
			}
		}
		st.Bytes += sh.bytes
		sh.mu.RUnlock()
	}
	return st
}
