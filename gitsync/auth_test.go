package gitsync_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

const password = "pa55-w0rd/with:odd@chars"

// noSecret fails the test when s contains the password in any common form.
func noSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, form := range []string{password, "pa55-w0rd", "pa55-w0rd%2Fwith"} {
		if strings.Contains(s, form) {
			t.Errorf("%s leaks the secret: %q", what, s)
		}
	}
}

func TestBasicAuthNeverLeaksThePassword(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{Username: "bot", Password: password})
	url, err := srv.CreateRepo("app", map[string]string{"a.txt": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	good, err := gitsync.CredentialsFromSecret(map[string][]byte{"username": []byte("bot"), "password": []byte(password)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{good.String(), fmt.Sprintf("%v %+v %#v %s", good, good, good, good)} {
		noSecret(t, "Credentials formatting", s)
	}

	// Plain http is refused unless allowed.
	if _, err := gitsync.Open(gitsync.Options{URL: url, Credentials: good}); !errors.Is(err, gitsync.ErrInvalidCredentials) {
		t.Fatalf("credentials over http without InsecureHTTP: err = %v", err)
	}

	repo := openRepo(t, gitsync.Options{URL: url, Credentials: good, InsecureHTTP: true})
	// A commit message mentioning the password is redacted.
	_, err = repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Message: "oops " + password, Files: map[string][]byte{"b.txt": []byte("b\n")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", srv.Root+"/app.git", "log", "--format=%B", "main").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "commit messages", string(out))

	wrongPassword := password + "-wrong"
	bad, err := gitsync.CredentialsFromSecret(map[string][]byte{"username": []byte("bot"), "password": []byte(wrongPassword)})
	if err != nil {
		t.Fatal(err)
	}
	badRepo := openRepo(t, gitsync.Options{URL: url, Credentials: bad, InsecureHTTP: true})
	var errs []error
	_, err = badRepo.ReadFile(ctx(t), "main", "a.txt")
	errs = append(errs, err)
	_, err = badRepo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Files: map[string][]byte{"c": []byte("c")}}, nil
	})
	errs = append(errs, err, badRepo.DeleteBranches(ctx(t), "main"))
	_, err = badRepo.Branches(ctx(t), "")
	errs = append(errs, err)
	for i, err := range errs {
		if !errors.Is(err, gitsync.ErrAuth) {
			t.Errorf("call %d: err = %v, want ErrAuth", i, err)
		}
		if err != nil {
			noSecret(t, "error", err.Error())
			noSecret(t, "error", fmt.Sprintf("%+v %#v", err, err))
		}
	}

	// A password in the URL is refused, and not echoed.
	withUserinfo := strings.Replace(url, "http://", "http://bot:"+password+"@", 1)
	_, err = gitsync.Open(gitsync.Options{URL: withUserinfo, InsecureHTTP: true})
	if !errors.Is(err, gitsync.ErrInvalidCredentials) {
		t.Fatalf("password in URL: err = %v", err)
	}
	noSecret(t, "error", err.Error())
}

func TestTokenAuth(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{Username: "git", Password: password})
	url, err := srv.CreateRepo("app", map[string]string{"a.txt": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := gitsync.CredentialsFromSecret(map[string][]byte{"token": []byte(password)})
	if err != nil {
		t.Fatal(err)
	}
	repo := openRepo(t, gitsync.Options{URL: url, Credentials: creds, InsecureHTTP: true})
	if got, err := repo.ReadFile(ctx(t), "main", "a.txt"); err != nil || string(got) != "a\n" {
		t.Fatalf("ReadFile with token = %q, %v", got, err)
	}
}

// sshKey returns an OpenSSH private key PEM and its signer.
func sshKey(t *testing.T) ([]byte, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), signer
}

func TestCredentialsFromSecretValidation(t *testing.T) {
	identity, _ := sshKey(t)
	_, hostKey := sshKey(t)
	knownHosts := []byte("github.com " + string(ssh.MarshalAuthorizedKey(hostKey.PublicKey())))
	cases := []struct {
		name string
		data map[string][]byte
		ok   bool
	}{
		{"anonymous", nil, true},
		{"basic", map[string][]byte{"username": []byte("u"), "password": []byte("p")}, true},
		{"token", map[string][]byte{"token": []byte("t")}, true},
		{"bearer", map[string][]byte{"bearerToken": []byte("t")}, true},
		{"ssh", map[string][]byte{"identity": identity, "known_hosts": knownHosts}, true},
		{"password without username", map[string][]byte{"password": []byte(password)}, false},
		{"identity without known_hosts", map[string][]byte{"identity": identity}, false},
		{"known_hosts without identity", map[string][]byte{"known_hosts": knownHosts}, false},
		{"garbage identity", map[string][]byte{"identity": []byte(password), "known_hosts": knownHosts}, false},
		{"garbage known_hosts", map[string][]byte{"identity": identity, "known_hosts": []byte("host " + password)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gitsync.CredentialsFromSecret(tc.data)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, gitsync.ErrInvalidCredentials) {
					t.Errorf("err = %v, want ErrInvalidCredentials", err)
				}
				noSecret(t, "error", err.Error())
			}
		})
	}
	if _, err := gitsync.Open(gitsync.Options{URL: "ssh://git@example.com/app.git"}); !errors.Is(err, gitsync.ErrInvalidCredentials) {
		t.Fatalf("ssh without credentials: err = %v", err)
	}
}

// sshEndpoint runs an SSH server that completes handshakes and
// authentication with hostKey, then refuses every channel. It is enough to
// exercise host key verification; it serves no Git.
func sshEndpoint(t *testing.T, hostKey ssh.Signer) string {
	t.Helper()
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, chans, reqs, err := ssh.NewServerConn(c, cfg)
				if err != nil {
					return
				}
				go ssh.DiscardRequests(reqs)
				for ch := range chans {
					_ = ch.Reject(ssh.Prohibited, "no git here")
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestSSHHostKeyIsVerified(t *testing.T) {
	identity, _ := sshKey(t)
	_, hostKey := sshKey(t)
	_, otherKey := sshKey(t)
	addr := sshEndpoint(t, hostKey)
	host, port, _ := net.SplitHostPort(addr)
	url := "ssh://git@" + addr + "/app.git"
	entry := func(k ssh.Signer) []byte {
		return []byte("[" + host + "]:" + port + " " + string(ssh.MarshalAuthorizedKey(k.PublicKey())))
	}

	for name, tc := range map[string]struct {
		knownHosts  []byte
		wantHostKey bool
	}{
		"unknown host": {[]byte("example.com " + string(ssh.MarshalAuthorizedKey(hostKey.PublicKey()))), true},
		"changed key":  {entry(otherKey), true},
		"known key":    {entry(hostKey), false},
	} {
		t.Run(name, func(t *testing.T) {
			creds, err := gitsync.CredentialsFromSecret(map[string][]byte{"identity": identity, "known_hosts": tc.knownHosts})
			if err != nil {
				t.Fatal(err)
			}
			repo := openRepo(t, gitsync.Options{URL: url, Credentials: creds})
			_, err = repo.ReadFile(ctx(t), "main", "a.txt")
			if err == nil {
				t.Fatal("read from a server without git succeeded")
			}
			if got := errors.Is(err, gitsync.ErrHostKey); got != tc.wantHostKey {
				t.Fatalf("err = %v; ErrHostKey = %v, want %v", err, got, tc.wantHostKey)
			}
		})
	}
}

func TestStatusFilesNeverLeakThePassword(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{Username: "bot", Password: password})
	url, err := srv.CreateRepo("app", map[string]string{"a.txt": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := gitsync.CredentialsFromSecret(map[string][]byte{"username": []byte("bot"), "password": []byte(password)})
	if err != nil {
		t.Fatal(err)
	}
	repo := openRepo(t, gitsync.Options{URL: url, Credentials: creds, InsecureHTTP: true})
	w, err := gitsync.NewWriter(repo, gitsync.WriterOptions{MessageTemplate: "status {{range .Changed}}{{.Message}}{{end}}"})
	if err != nil {
		t.Fatal(err)
	}
	s := state("demo", "leak", 1)
	s.Message = "fetch failed: auth " + password
	s.Git.Repository = strings.Replace(url, "http://", "http://bot:"+password+"@", 1)
	s.Analysis[0].Message = "query with " + password
	w.Enqueue(s)
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"demo/leak.yaml", "README.md"} {
		content, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, f)
		if err != nil {
			t.Fatal(err)
		}
		noSecret(t, f, content)
	}
	body, _ := gitLogBody(t, srv, gitsync.DefaultStatusBranch)
	noSecret(t, "status commit message", body)
}
