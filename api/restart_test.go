package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/dev/pgserver"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/migrations"
)

// TestDatabaseRestartedImmediately_503WithRetryAfterNeverA500: PostgreSQL restarted in immediate
// mode under the pool's open connections (each backend ends with a warning and a closed socket,
// no error the driver can name) answers every request that meets it 503 UNAVAILABLE with
// Retry-After, never a 500, and the same requests succeed once it is back.
func TestDatabaseRestartedImmediately_503WithRetryAfterNeverA500(t *testing.T) {
	t.Parallel()
	testenv.SkipIfShort(t, "a PostgreSQL server of its own, which it restarts")
	ctx := context.Background()
	opts := pgserver.Options{Dir: filepath.Join(t.TempDir(), "pg"), Database: "checkout", Fast: true}
	pg, err := pgserver.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { pg.Stop() })
	opts.Port = pg.Port
	_, err = migrations.Up(ctx, pg.URL("checkout"))
	require.NoError(t, err)
	pool, err := db.Connect(ctx, pg.URL("checkout"), 8)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	e, cfg := bareAPI(t, pool)
	var users atomic.Int64
	type answer struct {
		status     int
		body       string
		retryAfter string
	}
	// Each request a shopper of its own, within every rate limit.
	call := func(method, path, body string) answer {
		tok, err := auth.Mint([]byte(cfg.JWTSecret), auth.Principal{UserID: 1000 + users.Add(1), Role: auth.RoleShopper}, time.Hour)
		require.NoError(t, err)
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return answer{rec.Code, rec.Body.String(), rec.Header().Get("Retry-After")}
	}
	// Every connection of the pool busy at once, so that each is open and recently used when the
	// server goes.
	burst := func() []answer {
		var mu sync.Mutex
		var out []answer
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				a := call(http.MethodPost, "/api/v1/addresses",
					fmt.Sprintf(`{"city":"Istanbul","line1":"Restart street %d","lat":41.0,"lon":29.0}`, i))
				o := call(http.MethodGet, "/api/v1/orders", "")
				mu.Lock()
				out = append(out, a, o)
				mu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	for _, a := range burst() {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, a.status, a.body)
	}

	require.NoError(t, pgserver.StopImmediate(ctx, opts.Dir))
	for _, a := range burst() {
		assert.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
		assert.Contains(t, a.body, `"code":"UNAVAILABLE"`)
		assert.NotEmpty(t, a.retryAfter, "a 503 says when to come back")
	}

	pg, err = pgserver.Start(ctx, opts)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, a := range burst() {
			assert.Contains(c, []int{http.StatusCreated, http.StatusOK}, a.status, a.body)
		}
	}, 30*time.Second, 200*time.Millisecond, "served again once PostgreSQL is back")
}
