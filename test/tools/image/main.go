// Command image builds single-layer linux container images FROM scratch
// without a registry or a daemon (go-containerregistry). With -o it writes
// one image as a docker-save tarball that `ctr -n k8s.io images import` and
// `docker load` read; with -layout it writes an OCI image layout holding a
// multi-architecture image index, one image per -binary.
//
// An image's architecture is the binary's, read from its ELF header: a
// binary that is not a static linux amd64 or arm64 ELF is refused, so an
// image can never be labelled with another architecture than it runs.
//
// The layer holds one static binary, its entrypoint, the binaries -add
// puts beside it (each in the image of its own architecture), and
// optionally Debian's CA bundle and a passwd/group entry for a non-root
// numeric user. Every timestamp is the
// -created time and every owner is root, so the same inputs give the same
// digest.
//
//	image -binary bin/rollgate -path /rollgate -tag ghcr.io/rollgate/rollgate:dev \
//	      -user 65532 -ca /etc/ssl/certs/ca-certificates.crt -created 1700000000 \
//	      -label org.opencontainers.image.version=dev -o bin/rollgate-image.tar
//	image -binary bin/amd64/rollgate -binary bin/arm64/rollgate -path /rollgate \
//	      -add /rollgate-notifier=bin/amd64/rollgate-notifier \
//	      -add /rollgate-notifier=bin/arm64/rollgate-notifier \
//	      -tag ghcr.io/rollgate/rollgate:dev -created 1700000000 -layout bin/dist/image
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("label %q: want key=value", s)
	}
	l[k] = v
	return nil
}

type binaries []string

func (b *binaries) String() string { return strings.Join(*b, ",") }

func (b *binaries) Set(s string) error { *b = append(*b, s); return nil }

// added are the -add binaries: path in the image and file.
type added []addedBinary

type addedBinary struct{ path, file string }

func (a *added) String() string { return fmt.Sprint(*a) }

func (a *added) Set(s string) error {
	p, f, ok := strings.Cut(s, "=")
	if !ok || !strings.HasPrefix(p, "/") || f == "" {
		return fmt.Errorf("-add %q: want /path/in/image=binary", s)
	}
	*a = append(*a, addedBinary{path: p, file: f})
	return nil
}

type options struct {
	binaries                      binaries
	added                         added
	path, tag, out, layoutDir, ca string
	user                          int
	created                       int64
	labels                        labels
	args                          []string
}

func main() {
	o := options{labels: labels{}}
	var args string
	flag.Var(&o.binaries, "binary", "static linux binary to put in the image (required; repeatable with -layout, one image per architecture)")
	flag.StringVar(&o.path, "path", "", "its path in the image, also the entrypoint (required, e.g. /rollgate)")
	flag.Var(&o.added, "add", "/path=binary: another static linux binary, put at /path in the image of its architecture; repeatable (each image needs every path once)")
	flag.StringVar(&o.tag, "tag", "", "image reference written into the tarball (required)")
	flag.StringVar(&o.out, "o", "", "output docker-save tarball of the one -binary's image (this or -layout)")
	flag.StringVar(&o.layoutDir, "layout", "", "output OCI image layout directory, replaced, holding an image index of every -binary's image (this or -o)")
	flag.StringVar(&o.ca, "ca", "", "CA bundle to install as /etc/ssl/certs/ca-certificates.crt (optional)")
	flag.IntVar(&o.user, "user", -1, "numeric uid=gid to run as, with a passwd and group entry (optional; -1 = root, no entry)")
	flag.Int64Var(&o.created, "created", 0, "creation time and every file time, in Unix seconds (commit time for reproducible digests)")
	flag.StringVar(&args, "args", "", "default arguments (Cmd), space separated (optional)")
	flag.Var(o.labels, "label", "key=value image label; repeatable")
	flag.Parse()
	if len(o.binaries) == 0 || o.path == "" || o.tag == "" || (o.out == "") == (o.layoutDir == "") ||
		(o.out != "" && len(o.binaries) != 1) {
		fmt.Fprintln(os.Stderr, "image: want -path, -tag, one -binary with -o or one or more with -layout")
		flag.Usage()
		os.Exit(2)
	}
	o.args = strings.Fields(args)
	if o.out != "" {
		digest, err := writeTarball(o)
		if err != nil {
			log.Fatalf("image: %v", err)
		}
		fmt.Printf("%s %s -> %s\n", o.tag, digest, o.out)
		return
	}
	digest, err := writeLayout(o)
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	fmt.Printf("%s index %s -> %s\n", o.tag, digest, o.layoutDir)
}

// architecture reads a binary's ELF header: the GOARCH of a static linux
// amd64 or arm64 executable, an error for anything else.
func architecture(binary string) (string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return "", fmt.Errorf("%s is not a linux ELF binary: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked: an image FROM scratch needs a static binary (CGO_ENABLED=0)", binary)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("%s: ELF machine %v is neither amd64 nor arm64", binary, f.Machine)
}

// writeTarball writes the one binary's image as a docker-save tarball.
func writeTarball(o options) (v1.Hash, error) {
	img, err := build(o, o.binaries[0], false)
	if err != nil {
		return v1.Hash{}, err
	}
	ref, err := name.NewTag(o.tag)
	if err != nil {
		return v1.Hash{}, err
	}
	tmp := o.out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Rename(tmp, o.out); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// writeLayout writes an OCI image layout whose index.json names one image
// index (annotated with the tag), which names every binary's image with its
// platform. Media types are OCI's throughout.
func writeLayout(o options) (v1.Hash, error) {
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for _, b := range o.binaries {
		img, err := build(o, b, true)
		if err != nil {
			return v1.Hash{}, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return v1.Hash{}, err
		}
		if prev, ok := seen[cf.Architecture]; ok {
			return v1.Hash{}, fmt.Errorf("%s and %s are both %s", prev, b, cf.Architecture)
		}
		seen[cf.Architecture] = b
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}},
		})
	}
	if err := os.RemoveAll(o.layoutDir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(o.layoutDir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.tag,
	})); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// build makes the image of one binary, with its architecture; oci picks
// OCI media types instead of Docker's.
func build(o options, binary string, oci bool) (v1.Image, error) {
	arch, err := architecture(binary)
	if err != nil {
		return nil, err
	}
	extra, err := addedFor(o, arch)
	if err != nil {
		return nil, err
	}
	created := time.Unix(o.created, 0).UTC()
	layerData, err := layerTar(o, binary, extra, created)
	if err != nil {
		return nil, err
	}
	var layerOpts []tarball.LayerOption
	base := empty.Image
	if oci {
		layerOpts = append(layerOpts, tarball.WithMediaType(types.OCILayer))
		base = mutate.ConfigMediaType(mutate.MediaType(base, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	}, layerOpts...)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "rollgate test/tools/image: " + path.Base(o.path),
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	// containerd's CRI filters out images without the platform it runs on.
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = []string{o.path}
	cf.Config.Cmd = o.args
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	if o.ca != "" {
		cf.Config.Env = append(cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	if o.user >= 0 {
		cf.Config.User = fmt.Sprintf("%d:%d", o.user, o.user)
	}
	if len(o.labels) > 0 {
		cf.Config.Labels = map[string]string(o.labels)
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: created})
	if err != nil {
		return nil, err
	}
	return img, nil
}

// addedFor picks the -add binaries of one architecture: every path given
// must have exactly one binary of it.
func addedFor(o options, arch string) ([]entry, error) {
	paths := map[string]bool{}
	byPath := map[string]addedBinary{}
	for _, a := range o.added {
		paths[a.path] = true
		if a.path == o.path {
			return nil, fmt.Errorf("-add %s=%s: %s is the entrypoint's path", a.path, a.file, a.path)
		}
		aa, err := architecture(a.file)
		if err != nil {
			return nil, err
		}
		if aa != arch {
			continue
		}
		if prev, ok := byPath[a.path]; ok {
			return nil, fmt.Errorf("-add %s: %s and %s are both %s", a.path, prev.file, a.file, arch)
		}
		byPath[a.path] = a
	}
	var out []entry
	for p := range paths {
		a, ok := byPath[p]
		if !ok {
			return nil, fmt.Errorf("-add %s: no %s binary given for the %s image", p, arch, arch)
		}
		data, err := os.ReadFile(a.file)
		if err != nil {
			return nil, err
		}
		out = append(out, entry{name: strings.TrimPrefix(p, "/"), mode: 0o755, data: data})
	}
	return out, nil
}

// entry is one file of the layer.
type entry struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// layerTar writes the layer in a fixed order with fixed owners and times.
func layerTar(o options, binary string, extra []entry, created time.Time) ([]byte, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	entries := append([]entry{{name: strings.TrimPrefix(o.path, "/"), mode: 0o755, data: bin}}, extra...)
	if o.ca != "" {
		ca, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		entries = append(entries, entry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	if o.user >= 0 {
		u := strconv.Itoa(o.user)
		entries = append(entries,
			entry{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + u + ":" + u + ":nonroot:/home/nonroot:/sbin/nologin\n")},
			entry{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:" + u + ":\n")},
			entry{name: "home/nonroot", mode: 0o700, dir: true},
		)
	}
	entries = append(entries, entry{name: "tmp", mode: 0o1777, dir: true})
	entries = withParents(entries)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, ModTime: created, Format: tar.FormatPAX}
		if e.dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.name+"/"
		} else {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(e.data))
		}
		if e.name == "home/nonroot" && o.user >= 0 {
			hdr.Uid, hdr.Gid = o.user, o.user
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if !e.dir {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withParents adds every missing parent directory (0755) and sorts by name,
// parents first.
func withParents(entries []entry) []entry {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.name] = true
	}
	for _, e := range entries {
		for d := path.Dir(e.name); d != "." && !have[d]; d = path.Dir(d) {
			have[d] = true
			entries = append(entries, entry{name: d, mode: 0o755, dir: true})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries
}
