package attack

import "slices"

// Suite is every attack, in the order they run: the ones that use up a limit of the client's
// address (bad webhook signatures) after those that must not meet it.
var Suite = slices.Concat(tokenAttacks, accessAttacks, codecAttacks, inputAttacks, webhookAttacks, abuseAttacks,
	controlPlaneAttacks)
