package gitsync

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

// Keys read from Secret data by CredentialsFromSecret. They match the keys
// Flux's GitRepository uses, so one Secret can serve both controllers.
const (
	// SecretKeyUsername is the HTTPS user name, or the SSH user (default "git"
	// or the user in the URL).
	SecretKeyUsername = "username"
	// SecretKeyPassword is the HTTPS password, or the passphrase of an
	// encrypted SSH identity.
	SecretKeyPassword = "password"
	// SecretKeyToken is an HTTPS access token sent as the basic-auth
	// password (user name from SecretKeyUsername, default "git"). This is
	// what GitHub, GitLab, Gitea and Bitbucket expect for personal and app
	// tokens.
	SecretKeyToken = "token"
	// SecretKeyBearerToken is an HTTPS token sent as "Authorization: Bearer".
	SecretKeyBearerToken = "bearerToken"
	// SecretKeyCA is a PEM CA bundle trusted in addition to the system pool.
	SecretKeyCA = "ca.crt"
	// SecretKeyIdentity is a PEM (or OpenSSH) private key for SSH.
	SecretKeyIdentity = "identity"
	// SecretKeyKnownHosts is the known_hosts content for SSH. It is required
	// with SecretKeyIdentity: host keys are always verified.
	SecretKeyKnownHosts = "known_hosts"
)

// defaultGitUser is the user for tokens and SSH when none is given.
const defaultGitUser = "git"

// Credentials authenticate to a Git host. Build them with
// CredentialsFromSecret; the zero value means anonymous access. A
// Credentials never prints its secrets (String and GoString are redacted).
type Credentials struct {
	username    string
	password    string
	token       string
	bearerToken string
	caBundle    []byte
	knownHosts  []byte
	signer      ssh.Signer
}

// CredentialsFromSecret builds Credentials from Secret data (see the
// SecretKey constants). It validates the combination eagerly: an identity
// without known_hosts, an unparsable key or known_hosts, or a password
// without a user name is ErrInvalidCredentials. Errors never quote the data.
func CredentialsFromSecret(data map[string][]byte) (*Credentials, error) {
	c := &Credentials{
		username:    string(data[SecretKeyUsername]),
		password:    string(data[SecretKeyPassword]),
		token:       string(data[SecretKeyToken]),
		bearerToken: string(data[SecretKeyBearerToken]),
		caBundle:    data[SecretKeyCA],
		knownHosts:  data[SecretKeyKnownHosts],
	}
	if identity := data[SecretKeyIdentity]; len(identity) > 0 {
		if len(c.knownHosts) == 0 {
			return nil, fmt.Errorf("%w: %q is required with %q", ErrInvalidCredentials, SecretKeyKnownHosts, SecretKeyIdentity)
		}
		signer, err := parseIdentity(identity, c.password)
		if err != nil {
			return nil, err
		}
		c.signer = signer
		if _, err := c.hostKeyDB(); err != nil {
			return nil, err
		}
		return c, nil
	}
	if len(c.knownHosts) > 0 {
		return nil, fmt.Errorf("%w: %q given without %q", ErrInvalidCredentials, SecretKeyKnownHosts, SecretKeyIdentity)
	}
	if c.password != "" && c.username == "" {
		return nil, fmt.Errorf("%w: %q given without %q", ErrInvalidCredentials, SecretKeyPassword, SecretKeyUsername)
	}
	return c, nil
}

// parseIdentity parses an SSH private key without echoing it in errors.
func parseIdentity(pem []byte, passphrase string) (ssh.Signer, error) {
	signer, err := ssh.ParsePrivateKey(pem)
	if _, missing := err.(*ssh.PassphraseMissingError); missing {
		if passphrase == "" {
			return nil, fmt.Errorf("%w: %q is encrypted and %q is empty", ErrInvalidCredentials, SecretKeyIdentity, SecretKeyPassword)
		}
		signer, err = ssh.ParsePrivateKeyWithPassphrase(pem, []byte(passphrase))
	}
	if err != nil {
		// The parser's message names the key type at most; keep it generic
		// anyway, as it is about secret material.
		return nil, fmt.Errorf("%w: %q is not a valid private key", ErrInvalidCredentials, SecretKeyIdentity)
	}
	return signer, nil
}

// hostKeyDB parses known_hosts. The parser only reads files, so the data is
// written to a private temporary file that is removed before returning.
func (c *Credentials) hostKeyDB() (*knownhosts.HostKeyDB, error) {
	f, err := os.CreateTemp("", "rollgate-known-hosts-*")
	if err != nil {
		return nil, fmt.Errorf("%w: writing known_hosts: %v", ErrInvalidCredentials, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(c.knownHosts)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		return nil, fmt.Errorf("%w: writing known_hosts failed", ErrInvalidCredentials)
	}
	db, err := knownhosts.NewDB(f.Name())
	if err != nil {
		return nil, fmt.Errorf("%w: %q cannot be parsed", ErrInvalidCredentials, SecretKeyKnownHosts)
	}
	return db, nil
}

// secrets lists the values a redactor must remove.
func (c *Credentials) secrets() []string {
	if c == nil {
		return nil
	}
	out := []string{c.password, c.token, c.bearerToken}
	if c.username != "" && c.password != "" {
		out = append(out, c.username+":"+c.password)
	}
	if c.token != "" {
		out = append(out, c.username+":"+c.token, defaultGitUser+":"+c.token)
	}
	return out
}

// String describes the credentials without secrets.
func (c *Credentials) String() string {
	switch {
	case c == nil:
		return "anonymous"
	case c.signer != nil:
		return "ssh key " + ssh.FingerprintSHA256(c.signer.PublicKey())
	case c.bearerToken != "":
		return "https bearer token"
	case c.token != "":
		return "https token"
	case c.username != "":
		return "https basic auth for " + strconv.Quote(c.username)
	default:
		return "anonymous"
	}
}

// GoString keeps %#v from printing the fields.
func (c *Credentials) GoString() string { return "gitsync.Credentials(" + c.String() + ")" }

// authMethod returns the go-git auth method for endpoint. allowHTTP permits
// sending credentials over plain http (tests, in-cluster servers).
func (c *Credentials) authMethod(ep *transport.Endpoint, allowHTTP bool) (transport.AuthMethod, error) {
	switch ep.Protocol {
	case "ssh":
		return c.sshAuth(ep)
	case "http", "https":
		return c.httpAuth(ep, allowHTTP)
	case "file":
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: unsupported URL scheme %q", ErrInvalidCredentials, ep.Protocol)
	}
}

func (c *Credentials) httpAuth(ep *transport.Endpoint, allowHTTP bool) (transport.AuthMethod, error) {
	if c == nil || (c.username == "" && c.token == "" && c.bearerToken == "") {
		return nil, nil
	}
	if c.signer != nil {
		return nil, fmt.Errorf("%w: SSH identity given for an %s URL", ErrInvalidCredentials, ep.Protocol)
	}
	if ep.Protocol == "http" && !allowHTTP {
		return nil, fmt.Errorf("%w: refusing to send credentials over plain http: use https, or allow it with --git-allow-insecure-http (controller) or --insecure-http (CLI)", ErrInvalidCredentials)
	}
	switch {
	case c.bearerToken != "":
		return &githttp.TokenAuth{Token: c.bearerToken}, nil
	case c.token != "":
		user := c.username
		if user == "" {
			user = defaultGitUser
		}
		return &githttp.BasicAuth{Username: user, Password: c.token}, nil
	default:
		return &githttp.BasicAuth{Username: c.username, Password: c.password}, nil
	}
}

func (c *Credentials) sshAuth(ep *transport.Endpoint) (transport.AuthMethod, error) {
	if c == nil || c.signer == nil {
		return nil, fmt.Errorf("%w: an ssh URL needs %q and %q", ErrInvalidCredentials, SecretKeyIdentity, SecretKeyKnownHosts)
	}
	db, err := c.hostKeyDB()
	if err != nil {
		return nil, err
	}
	user := c.username
	if user == "" {
		user = ep.User
	}
	if user == "" {
		user = defaultGitUser
	}
	port := ep.Port
	if port == 0 {
		port = 22
	}
	hostPort := net.JoinHostPort(ep.Host, strconv.Itoa(port))
	auth := &gitssh.PublicKeys{User: user, Signer: c.signer}
	auth.HostKeyCallback = db.HostKeyCallback()
	// Offer only the key types known_hosts has for this host, so a server
	// preferring another type does not fail verification spuriously.
	auth.HostKeyAlgorithms = db.HostKeyAlgorithms(hostPort)
	return auth, nil
}

// caBundleData returns the extra CA bundle, if any.
func (c *Credentials) caBundleData() []byte {
	if c == nil {
		return nil
	}
	return c.caBundle
}
