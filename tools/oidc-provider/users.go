package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/crypto/bcrypt"
)

// usersFile holds the people who may sign in (<dir>/users.json): a name, the password's bcrypt
// hash, the subject the tokens carry (the checkout's user id, a decimal number) and the role the
// checkout knows them by. It is read again at every sign-in, so a person added or removed by
// `oidc-provider user` counts at once.
const usersFile = "users.json"

type user struct {
	Name         string `json:"name"`
	Subject      string `json:"sub"`
	Role         string `json:"role"`
	DisplayName  string `json:"displayName"`
	PasswordHash string `json:"passwordHash"`
}

// roles a person may have: the checkout's. Only support and ops reach Temporal and the codec; a
// shopper signs in and gets nothing of the control plane.
var roles = []string{"support", "ops", "shopper", "seller"}

func readUsers(dir string) ([]user, error) {
	raw, err := os.ReadFile(filepath.Join(dir, usersFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var us []user
	if err := json.Unmarshal(raw, &us); err != nil {
		return nil, fmt.Errorf("%s: %w", usersFile, err)
	}
	return us, nil
}

func findUser(dir, name string) (user, bool, error) {
	us, err := readUsers(dir)
	if err != nil {
		return user{}, false, err
	}
	for _, u := range us {
		if u.Name == name {
			return u, true, nil
		}
	}
	return user{}, false, nil
}

func userBySubject(dir, sub string) (user, bool, error) {
	us, err := readUsers(dir)
	if err != nil {
		return user{}, false, err
	}
	for _, u := range us {
		if u.Subject == sub {
			return u, true, nil
		}
	}
	return user{}, false, nil
}

// putUser adds u, or replaces the person of that name; the file is replaced whole (owner-only).
func putUser(dir string, u user, password string) error {
	switch {
	case u.Name == "":
		return errors.New("a name is required")
	case !slices.Contains(roles, u.Role):
		return fmt.Errorf("role %q: one of %v", u.Role, roles)
	case len(password) < 12:
		return errors.New("a password of at least 12 characters is required")
	}
	if id, err := strconv.ParseInt(u.Subject, 10, 64); err != nil || id <= 0 {
		return fmt.Errorf("sub %q: the checkout's user id, a positive decimal number", u.Subject)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	u.PasswordHash = string(hash)
	us, err := readUsers(dir)
	if err != nil {
		return err
	}
	us = slices.DeleteFunc(us, func(o user) bool { return o.Name == u.Name })
	for _, o := range us {
		if o.Subject == u.Subject {
			return fmt.Errorf("sub %s is %s's already", u.Subject, o.Name)
		}
	}
	us = append(us, u)
	raw, err := json.MarshalIndent(us, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, usersFile, raw)
}

// writeFileAtomic replaces dir/name whole with raw (owner-only), so a reader never sees half of it.
func writeFileAtomic(dir, name string, raw []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(raw)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// checkPassword answers the person of name when password is theirs. An unknown name costs a hash
// comparison too, so that timing does not tell names apart.
func checkPassword(dir, name, password string) (user, bool, error) {
	u, ok, err := findUser(dir, name)
	if err != nil {
		return user{}, false, err
	}
	hash := []byte(u.PasswordHash)
	if !ok {
		hash = dummyHash
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || !ok {
		return user{}, false, nil
	}
	return u, true, nil
}

var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("no such person, no such password"), bcrypt.DefaultCost)
