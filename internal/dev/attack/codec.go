package attack

import (
	"context"
	"net/http"
	"strings"
)

// foreignOrigin is a page of another site.
const foreignOrigin = "https://attacker.example"

// payloads is a codec request body: one payload the codec cannot have made.
const payloads = `{"payloads":[{"metadata":{"encoding":"YmluYXJ5L2VuY3J5cHRlZA=="},"data":"AAAA"}]}`

var codecAttacks = []Attack{
	{Name: "codec-no-credentials", Kind: KindCodec, What: "decoding without a token or session is 401",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/codec/decode", "", payloads)
			return refused(a, err, http.StatusUnauthorized, "UNAUTHORIZED")
		}},
	{Name: "codec-decode-as-shopper", Kind: KindCodec, What: "a shopper's token decoding orders' payloads is 403",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/codec/decode", r.shopper(400), payloads)
			return refused(a, err, http.StatusForbidden, "FORBIDDEN")
		}},
	{Name: "codec-session-as-shopper", Kind: KindCodec, What: "a shopper signing in for decoding is 403 and gets no session cookie",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/codec/session", r.shopper(400), nil)
			if out := refused(a, err, http.StatusForbidden, "FORBIDDEN"); out.Verdict != Pass {
				return out
			}
			if c := a.header.Get("Set-Cookie"); c != "" {
				return fail("a cookie was set: %s", short(c, 60))
			}
			return pass("403 FORBIDDEN, no cookie")
		}},
	{Name: "codec-session-foreign-origin", Kind: KindCodec, What: "support signing in for decoding from another site's page is 403",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/codec/session", r.support(), nil, "Origin", foreignOrigin)
			if out := refused(a, err, http.StatusForbidden, "FORBIDDEN"); out.Verdict != Pass {
				return out
			}
			if c := a.header.Get("Set-Cookie"); c != "" {
				return fail("a cookie was set: %s", short(c, 60))
			}
			return pass("403 FORBIDDEN, no cookie")
		}},
	{Name: "codec-cors-foreign-origin", Kind: KindCodec, What: "another site's page may not call the codec endpoint: no CORS grant to its origin",
		Run: func(ctx context.Context, r *Run) Outcome {
			pre, err := r.call(ctx, http.MethodOptions, "/codec/decode", "", nil, "Origin", foreignOrigin,
				"Access-Control-Request-Method", http.MethodPost, "Access-Control-Request-Headers", "content-type,x-namespace")
			if err != nil {
				return failed("preflight", err)
			}
			if got := pre.header.Get("Access-Control-Allow-Origin"); got == foreignOrigin || got == "*" {
				return fail("the preflight grants %q", got)
			}
			a, err := r.call(ctx, http.MethodPost, "/codec/decode", r.support(), payloads, "Origin", foreignOrigin)
			if err != nil {
				return failed("request", err)
			}
			if got := a.header.Get("Access-Control-Allow-Origin"); got == foreignOrigin || got == "*" {
				return fail("the answer grants %q", got)
			}
			return pass("no grant (preflight %d)", pre.status)
		}},
	{Name: "codec-cookie-foreign-origin", Kind: KindCodec, What: "support's session cookie sent from another site's page is 403",
		Run: func(ctx context.Context, r *Run) Outcome {
			a, err := r.call(ctx, http.MethodPost, "/codec/session", r.support(), nil)
			if err != nil {
				return failed("sign-in", err)
			}
			var cookie string
			for _, c := range a.header.Values("Set-Cookie") {
				if name, _, ok := strings.Cut(c, "="); ok && strings.HasPrefix(name, "checkout_codec") {
					cookie, _, _ = strings.Cut(c, ";")
				}
			}
			if a.status != http.StatusOK || cookie == "" {
				return skip("%s gives no codec session for a support bearer token (%d): staff sign in otherwise", r.T.Name, a.status)
			}
			a, err = r.call(ctx, http.MethodPost, "/codec/decode", "", payloads, "Cookie", cookie, "Origin", foreignOrigin)
			return refused(a, err, http.StatusForbidden, "FORBIDDEN")
		}},
}
