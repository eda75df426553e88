// Command dist finishes the release artifacts `make dist` built into one
// folder: a CycloneDX SBOM of every binary (from the module list the Go
// linker embedded in it), the krew archives and plugin manifest of
// `kubectl rollgate`, SHA256SUMS over all of it, and ECDSA P-256 signatures
// (sigstore's signature package) of SHA256SUMS and of the image index.
//
//	dist -dir bin/dist -key bin/dist-signing.key -version v0.3.0 -created 1700000000 \
//	     -cli rollgate-linux-amd64 ... -binary rollgate-controller-linux-amd64 ... -image image
//
// The key is a PEM private key; when the file does not exist an ECDSA P-256
// key is generated into it. The public key is written to rollgate.pub in -dir;
// signatures are ASN.1 DER, which `openssl dgst -sha256 -verify` reads
// (docs/verify.md).
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"sigs.k8s.io/yaml"
)

type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(s string) error { *l = append(*l, s); return nil }

type options struct {
	dir, key, version, image, krewURL string
	created                           time.Time
	clis, binaries                    list
}

func main() {
	var o options
	var created int64
	flag.StringVar(&o.dir, "dir", "", "the dist folder holding the binaries and the image layout (required)")
	flag.StringVar(&o.key, "key", "", "PEM private key to sign with; generated (ECDSA P-256) when missing (required)")
	flag.StringVar(&o.version, "version", "dev", "release version, in the SBOMs and the krew manifest")
	flag.StringVar(&o.image, "image", "", "the OCI image layout folder in -dir whose image index is signed (optional)")
	flag.StringVar(&o.krewURL, "krew-url", "https://github.com/rollgate/rollgate/releases/download/{{version}}/", "prefix of the krew archives' URIs; {{version}} is replaced")
	flag.Int64Var(&created, "created", 0, "time of the archives' files and the SBOMs, in Unix seconds (the commit's)")
	flag.Var(&o.clis, "cli", "CLI binary in -dir named rollgate-<os>-<arch>: an SBOM and a krew archive; repeatable")
	flag.Var(&o.binaries, "binary", "other binary in -dir: an SBOM; repeatable")
	flag.Parse()
	if o.dir == "" || o.key == "" || len(o.clis) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	o.created = time.Unix(created, 0).UTC()
	if err := run(o); err != nil {
		log.Fatalf("dist: %v", err)
	}
}

func run(o options) error {
	signer, err := loadOrGenerateKey(o.key)
	if err != nil {
		return err
	}
	pub, err := signer.PublicKey()
	if err != nil {
		return err
	}
	pubPEM, err := cryptoutils.MarshalPublicKeyToPEM(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.dir, "rollgate.pub"), pubPEM, 0o644); err != nil {
		return err
	}
	for _, b := range append(append(list{}, o.clis...), o.binaries...) {
		if err := writeSBOM(o, b); err != nil {
			return fmt.Errorf("SBOM of %s: %w", b, err)
		}
	}
	if err := writeKrew(o); err != nil {
		return err
	}
	if o.image != "" {
		blob, err := indexBlob(filepath.Join(o.dir, o.image))
		if err != nil {
			return err
		}
		if err := sign(signer, filepath.Join(o.dir, blob), filepath.Join(o.dir, "image-index.sig")); err != nil {
			return err
		}
		digest := "sha256:" + filepath.Base(blob)
		if err := os.WriteFile(filepath.Join(o.dir, "image-index.digest"), []byte(digest+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := writeSums(o.dir); err != nil {
		return err
	}
	return sign(signer, filepath.Join(o.dir, "SHA256SUMS"), filepath.Join(o.dir, "SHA256SUMS.sig"))
}

// loadOrGenerateKey reads an unencrypted PEM ECDSA key, or generates a
// P-256 one into path when there is none.
func loadOrGenerateKey(path string) (*signature.ECDSASignerVerifier, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		data, err = cryptoutils.MarshalPrivateKeyToPEM(priv)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
		fmt.Printf("generated signing key %s\n", path)
	} else if err != nil {
		return nil, err
	}
	key, err := cryptoutils.UnmarshalPEMToPrivateKey(data, cryptoutils.SkipPassword)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	priv, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key %s: %T is not an ECDSA key", path, key)
	}
	return signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
}

// sign writes the ASN.1 DER ECDSA signature of file's SHA-256 to sigPath.
func sign(s signature.Signer, file, sigPath string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sig, err := s.SignMessage(f)
	if err != nil {
		return fmt.Errorf("sign %s: %w", file, err)
	}
	return os.WriteFile(sigPath, sig, 0o644)
}

// indexBlob returns the path, relative to the dist folder, of the blob of the one image index the layout's index.json names.
func indexBlob(layout string) (string, error) {
	data, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		return "", err
	}
	var idx struct {
		Manifests []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return "", err
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		return "", fmt.Errorf("%s/index.json: want one image index, got %+v", layout, idx.Manifests)
	}
	hex, ok := strings.CutPrefix(idx.Manifests[0].Digest, "sha256:")
	if !ok {
		return "", fmt.Errorf("%s/index.json: digest %q is not sha256", layout, idx.Manifests[0].Digest)
	}
	return filepath.Join(filepath.Base(layout), "blobs", "sha256", hex), nil
}

// writeSums writes SHA256SUMS over every regular file of dir (sha256sum's
// format, sorted), but the signatures, the key and the list itself.
func writeSums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "SHA256SUMS" || strings.HasSuffix(rel, ".sig") {
			return nil
		}
		sum, err := sha256File(p)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

func sha256File(p string) (string, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// writeSBOM writes <binary>.cdx.json: the main module as the application,
// every module linked into the binary as a library with its package URL,
// and the build settings (GOOS, GOARCH, flags) as properties.
func writeSBOM(o options, name string) error {
	info, err := buildinfo.ReadFile(filepath.Join(o.dir, name))
	if err != nil {
		return err
	}
	purl := func(path, version string) string { return "pkg:golang/" + path + "@" + version }
	mainRef := purl(info.Main.Path, o.version)
	var props []cdx.Property
	props = append(props, cdx.Property{Name: "go:version", Value: info.GoVersion})
	for _, s := range info.Settings {
		props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
	}
	var comps []cdx.Component
	var deps []string
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		ref := purl(m.Path, m.Version)
		c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: ref}
		if m.Sum != "" {
			// go.sum's h1: hash is not a plain SHA-256 of a file: a property.
			c.Properties = &[]cdx.Property{{Name: "go:sum", Value: m.Sum}}
		}
		comps = append(comps, c)
		deps = append(deps, ref)
	}
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: o.created.Format(time.RFC3339),
		Component: &cdx.Component{
			BOMRef: mainRef, Type: cdx.ComponentTypeApplication, Name: info.Main.Path, Version: o.version,
			PackageURL: mainRef, Description: name, Properties: &props,
		},
	}
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: mainRef, Dependencies: &deps}}
	f, err := os.Create(filepath.Join(o.dir, name+".cdx.json"))
	if err != nil {
		return err
	}
	if err := cdx.NewBOMEncoder(f, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// krewPlugin is the part of krew's Plugin (v1alpha2) rollgate fills in.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	SHA256 string `json:"sha256"`
	Bin    string `json:"bin"`
}

// writeKrew packs each CLI as kubectl-rollgate in
// kubectl-rollgate-<os>-<arch>.tar.gz (fixed times and owners) and writes
// plugin.yaml naming every archive with its SHA-256.
func writeKrew(o options) error {
	var p krewPlugin
	p.APIVersion, p.Kind, p.Metadata.Name = "krew.googlecontainertools.github.com/v1alpha2", "Plugin", "rollgate"
	p.Spec.Version = o.version
	p.Spec.Homepage = "https://github.com/rollgate/rollgate"
	p.Spec.ShortDescription = "Inspect and approve rollgate releases"
	p.Spec.Description = "kubectl rollgate is the rollgate CLI: status, approvals and plans of progressive releases held by rollgate."
	prefix := strings.ReplaceAll(o.krewURL, "{{version}}", o.version)
	for _, cli := range o.clis {
		osArch, ok := strings.CutPrefix(cli, "rollgate-")
		goos, goarch, ok2 := strings.Cut(osArch, "-")
		if !ok || !ok2 {
			return fmt.Errorf("CLI %s: want rollgate-<os>-<arch>", cli)
		}
		archive := "kubectl-rollgate-" + osArch + ".tar.gz"
		if err := writeArchive(filepath.Join(o.dir, cli), filepath.Join(o.dir, archive), o.created); err != nil {
			return err
		}
		sum, err := sha256File(filepath.Join(o.dir, archive))
		if err != nil {
			return err
		}
		pl := krewPlatform{URI: prefix + archive, SHA256: sum, Bin: "kubectl-rollgate"}
		pl.Selector.MatchLabels = map[string]string{"os": goos, "arch": goarch}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.dir, "plugin.yaml"), data, 0o644)
}

func writeArchive(binary, out string, created time.Time) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Name: "kubectl-rollgate", Mode: 0o755, Size: int64(len(data)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	err = tw.WriteHeader(hdr)
	if err == nil {
		_, err = tw.Write(data)
	}
	return errors.Join(err, tw.Close(), gz.Close(), f.Close())
}
