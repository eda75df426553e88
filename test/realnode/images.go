package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rollgate/rollgate/test/repo"
)

// Image is a container image tarball to import into the node's containerd.
type Image struct {
	// Ref is the reference written in the tarball, e.g. localhost/verserver:v1.
	Ref string
	// Tar is the path of the docker-save tarball.
	Tar string
}

// ImageSpec says how to build an image FROM scratch holding one static Go
// binary.
type ImageSpec struct {
	// Package is the Go package of the binary, relative to the repository
	// root, e.g. ./cmd/rollgate.
	Package string
	// Ref is the image reference.
	Ref string
	// LDFlags are extra -ldflags (e.g. "-X main.version=v2").
	LDFlags string
	// User is the numeric uid=gid the image runs as; 0 means root.
	User int
	// CA installs Debian's CA bundle.
	CA bool
	// Labels are OCI labels.
	Labels map[string]string
}

// BuildImage compiles spec.Package (static, -trimpath) and packs it with
// bin/mkimage into dir, as `make image` does for the controller.
func BuildImage(ctx context.Context, dir string, spec ImageSpec) (Image, error) {
	mkimage, err := repo.LookTool("mkimage")
	if err != nil {
		return Image{}, err
	}
	root, err := repo.FindRoot()
	if err != nil {
		return Image{}, err
	}
	name := strings.NewReplacer("/", "_", ":", "_").Replace(spec.Ref)
	bin := filepath.Join(dir, name+".bin")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w "+spec.LDFlags, "-o", bin, spec.Package)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("go build %s: %v\n%s", spec.Package, err, out)
	}
	tar := filepath.Join(dir, name+".tar")
	args := []string{"-binary", bin, "-path", "/" + filepath.Base(strings.TrimSuffix(spec.Package, "/")),
		"-tag", spec.Ref, "-o", tar, "-created", "0"}
	if spec.User > 0 {
		args = append(args, "-user", strconv.Itoa(spec.User))
	}
	if spec.CA {
		args = append(args, "-ca", "/etc/ssl/certs/ca-certificates.crt")
	}
	for k, v := range spec.Labels {
		args = append(args, "-label", k+"="+v)
	}
	if out, err := exec.CommandContext(ctx, mkimage, args...).CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("mkimage %s: %v\n%s", spec.Ref, err, out)
	}
	return Image{Ref: spec.Ref, Tar: tar}, nil
}

// SampleApp builds the sample application (verserver) at version.
func SampleApp(ctx context.Context, dir, version string) (Image, error) {
	return BuildImage(ctx, dir, ImageSpec{
		Package: "./test/realnode/verserver",
		Ref:     "localhost/verserver:" + version,
		LDFlags: "-X main.version=" + version,
		User:    65532,
	})
}

// ControllerImage builds the rollgate controller image from the working tree
// as `make image` does, under ref.
func ControllerImage(ctx context.Context, dir, ref string) (Image, error) {
	return BuildImage(ctx, dir, ImageSpec{
		Package: "./cmd/rollgate-controller",
		Ref:     ref,
		User:    65532,
		CA:      true,
		Labels: map[string]string{
			"org.opencontainers.image.version":  "test",
			"org.opencontainers.image.revision": "working-tree",
			"org.opencontainers.image.source":   "https://github.com/rollgate/rollgate",
		},
	})
}

func pauseImage(ctx context.Context, dir string) (Image, error) {
	return BuildImage(ctx, dir, ImageSpec{Package: "./test/realnode/pause", Ref: PauseImage})
}
