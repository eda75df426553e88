package gitsync_test

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

func TestSignedCommits(t *testing.T) {
	entity, err := openpgp.NewEntity("rollgate", "test", "rollgate@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var priv, pub bytes.Buffer
	w, _ := armor.Encode(&priv, openpgp.PrivateKeyType, nil)
	if err := entity.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w, _ = armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err := entity.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()

	signer, err := gitsync.NewOpenPGPSigner(priv.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gitsync.NewOpenPGPSigner(pub.Bytes(), ""); !errors.Is(err, gitsync.ErrInvalidCredentials) {
		t.Fatalf("public key accepted as signing key: %v", err)
	}

	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo := openRepo(t, gitsync.Options{URL: url, Signer: signer})
	res, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Message: "signed", Files: map[string][]byte{"b": []byte("b\n")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Verify the pushed commit as stored by the server.
	local, err := git.PlainOpen(srv.Root + "/app.git")
	if err != nil {
		t.Fatal(err)
	}
	c, err := local.CommitObject(plumbing.NewHash(res.Commit))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verify(pub.String()); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	out, _ := exec.Command("git", "-C", srv.Root+"/app.git", "cat-file", "commit", res.Commit).CombinedOutput()
	if !strings.Contains(string(out), "gpgsig -----BEGIN PGP SIGNATURE-----") {
		t.Fatalf("commit has no gpgsig header:\n%s", out)
	}
}
