package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/internal/staff"
)

// The codec endpoint: the Temporal UI (and `temporal --codec-endpoint`) sends it the encrypted
// payloads of a workflow and shows what it answers. Only support and ops may decode. A UI behind
// the staff's sign-in passes the person's token (the identity provider's) as a bearer token. A UI
// without sign-in (`make run`'s dev server) cannot, so a browser signs in once on /codec/session:
// the API checks the token and opens a session in PostgreSQL (codec_sessions, which every replica
// reads), whose random id is an HttpOnly cookie scoped to /codec, which the UI sends along (its
// codec setting "include cross-origin credentials") from the origins TEMPORAL_UI_ORIGIN names.
const (
	codecPath = "/codec"
	// CodecSessionCookie holds a support or ops session's id for the codec endpoint, and only
	// for it; never the token.
	CodecSessionCookie = "checkout_codec_session"
)

// codecRoles may read orders' payloads.
var codecRoles = []string{auth.RoleSupport, auth.RoleOps}

func (s *Server) codecRoutes(e *echo.Echo) {
	e.Use(s.codecCORS())
	guard := []echo.MiddlewareFunc{s.authenticateCodec, requireRole(codecRoles...)}
	e.POST(codecPath+"/decode", s.codecDecode, guard...)
	e.POST(codecPath+"/encode", s.codecEncode, guard...)
	e.GET(codecPath+"/session", s.codecSessionPage)
	e.POST(codecPath+"/session", s.codecSignIn)
	e.DELETE(codecPath+"/session", s.codecSignOut)
}

// codecCORS lets the Temporal UI's origins call decode and encode with credentials: the exact
// origins, never a wildcard. Preflights are answered here, before authentication (a browser sends
// them without cookies).
func (s *Server) codecCORS() echo.MiddlewareFunc {
	origins := s.Options.TemporalUIOrigins
	return middleware.CORSWithConfig(middleware.CORSConfig{
		Skipper: func(c echo.Context) bool {
			p := c.Request().URL.Path
			return len(origins) == 0 || (p != codecPath+"/decode" && p != codecPath+"/encode")
		},
		AllowOriginFunc: func(origin string) (bool, error) { return slices.Contains(origins, origin), nil },
		AllowMethods:    []string{http.MethodPost},
		// What the UI sends: X-Namespace always, Authorization (and its extras) when it passes its
		// own access token.
		AllowHeaders:     []string{echo.HeaderContentType, "X-Namespace", echo.HeaderAuthorization, "Authorization-Extras"},
		AllowCredentials: true,
		MaxAge:           600,
	})
}

// authenticateCodec accepts a bearer token, else the session cookie. A cookie counts only from a
// page of the API itself or of the Temporal UI: a cookie sent by any other page's request is
// refused.
func (s *Server) authenticateCodec(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, present, err := s.bearer(c)
		if present && err == nil {
			c.Set(principalKey, p)
			return next(c)
		}
		cookie, cerr := c.Cookie(CodecSessionCookie)
		if cerr != nil || cookie.Value == "" {
			if present {
				return unauthorized("invalid or expired token")
			}
			return unauthorized("missing bearer token: send one, or sign in at " + s.codecSessionURL())
		}
		if !s.codecOriginAllowed(c.Request().Header.Get(echo.HeaderOrigin)) {
			return forbidden("the support session is for the Temporal UI (TEMPORAL_UI_ORIGIN) and this API only")
		}
		row, err := staff.SessionOf(c.Request().Context(), s.Pool, sessionHash(cookie.Value))
		if errors.Is(err, pgx.ErrNoRows) {
			return unauthorized("the support session has expired: sign in again at " + s.codecSessionURL())
		}
		if err != nil {
			return err
		}
		c.Set(principalKey, auth.Principal{UserID: row.UserID, Role: row.Role, Name: row.Name})
		return next(c)
	}
}

// codecOriginAllowed: no Origin (not a cross-origin browser request), the API's own, or the UI's.
func (s *Server) codecOriginAllowed(origin string) bool {
	if origin == "" || slices.Contains(s.Options.TemporalUIOrigins, origin) {
		return true
	}
	u, err := url.Parse(s.Options.PublicBaseURL)
	return err == nil && origin == u.Scheme+"://"+u.Host
}

func (s *Server) codecSessionURL() string {
	return strings.TrimRight(s.Options.PublicBaseURL, "/") + codecPath + "/session"
}

// codecDecode shows payloads as they are, those in clear too (the process's codec may refuse them
// for the saga; support must still see what was sent).
func (s *Server) codecDecode(c echo.Context) error {
	decode := s.Codec.Decode
	if l, ok := s.Codec.(interface{ Lenient() *codec.Codec }); ok {
		decode = l.Lenient().Decode
	}
	return s.runCodec(c, decode)
}

// codecEncode encrypts what the UI (or the CLI) sends: support actions, line cancellations. Every
// JSON object among them gets the caller's verified identity as its "actor", written over any the
// caller typed, so the saga records the person who signed in, never a name from the input.
func (s *Server) codecEncode(c echo.Context) error {
	actor, err := json.Marshal(staff.FromPrincipal(mustPrincipal(c), staffName(mustPrincipal(c)), staff.ViaTemporalUI, c.RealIP()))
	if err != nil {
		return err
	}
	return s.runCodec(c, func(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
		return s.Codec.Encode(stampActor(ps, actor))
	})
}

// staffName is the person's name from the identity provider, else their user id.
func staffName(p auth.Principal) string {
	if p.Name != "" {
		return p.Name
	}
	return "user " + strconv.FormatInt(p.UserID, 10)
}

// stampActor sets "actor" in every payload that is a JSON object in clear (json/plain); the others
// (encrypted already, other encodings, JSON that is not an object) are left as they are.
func stampActor(ps []*commonpb.Payload, actor json.RawMessage) []*commonpb.Payload {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		out[i] = p
		if p == nil || string(p.GetMetadata()[converter.MetadataEncoding]) != converter.MetadataEncodingJSON {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(p.GetData(), &obj); err != nil || obj == nil {
			continue
		}
		obj["actor"] = actor
		data, err := json.Marshal(obj)
		if err != nil {
			continue
		}
		stamped := proto.Clone(p).(*commonpb.Payload)
		stamped.Data = data
		out[i] = stamped
	}
	return out
}

// runCodec answers {"payloads": [...]} with the payloads run through the codec, in the same order,
// as the Temporal codec server protocol has it.
func (s *Server) runCodec(c echo.Context, run func([]*commonpb.Payload) ([]*commonpb.Payload, error)) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var in commonpb.Payloads
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &in); err != nil {
		return problem.New(problem.InvalidJSON, `want {"payloads": [{"metadata": {...}, "data": "..."}]}`)
	}
	out, err := run(in.GetPayloads())
	if err != nil {
		return problem.New(problem.PayloadNotDecodable, err.Error())
	}
	raw, err := protojson.Marshal(&commonpb.Payloads{Payloads: out})
	if err != nil {
		return err
	}
	if c.Request().URL.Path == codecPath+"/decode" {
		s.Log.InfoContext(c.Request().Context(), "payloads decoded for support", "user_id", mustPrincipal(c).UserID, "payloads", len(out),
			"namespace", c.Request().Header.Get("X-Namespace"), "request_id", requestID(c))
	}
	return c.JSONBlob(http.StatusOK, raw)
}

// sessionHash is what codec_sessions keeps of a session id: the cookie alone opens a session.
func sessionHash(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}

// codecSignIn checks a support or ops token (Authorization: Bearer, or the form's token field)
// and opens a session until the token expires: its id in the cookie, the person in PostgreSQL. A
// browser's sign-in comes from the API's own page or the UI's (Origin): a page of another site
// could otherwise sign a browser in as someone else.
func (s *Server) codecSignIn(c echo.Context) error {
	form := strings.HasPrefix(c.Request().Header.Get(echo.HeaderContentType), echo.MIMEApplicationForm)
	origin := c.Request().Header.Get(echo.HeaderOrigin)
	if (form && origin == "") || !s.codecOriginAllowed(origin) {
		s.Log.WarnContext(c.Request().Context(), "codec sign-in refused: foreign origin", "origin", origin, "request_id", requestID(c))
		return s.codecSessionAnswer(c, form, forbidden("sign in from this API's page or the Temporal UI's only"), time.Time{})
	}
	token := ""
	if form {
		token = strings.TrimSpace(c.FormValue("token"))
	} else if h := c.Request().Header.Get(echo.HeaderAuthorization); h != "" {
		scheme, t, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return errBadScheme
		}
		token = strings.TrimSpace(t)
	}
	if token == "" {
		return s.codecSessionAnswer(c, form, unauthorized("missing token"), time.Time{})
	}
	p, exp, err := s.tokens.VerifyUntil(token)
	if err != nil {
		return s.codecSessionAnswer(c, form, unauthorized("invalid or expired token"), time.Time{})
	}
	if !slices.Contains(codecRoles, p.Role) {
		return s.codecSessionAnswer(c, form, forbidden("decoding is for the support and ops roles"), time.Time{})
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	ctx := c.Request().Context()
	if err := staff.OpenSession(ctx, s.Pool, sessionHash(id), staff.Session{UserID: p.UserID,
		Role: p.Role, Name: p.Name, ExpiresAt: exp}); err != nil {
		return err
	}
	if err := staff.ForgetEndedSessions(ctx, s.Pool); err != nil {
		s.Log.Warn("forgetting ended codec sessions", "err", err)
	}
	c.SetCookie(s.codecCookie(c.Request(), id, exp))
	s.Log.InfoContext(c.Request().Context(), "support session for decoding", "user_id", p.UserID, "until", exp, "request_id", requestID(c))
	return s.codecSessionAnswer(c, form, nil, exp)
}

// codecSignOut ends this browser's session, for every replica.
func (s *Server) codecSignOut(c echo.Context) error {
	if !s.codecOriginAllowed(c.Request().Header.Get(echo.HeaderOrigin)) {
		return forbidden("sign out from this API's page or the Temporal UI's only")
	}
	if cookie, err := c.Cookie(CodecSessionCookie); err == nil && cookie.Value != "" {
		if err := staff.CloseSession(c.Request().Context(), s.Pool, sessionHash(cookie.Value)); err != nil {
			return err
		}
	}
	c.SetCookie(s.codecCookie(c.Request(), "", time.Unix(0, 0)))
	return c.NoContent(http.StatusNoContent)
}

// codecCookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it),
// scoped to /codec (no other endpoint sees it) and Secure when the API is served over https, or r
// came over https (the cluster's codec endpoint, HAProxy's TLS frontend, beside a plain one).
func (s *Server) codecCookie(r *http.Request, id string, exp time.Time) *http.Cookie {
	ck := &http.Cookie{Name: CodecSessionCookie, Value: id, Path: codecPath, Expires: exp, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: strings.HasPrefix(s.Options.PublicBaseURL, "https://") || s.overHTTPS(r)}
	if id == "" {
		ck.MaxAge = -1
	}
	return ck
}

type codecPageData struct {
	Error     string
	Until     string
	Endpoint  string
	UIOrigins []string
}

// codecSessionAnswer answers a sign-in: the page for a browser's form, the error model or
// {"expiresAt"} for a program.
func (s *Server) codecSessionAnswer(c echo.Context, form bool, refusal *problem.Error, exp time.Time) error {
	if !form {
		if refusal != nil {
			return refusal
		}
		return c.JSON(http.StatusOK, map[string]any{"expiresAt": exp.UTC()})
	}
	d := s.codecPage()
	status := http.StatusOK
	if refusal != nil {
		d.Error, status = refusal.Message, StatusOf(refusal.Code)
	} else {
		d.Until = exp.UTC().Format("2006-01-02 15:04 MST")
	}
	return s.renderCodecPage(c, status, d)
}

func (s *Server) codecSessionPage(c echo.Context) error {
	return s.renderCodecPage(c, http.StatusOK, s.codecPage())
}

func (s *Server) codecPage() codecPageData {
	return codecPageData{Endpoint: strings.TrimRight(s.Options.PublicBaseURL, "/") + codecPath,
		UIOrigins: s.Options.TemporalUIOrigins}
}

func (s *Server) renderCodecPage(c echo.Context, status int, d codecPageData) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-store")
	c.Response().WriteHeader(status)
	return codecPageTemplate.Execute(c.Response(), d)
}

var codecPageTemplate = template.Must(template.New("codec").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Decoding orders in the Temporal UI</title>
<style>body{font-family:system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem;line-height:1.5}
input{width:100%;padding:.5rem;font-family:monospace}button{margin-top:.75rem;padding:.5rem 1rem}
.ok{background:#e6f4ea;padding:.75rem 1rem}.err{background:#fce8e6;padding:.75rem 1rem}code{background:#f1f3f4;padding:0 .25rem}</style>
</head><body>
<h1>Decoding orders in the Temporal UI</h1>
{{if .Until}}<p class="ok" id="session-on">Decoding is on in this browser until {{.Until}}.</p>
{{else}}{{if .Error}}<p class="err" id="session-error">{{.Error}}</p>{{end}}
<p>What the checkout writes to Temporal is encrypted. Support and ops staff see it decoded in the
Temporal UI once this browser holds their session: paste your support or ops token. (Staff who
signed in to a Temporal UI behind the staff's sign-in need no session: the UI passes their token.)</p>
<form method="post" action="/codec/session">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="off" required>
<button type="submit">Turn decoding on</button>
</form>{{end}}
<h2>In the Temporal UI</h2>
<p>Once per browser: open the Codec Server settings (the icon at the top right, beside the time
zone), choose <em>Use my browser setting and ignore Cluster-level setting</em>, enter
<code>{{.Endpoint}}</code> as the browser endpoint, switch on
<em>Include cross-origin credentials</em> and Apply. (A UI whose own settings include credentials needs none of this.){{if .UIOrigins}} The UI must be opened at
{{range $i, $o := .UIOrigins}}{{if $i}} or {{end}}<a href="{{$o}}">{{$o}}</a>{{end}}.{{end}}</p>
<p>The session ends when your token expires.</p>
</body></html>
`))

// overHTTPS: r reached the API over TLS, its own or a trusted proxy's, which says so in
// X-Forwarded-Proto (the header is believed from the proxies of TRUSTED_PROXIES only).
func (s *Server) overHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if r.Header.Get("X-Forwarded-Proto") != "https" {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		return false
	}
	for _, n := range s.Options.TrustedProxies {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}
