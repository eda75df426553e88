// Package gitea runs a real Gitea on loopback for tests: the binary
// `make tools-gitea` builds into bin/gitea, with an embedded SQLite
// database, in a folder of its own, serving HTTPS with a certificate of its
// own (as a hosted forge does: rollgate sends tokens over https only), with
// no mailer, no SSH server, no Gravatar and no update check. It is the forge the forge tests open,
// review and merge pull requests on, through Gitea's own REST API and Git
// over HTTP, as people and rollgate do on a hosted one.
//
// Start prepares the folder, creates the database and two users with the
// `gitea admin user create` CLI (an administrator and a reviewer), then
// starts `gitea web` as a child process in its own process group; Stop
// ends it by its pid. Users, tokens, repositories, labels and reviews are
// then made through the API (see api.go).
package gitea

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

// ErrNotBuilt is wrapped by Start when bin/gitea holds no Gitea.
var ErrNotBuilt = errors.New("Gitea is not built: run 'make tools-gitea'")

// Options configure Start.
type Options struct {
	// Dir is Gitea's work path: its app.ini, SQLite database,
	// repositories, data and log (gitea.log). Required.
	Dir string
	// Bin is the Gitea binary; default bin/gitea/gitea.
	Bin string
	// Static is the Gitea source folder it reads templates, options and
	// public assets from (STATIC_ROOT_PATH); default bin/gitea/src.
	Static string
}

// User is a Gitea user and an API token of theirs.
type User struct {
	Name     string
	Password string
	Email    string
	// Token is an access token of the user. Admin's has every scope;
	// Reviewer's has write:repository (review and merge).
	Token string
}

// Server is a running Gitea.
type Server struct {
	// URL is Gitea's root URL, https://127.0.0.1:<port>/ (the API is under
	// api/v1, repositories are cloned from <owner>/<name>.git).
	URL string
	// CA is the certificate Gitea serves, PEM: self-signed, so it is also
	// the CA to trust (gitsync's ca.crt, HTTPClient).
	CA []byte
	// Dir is the work path given in Options.
	Dir string
	// Admin is a site administrator.
	Admin User
	// Reviewer is a second, ordinary user: the person who reviews and
	// merges pull requests.
	Reviewer User

	bin    string
	config string
	web    *proc.Process
	client *http.Client
}

// Start starts Gitea and waits until its API answers. On error nothing is
// left running.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("gitea: Options.Dir is required")
	}
	if o.Bin == "" {
		o.Bin = filepath.Join(repo.ToolsDir(), "gitea", "gitea")
	}
	if o.Static == "" {
		o.Static = filepath.Join(repo.ToolsDir(), "gitea", "src")
	}
	if _, err := os.Stat(o.Bin); err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNotBuilt, err)
	}
	if _, err := os.Stat(filepath.Join(o.Static, "templates")); err != nil {
		return nil, fmt.Errorf("%w: no templates in %s (%v)", ErrNotBuilt, o.Static, err)
	}
	ports, err := proc.FreePorts(1)
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL: fmt.Sprintf("https://127.0.0.1:%d/", ports[0]), Dir: o.Dir,
		bin: o.Bin, config: filepath.Join(o.Dir, "custom", "conf", "app.ini"),
	}
	if s.CA, err = writeCertificate(filepath.Join(o.Dir, "custom", "https")); err != nil {
		return nil, err
	}
	s.client = s.HTTPClient()
	if err := s.writeConfig(ports[0], o.Static); err != nil {
		return nil, err
	}
	// The database and the users first, while no server holds SQLite.
	if _, err := s.cli(ctx, "migrate"); err != nil {
		return nil, err
	}
	if s.Admin, err = s.createUser(ctx, "gitea-admin", true); err != nil {
		return nil, err
	}
	if s.Reviewer, err = s.createUser(ctx, "reviewer", false); err != nil {
		return nil, err
	}
	s.web, err = proc.Start(o.Dir, "gitea", s.bin, s.globalArgs("web"), s.env())
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, 90*time.Second); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	if s.Reviewer.Token, err = s.CreateToken(ctx, s.Reviewer, "review", "write:repository"); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// Stop ends Gitea: SIGTERM to its process group (by pid), SIGKILL after
// 10 s.
func (s *Server) Stop() error {
	if s.web == nil {
		return nil
	}
	return s.web.Stop(10 * time.Second)
}

// Exited returns an error with the end of Gitea's log when it is no longer
// running.
func (s *Server) Exited() error {
	if s.web == nil {
		return errors.New("gitea was not started")
	}
	return s.web.Exited()
}

// Log is the path of Gitea's log.
func (s *Server) Log() string { return s.web.Log }

// globalArgs puts Gitea's global flags (work path, custom path, config)
// before a command.
func (s *Server) globalArgs(args ...string) []string {
	return append([]string{
		"--work-path", s.Dir, "--custom-path", filepath.Join(s.Dir, "custom"), "--config", s.config,
	}, args...)
}

// env is the environment of every Gitea command. Gitea refuses to run as
// root; the test platform runs as root on CI machines, so the documented
// override is set there.
func (s *Server) env() []string {
	env := []string{"GITEA_WORK_DIR=" + s.Dir, "HOME=" + filepath.Join(s.Dir, "home")}
	if os.Getuid() == 0 {
		env = append(env, "GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true")
	}
	return env
}

// cli runs one Gitea CLI command to its end and returns its output.
func (s *Server) cli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, s.globalArgs(args...)...)
	cmd.Env = append(os.Environ(), s.env()...)
	cmd.Dir = s.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("gitea %s: %w\n%s", strings.Join(args, " "), err, tail(out.String(), 15))
	}
	return out.String(), nil
}

// tokenLine is how `gitea admin user create --access-token` prints the
// token.
var tokenLine = regexp.MustCompile(`Access token was successfully created\.\.\. ([0-9a-f]+)`)

// createUser creates a user with the CLI; an administrator also gets a
// token with every scope, printed by the same command.
func (s *Server) createUser(ctx context.Context, name string, admin bool) (User, error) {
	u := User{Name: name, Password: "pw-" + randomHex(12), Email: name + "@example.com"}
	args := []string{"admin", "user", "create", "--username", u.Name, "--password", u.Password,
		"--email", u.Email, "--must-change-password=false"}
	if admin {
		args = append(args, "--admin", "--access-token", "--access-token-name", "setup", "--access-token-scopes", "all")
	}
	out, err := s.cli(ctx, args...)
	if err != nil {
		return User{}, err
	}
	if admin {
		m := tokenLine.FindStringSubmatch(out)
		if m == nil {
			return User{}, fmt.Errorf("gitea admin user create printed no access token:\n%s", tail(out, 15))
		}
		u.Token = m[1]
	}
	return u, nil
}

// waitReady waits until the API answers GET /api/v1/version.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := s.web.Exited(); err != nil {
			return err
		}
		if err := s.Call(ctx, "", http.MethodGet, "version", nil, nil); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gitea did not answer on %s within %s; last lines of %s:\n%s", s.URL, timeout, s.web.Log, proc.Tail(s.web.Log, 15))
		case <-tick.C:
		}
	}
}

// config is Gitea's app.ini. Every path is inside the work path; the
// server listens on loopback only.
var config = template.Must(template.New("app.ini").Parse(`APP_NAME = rollgate test forge
RUN_MODE = prod
WORK_PATH = {{.Dir}}
{{if .Root}}I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true
{{end}}
[server]
PROTOCOL = https
CERT_FILE = {{.Dir}}/custom/https/cert.pem
KEY_FILE = {{.Dir}}/custom/https/key.pem
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {{.Port}}
DOMAIN = 127.0.0.1
ROOT_URL = https://127.0.0.1:{{.Port}}/
LOCAL_ROOT_URL = https://127.0.0.1:{{.Port}}/
APP_DATA_PATH = {{.Dir}}/data
STATIC_ROOT_PATH = {{.Static}}
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = {{.Dir}}/data/gitea.db
SQLITE_JOURNAL_MODE = WAL
; Tests run side by side: wait for the writer rather than fail at once.
SQLITE_TIMEOUT = 5000

[repository]
ROOT = {{.Dir}}/repositories
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = {{.SecretKey}}
INTERNAL_TOKEN = {{.InternalToken}}

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REGISTER_EMAIL_CONFIRM = false
ENABLE_NOTIFY_MAIL = false

[mailer]
ENABLED = false

[picture]
DISABLE_GRAVATAR = true
ENABLE_FEDERATED_AVATAR = false

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[cron.update_checker]
ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[webhook]
ALLOWED_HOST_LIST = loopback

[session]
PROVIDER = memory

[log]
MODE = console
LEVEL = info
`))

// writeConfig writes app.ini for a server on port.
func (s *Server) writeConfig(port int, static string) error {
	if err := os.MkdirAll(filepath.Dir(s.config), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "home"), 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	err := config.Execute(&b, map[string]any{
		"Dir": s.Dir, "Port": port, "Static": static, "Root": os.Getuid() == 0,
		"SecretKey": randomHex(32), "InternalToken": randomHex(32),
	})
	if err != nil {
		return err
	}
	return os.WriteFile(s.config, b.Bytes(), 0o600)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
