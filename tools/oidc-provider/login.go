package main

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// loginPath is the provider's sign-in page: the client's LoginURL sends the browser here with the
// sign-in's id; a right name and password complete it and send the browser back to the provider's
// callback, which redirects to the client with the code.
const loginPath = "/login"

type login struct {
	storage  *storage
	callback func(context.Context, string) string
	origin   string // the issuer's scheme://host: the only page that may post the form
	// clients are the origins of the client's redirect URIs: a browser applies the page's
	// form-action to every redirect that follows the post, the last of which goes to the client.
	clients []string
	log     *slog.Logger
}

func (l *login) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action "+
		strings.Join(append([]string{"'self'"}, l.clients...), " ")+"; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	switch r.Method {
	case http.MethodGet:
		id := r.URL.Query().Get("authRequestID")
		if _, err := l.storage.AuthRequestByID(r.Context(), id); err != nil {
			l.page(w, http.StatusBadRequest, loginPage{Error: "This sign-in has expired: start again from the application."})
			return
		}
		l.page(w, http.StatusOK, loginPage{ID: id})
	case http.MethodPost:
		l.post(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (l *login) post(w http.ResponseWriter, r *http.Request) {
	// A form posted from another site's page would sign the browser in as someone else.
	if o := r.Header.Get("Origin"); o != "" && o != l.origin {
		l.log.Warn("sign-in refused: foreign origin", "origin", o)
		l.page(w, http.StatusForbidden, loginPage{Error: "Sign in from this page only."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		l.page(w, http.StatusBadRequest, loginPage{Error: "Bad form."})
		return
	}
	id, name := r.PostForm.Get("authRequestID"), r.PostForm.Get("username")
	if _, err := l.storage.AuthRequestByID(r.Context(), id); err != nil {
		l.page(w, http.StatusBadRequest, loginPage{Error: "This sign-in has expired: start again from the application."})
		return
	}
	u, ok, err := checkPassword(l.storage.dir, name, r.PostForm.Get("password"))
	if err != nil {
		l.log.Error("sign-in: reading the people", "err", err)
		l.page(w, http.StatusInternalServerError, loginPage{ID: id, Error: "Sign-in is unavailable."})
		return
	}
	if !ok {
		l.log.Warn("sign-in refused: wrong name or password", "username", name)
		time.Sleep(500 * time.Millisecond) // slows guessing down
		l.page(w, http.StatusUnauthorized, loginPage{ID: id, Name: name, Error: "Wrong name or password."})
		return
	}
	if err := l.storage.completeLogin(id, u.Subject); err != nil {
		l.page(w, http.StatusBadRequest, loginPage{Error: "This sign-in has expired: start again from the application."})
		return
	}
	l.log.Info("signed in", "username", u.Name, "sub", u.Subject, "role", u.Role)
	http.Redirect(w, r, l.callback(r.Context(), id), http.StatusFound)
}

type loginPage struct {
	ID, Name, Error string
}

func (l *login) page(w http.ResponseWriter, status int, d loginPage) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = loginTemplate.Execute(w, d)
}

// originOf is scheme://host of a URL ("" for one without both).
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in: checkout staff</title>
<style>body{font-family:system-ui,sans-serif;max-width:26rem;margin:4rem auto;padding:0 1rem;line-height:1.5}
label{display:block;margin-top:.75rem}input{width:100%;padding:.5rem;box-sizing:border-box}
button{margin-top:1rem;padding:.5rem 1.25rem}.err{background:#fce8e6;padding:.75rem 1rem}</style>
</head><body>
<h1>Checkout staff sign-in</h1>
{{if .Error}}<p class="err" id="error">{{.Error}}</p>{{end}}
{{if .ID}}<form method="post" action="/login">
<input type="hidden" name="authRequestID" value="{{.ID}}">
<label for="username">Name</label>
<input id="username" name="username" autocomplete="username" value="{{.Name}}" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit" id="submit">Sign in</button>
</form>{{end}}
</body></html>
`))
