package staff

import (
	"context"
	"time"

	"github.com/marketplace/checkout/db"
	"github.com/marketplace/checkout/internal/staff/internal/sessionstore"
)

// Session is a staff member's signed-in session for decoding in the Temporal UI, kept in
// PostgreSQL (codec_sessions) so that every replica of the API knows it. It counts until
// ExpiresAt, its token's expiry. A session is found by the hash of its id, never by the id.
type Session struct {
	UserID    int64
	Role      string
	Name      string
	ExpiresAt time.Time
}

// OpenSession keeps the session s under idHash.
func OpenSession(ctx context.Context, conn db.DBTX, idHash []byte, s Session) error {
	return sessionstore.New(conn).CreateCodecSession(ctx, sessionstore.CreateCodecSessionParams{IDHash: idHash,
		UserID: s.UserID, Role: s.Role, Name: s.Name, ExpiresAt: s.ExpiresAt})
}

// SessionOf is the session kept under idHash while it counts; none is an error db.NotFound
// recognises.
func SessionOf(ctx context.Context, conn db.DBTX, idHash []byte) (Session, error) {
	r, err := sessionstore.New(conn).CodecSession(ctx, idHash)
	return Session(r), err
}

// CloseSession forgets the session kept under idHash (signing out).
func CloseSession(ctx context.Context, conn db.DBTX, idHash []byte) error {
	return sessionstore.New(conn).DeleteCodecSession(ctx, idHash)
}

// ForgetEndedSessions forgets a few sessions that ended, as new ones begin.
func ForgetEndedSessions(ctx context.Context, conn db.DBTX) error {
	return sessionstore.New(conn).DeleteExpiredCodecSessions(ctx)
}
