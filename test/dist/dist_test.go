// Package dist tests `make dist`, the release artifacts: it builds them as
// a user does and checks them as docs/verify.md tells a platform team to,
// with nothing but the standard library in place of openssl and sha256sum.
package dist

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/test/repo"
)

// cliPlatforms are the CLIs the test builds: one cross-built linux/arm64
// CLI is enough to check the krew manifest and its archive; the four
// platforms of a release only add build time (make dist builds them).
const cliPlatforms = "linux/arm64"

// makeDist runs make dist into dir with key, printing its progress.
func makeDist(t *testing.T, dir, key string) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "dist", "DIST_DIR="+dir, "DIST_KEY="+key, "DIST_CLI_PLATFORMS="+cliPlatforms)
	cmd.Dir = repo.Root()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make dist: %v", err)
	}
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// TestDistArtifactsVerify: make dist builds an OCI layout whose image
// index names a linux/amd64 and a linux/arm64 image, each holding a
// controller and the notifier binaries of its architecture (the notifier
// added with -add); SHA256SUMS lists every file with
// its true digest; the signatures of SHA256SUMS and of the image index
// verify with rollgate.pub and fail for a changed file; every binary has a
// CycloneDX SBOM naming its modules; the krew manifest names each archive
// with its digest; a second build of the same commit gives the same image
// index digest.
func TestDistArtifactsVerify(t *testing.T) {
	tmp := t.TempDir()
	dir, key := filepath.Join(tmp, "dist"), filepath.Join(tmp, "signing.key")
	makeDist(t, dir, key)
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The image layout: index.json names one image index, tagged, whose
	// digest is image-index.digest.
	var layout struct{ Manifests []descriptor }
	if err := json.Unmarshal(read("image/index.json"), &layout); err != nil || len(layout.Manifests) != 1 {
		t.Fatalf("image/index.json: %v, %+v; want one image index", err, layout.Manifests)
	}
	top := layout.Manifests[0]
	if want := strings.TrimSpace(string(read("image-index.digest"))); top.Digest != want || top.Annotations["org.opencontainers.image.ref.name"] == "" {
		t.Fatalf("image/index.json names %s (annotations %v); image-index.digest is %s", top.Digest, top.Annotations, want)
	}
	blob := func(digest string) []byte {
		t.Helper()
		hexDigest, ok := strings.CutPrefix(digest, "sha256:")
		if !ok {
			t.Fatalf("digest %q is not sha256", digest)
		}
		b := read(filepath.Join("image", "blobs", "sha256", hexDigest))
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest {
			t.Fatalf("blob %s does not have its digest", digest)
		}
		return b
	}
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(blob(top.Digest), &index); err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range index.Manifests {
		if m.Platform == nil {
			t.Fatalf("image index entry %s has no platform", m.Digest)
		}
		p := m.Platform.OS + "/" + m.Platform.Architecture
		platforms = append(platforms, p)
		var manifest struct{ Layers []descriptor }
		if err := json.Unmarshal(blob(m.Digest), &manifest); err != nil {
			t.Fatal(err)
		}
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[m.Platform.Architecture]
		for _, bin := range []string{"rollgate-controller", "rollgate-notifier"} {
			if got := binaryMachine(t, bin, manifest.Layers, blob); got != machine {
				t.Errorf("image %s: %s is an ELF for %v, want %v", p, bin, got, machine)
			}
		}
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("image index platforms = %v, want linux/amd64 and linux/arm64", platforms)
	}

	// SHA256SUMS lists every artifact with its digest.
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(read("SHA256SUMS")))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		sums[name] = sum
		got := sha256.Sum256(read(name))
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
	}
	for _, name := range []string{"rollgate-linux-arm64", "rollgate-controller-linux-amd64", "rollgate-controller-linux-arm64",
		"rollgate-notifier-linux-amd64", "rollgate-notifier-linux-arm64", "rollgate-notifier-linux-arm64.cdx.json",
		"rollgate-linux-arm64.cdx.json", "kubectl-rollgate-linux-arm64.tar.gz", "plugin.yaml", "rollgate.pub", "image-index.digest", "image/index.json"} {
		if sums[name] == "" {
			t.Errorf("SHA256SUMS does not list %s", name)
		}
	}

	// The signatures verify with the public key, and not for a change.
	block, _ := pem.Decode(read("rollgate.pub"))
	if block == nil {
		t.Fatal("rollgate.pub is not PEM")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	ecpub, ok := pub.(*ecdsa.PublicKey)
	if err != nil || !ok {
		t.Fatalf("rollgate.pub: %v (%T), want an ECDSA public key", err, pub)
	}
	verify := func(data, sig []byte) bool {
		sum := sha256.Sum256(data)
		return ecdsa.VerifyASN1(ecpub, sum[:], sig)
	}
	if !verify(read("SHA256SUMS"), read("SHA256SUMS.sig")) {
		t.Error("SHA256SUMS.sig does not verify")
	}
	if verify(append(read("SHA256SUMS"), "0000  evil\n"...), read("SHA256SUMS.sig")) {
		t.Error("SHA256SUMS.sig verifies a changed SHA256SUMS")
	}
	if !verify(blob(top.Digest), read("image-index.sig")) {
		t.Error("image-index.sig does not verify the image index")
	}

	// Each binary has its SBOM, naming the modules linked in.
	for _, bin := range []string{"rollgate-linux-arm64", "rollgate-controller-linux-amd64", "rollgate-controller-linux-arm64", "rollgate-notifier-linux-amd64"} {
		var bom struct {
			BOMFormat  string `json:"bomFormat"`
			Components []struct {
				Name string `json:"name"`
			} `json:"components"`
		}
		if err := json.Unmarshal(read(bin+".cdx.json"), &bom); err != nil || bom.BOMFormat != "CycloneDX" {
			t.Fatalf("%s.cdx.json: %v, format %q", bin, err, bom.BOMFormat)
		}
		if !slices.ContainsFunc(bom.Components, func(c struct {
			Name string `json:"name"`
		}) bool {
			return strings.Contains(c.Name, "controller-runtime")
		}) {
			t.Errorf("%s.cdx.json names %d components, not controller-runtime", bin, len(bom.Components))
		}
	}

	// The krew manifest names each archive with its digest.
	var plugin struct {
		Spec struct {
			Platforms []struct {
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(read("plugin.yaml"), &plugin); err != nil || len(plugin.Spec.Platforms) != 1 {
		t.Fatalf("plugin.yaml: %v, %d platforms; want 1 (%s)", err, len(plugin.Spec.Platforms), cliPlatforms)
	}
	if p := plugin.Spec.Platforms[0]; !strings.HasSuffix(p.URI, "/kubectl-rollgate-linux-arm64.tar.gz") || p.SHA256 != sums["kubectl-rollgate-linux-arm64.tar.gz"] {
		t.Errorf("plugin.yaml platform %+v; the archive's SHA-256 is %s", p, sums["kubectl-rollgate-linux-arm64.tar.gz"])
	}

	// One commit, one toolchain: the same image index.
	again := filepath.Join(tmp, "again")
	makeDist(t, again, key)
	second, err := os.ReadFile(filepath.Join(again, "image-index.digest"))
	if err != nil || string(second) != string(read("image-index.digest")) {
		t.Errorf("second build: image index %s (%v), first %s", second, err, read("image-index.digest"))
	}
}

// binaryMachine reads the binary at /name out of an image's layers and
// returns its ELF machine.
func binaryMachine(t *testing.T, name string, layers []descriptor, blob func(string) []byte) elf.Machine {
	t.Helper()
	for _, l := range layers {
		var r io.Reader = bytes.NewReader(blob(l.Digest))
		if strings.HasSuffix(l.MediaType, "gzip") {
			gz, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = gz
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			if strings.TrimPrefix(h.Name, "/") != name {
				continue
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s in layer %s: %v", name, l.Digest, err)
			}
			return f.Machine
		}
	}
	t.Fatal(fmt.Sprintf("no %s in the image's %d layers", name, len(layers)))
	return 0
}
