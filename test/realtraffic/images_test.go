package realtraffic

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/rollgate/rollgate/test/realnode"
)

// storyImages are the images every story imports into its node: built
// once per test binary, not once per story (the tarballs are the same).
var storyImages = &imageSet{}

// imageSet builds the sample application's three versions and the
// controller's image the first time they are asked for.
type imageSet struct {
	once   sync.Once
	dir    string
	images []realnode.Image
	err    error
}

func (s *imageSet) get(ctx context.Context) ([]realnode.Image, error) {
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "rollgate-realtraffic-images-"); s.err != nil {
			return
		}
		for _, v := range []string{"v1", "v2", "v3"} {
			img, err := realnode.SampleApp(ctx, s.dir, v)
			if err != nil {
				s.err = err
				return
			}
			s.images = append(s.images, img)
		}
		ctrl, err := realnode.ControllerImage(ctx, s.dir, controllerImage)
		if err != nil {
			s.err = err
			return
		}
		s.images = append(s.images, ctrl)
	})
	return s.images, s.err
}

// remove deletes the tarballs.
func (s *imageSet) remove() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	storyImages.remove()
	os.Exit(code)
}
