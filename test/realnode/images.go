package realnode

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	// Tar is the path of the docker-save tarball, or of an OCI archive
	// when Index is set.
	Tar string
	// Index says Tar is an OCI archive of an image index named Ref: the
	// node keeps the index, and its containerd runs the index's image of
	// the node's platform, as it would from a registry.
	Index bool
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
	name := fileName(spec.Ref)
	bin := filepath.Join(dir, name+".bin")
	if err := goBuild(ctx, spec.Package, "amd64", spec.LDFlags, bin); err != nil {
		return Image{}, err
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

// ControllerIndex builds the controller image as `make dist` does, under
// ref: an OCI image index of a linux/amd64 and a linux/arm64 image, each
// holding the controller and the notifier cross-built for its architecture
// (bin/mkimage -layout reads each binary's architecture from its ELF
// header), written as an OCI archive for the node to import.
func ControllerIndex(ctx context.Context, dir, ref string) (Image, error) {
	mkimage, err := repo.LookTool("mkimage")
	if err != nil {
		return Image{}, err
	}
	name := fileName(ref)
	layoutDir := filepath.Join(dir, name+".layout")
	args := []string{"-layout", layoutDir, "-path", "/rollgate-controller", "-tag", ref, "-user", "65532",
		"-ca", "/etc/ssl/certs/ca-certificates.crt", "-created", "0",
		"-label", "org.opencontainers.image.version=test", "-label", "org.opencontainers.image.revision=working-tree",
		"-label", "org.opencontainers.image.source=https://github.com/rollgate/rollgate"}
	for _, arch := range []string{"amd64", "arm64"} {
		bins := map[string]string{}
		for _, cmd := range []string{"rollgate-controller", "rollgate-notifier"} {
			bins[cmd] = filepath.Join(dir, fmt.Sprintf("%s-%s-linux-%s", name, cmd, arch))
			if err := goBuild(ctx, "./cmd/"+cmd, arch, "", bins[cmd]); err != nil {
				return Image{}, err
			}
		}
		args = append(args, "-binary", bins["rollgate-controller"], "-add", "/rollgate-notifier="+bins["rollgate-notifier"])
	}
	if out, err := exec.CommandContext(ctx, mkimage, args...).CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("mkimage -layout %s: %v\n%s", ref, err, out)
	}
	tar := filepath.Join(dir, name+".oci.tar")
	if err := tarDir(layoutDir, tar); err != nil {
		return Image{}, err
	}
	return Image{Ref: ref, Tar: tar, Index: true}, nil
}

// fileName is ref as a file name.
func fileName(ref string) string { return strings.NewReplacer("/", "_", ":", "_").Replace(ref) }

// goBuild compiles pkg (relative to the repository root) for linux/arch,
// static and -trimpath, with ldflags beside -s -w, into out.
func goBuild(ctx context.Context, pkg, arch, ldflags, out string) error {
	root, err := repo.FindRoot()
	if err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+ldflags), "-o", out, pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %v\n%s", pkg, arch, err, b)
	}
	return nil
}

// tarDir writes the files under dir into a tar archive at out, with paths
// relative to dir (an OCI layout becomes an OCI archive).
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	return errors.Join(err, tw.Close(), f.Close())
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

func pauseImage(ctx context.Context, dir string) (Image, error) {
	return BuildImage(ctx, dir, ImageSpec{Package: "./test/realnode/pause", Ref: PauseImage})
}
