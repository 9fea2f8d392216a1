// Package staff names the person behind a staff action (a support action on an order, a line
// cancellation): the Actor that the action's payload carries and the order's timeline and the
// staff_actions table record. An Actor is only ever filled in from a verified identity — by the
// API's codec endpoint for a signed-in staff member of the Temporal UI, by the API's ops routes
// from the verified bearer token — never from what someone typed into the input; the workflows
// refuse an action that names nobody. The package also keeps the staff's signed-in sessions for
// decoding in the Temporal UI (Session), in a store of its own.
package staff

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/marketplace/checkout/internal/auth"
)

// Actor is the verified person who sent a staff action, and through what and from where. Its JSON
// is the contract between the API (which fills it) and the workflows (which record it):
// {"sub": "...", "role": "support"|"ops", "name": "...", "via": "temporal-ui"|"ops-api", "ip": "..."}.
type Actor struct {
	// Sub is the identity provider's subject of the person (a token's sub).
	Sub string `json:"sub"`
	// Role is the person's staff role: auth.RoleSupport or auth.RoleOps.
	Role string `json:"role"`
	// Name is how the identity provider names the person (may be empty).
	Name string `json:"name"`
	// Via is what the action came through (ViaTemporalUI, ViaOpsAPI).
	Via string `json:"via"`
	// IP is the address the action came from, as the API saw it (may be empty).
	IP string `json:"ip"`
}

// What a staff action came through.
const (
	// ViaTemporalUI: the Temporal UI (or CLI), its payload encoded by the API's codec endpoint for
	// a signed-in staff member.
	ViaTemporalUI = "temporal-ui"
	// ViaOpsAPI: one of the API's ops routes, the person from the verified bearer token.
	ViaOpsAPI = "ops-api"
)

// Bounds of an actor's fields, as the staff_actions table checks them.
const (
	maxSub  = 200
	maxName = 200
	maxVia  = 50
	maxIP   = 100
)

// ErrNoActor: the action names nobody.
var ErrNoActor = errors.New("no actor: a staff action names the verified person who sent it (the API's codec " +
	"endpoint fills it in for a signed-in staff member, the ops API from the bearer token)")

// Check says why a (possibly nil) actor does not name a staff member, or nil when it does.
func (a *Actor) Check() error {
	if a == nil {
		return ErrNoActor
	}
	var problems []string
	if a.Sub == "" || len(a.Sub) > maxSub {
		problems = append(problems, fmt.Sprintf("sub must be 1 to %d characters", maxSub))
	}
	if a.Role != auth.RoleSupport && a.Role != auth.RoleOps {
		problems = append(problems, fmt.Sprintf("role must be %q or %q", auth.RoleSupport, auth.RoleOps))
	}
	if a.Via == "" || len(a.Via) > maxVia {
		problems = append(problems, fmt.Sprintf("via must be 1 to %d characters", maxVia))
	}
	if len(a.Name) > maxName || len(a.IP) > maxIP {
		problems = append(problems, fmt.Sprintf("name and ip are at most %d and %d characters", maxName, maxIP))
	}
	if len(problems) > 0 {
		return errors.New("actor: " + strings.Join(problems, "; "))
	}
	return nil
}

// String names the actor for people: its name (or role and subject), its role and subject, and
// through what and from where it acted.
func (a Actor) String() string {
	who := a.Role + " " + a.Sub
	if a.Name != "" {
		who = a.Name + " (" + who + ")"
	}
	where := a.Via
	if a.IP != "" {
		where += " from " + a.IP
	}
	return who + ", " + where
}

// FromPrincipal is the actor of a verified principal: the API's ops routes name the caller this
// way (name is what the identity provider calls the person, if it says).
func FromPrincipal(p auth.Principal, name, via, ip string) Actor {
	return Actor{Sub: strconv.FormatInt(p.UserID, 10), Role: p.Role, Name: name, Via: via, IP: ip}
}
