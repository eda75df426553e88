package demo

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A demo killed with SIGKILL cannot clean up. Its children die with it
// (see processAttr) and the next kwok.Create stops its cluster; the files
// it leaves are removed by the next demo, which finds them through the
// owner file in the demo's temporary folder.
const (
	tmpPattern  = "rollgate-demo-*"
	ownerFile   = "owner.pid"
	gitRootFile = "git-root"
)

// claimTmp records the current process as the owner of the temporary
// folder.
func claimTmp(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// recordGitRoot notes the Git server's folder, outside the temporary
// folder, so that removeStale can remove it too.
func recordGitRoot(dir, gitRoot string) error {
	return os.WriteFile(filepath.Join(dir, gitRootFile), []byte(gitRoot), 0o644)
}

// removeStale removes the folders of demos whose process is gone.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPattern))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created, or not a demo's
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || alive(pid) {
			continue
		}
		if root, err := os.ReadFile(filepath.Join(dir, gitRootFile)); err == nil &&
			strings.HasPrefix(filepath.Base(string(root)), "rollgate-git-") {
			_ = os.RemoveAll(string(root))
		}
		_ = os.RemoveAll(dir)
	}
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
