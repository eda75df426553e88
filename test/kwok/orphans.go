package kwok

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Work folders are os.TempDir()/rollgate-kwok-*, and each records the
// process that created it. kwokctl daemonizes the components, so when that
// process dies without deleting its cluster (a test binary killed by `go test
// -timeout`, a demo interrupted by SIGKILL) they keep running; the next
// Create stops them.
const (
	workdirPattern = "rollgate-kwok-*"
	ownerFile      = "owner.pid"
)

// writeOwner records the current process as the owner of workdir.
func writeOwner(workdir string) error {
	return os.WriteFile(filepath.Join(workdir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// reapOrphans stops the components of clusters whose owner process is gone
// and removes their work folders. A component is killed only if its command
// line still names the orphaned folder, so a recycled pid is never hit.
func reapOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), workdirPattern))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created, or not ours
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || running(owner) {
			continue
		}
		pidFiles, _ := filepath.Glob(filepath.Join(dir, "clusters", "*", "pids", "*.pid"))
		for _, f := range pidFiles {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 1 {
				continue
			}
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err == nil && strings.Contains(string(cmdline), dir+string(filepath.Separator)) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(dir)
	}
}
